/**
 * The dedupe contract on the wall clock, run against every store — including Redis, whose
 * leases and retention are kept by the server (no injectable clock). Times are real, with margins
 * that survive the process stalling for half a second anywhere (GC, a busy machine):
 * - a lease that must not run out during a test is a minute long (LIVE);
 * - a lease or retention that must run out is waited for well past its end (a stall only makes
 *   that wait longer);
 * - a lease kept alive is extended at a quarter of its length.
 * PARTNER_EVENTS_TEST_STALL_MS=500 blocks the process that long at each test's most fragile
 * point, to check those margins.
 */
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { silentLogger } from '../src/core/logger.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import { createRedisDedupe } from '../src/dedupe/redis.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { realTimeContract } from './support/dedupe-realtime-contract.js';
import { tempDir } from './support/harness.js';
import { HAS_REDIS, RedisServer } from './support/redis-server.js';

let redis: RedisServer | undefined;
beforeAll(async () => {
  if (HAS_REDIS) redis = await RedisServer.start();
});
afterAll(async () => {
  await redis?.stop();
});

const dirs: ReturnType<typeof tempDir>[] = [];
afterAll(() => {
  for (const d of dirs) d.cleanup();
});

realTimeContract('MemoryDedupeStore', () => createMemoryDedupe());
realTimeContract('SqliteDedupeStore', () => {
  const dir = tempDir('phe-rt-');
  dirs.push(dir);
  return createSqliteDedupe({ path: join(dir.path, 'dedupe.db') });
});
realTimeContract(
  'RedisDedupeStore',
  () => createRedisDedupe({ url: redis?.url ?? 'redis://127.0.0.1:1', logger: silentLogger() }),
  !HAS_REDIS,
);
