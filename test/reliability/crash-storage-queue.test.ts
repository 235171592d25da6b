/**
 * Crash suite on Azure Storage Queue (Azurite, in memory, a child process on 127.0.0.1): a worker
 * SIGKILLed at random points and restarted loses nothing, and repeats handler runs only within
 * the crash window. See support/crash.ts for the scenario and docs/reliability.md for the figures.
 */
import { QueueServiceClient } from '@azure/storage-queue';
import { afterAll, afterEach, beforeAll, describe } from 'vitest';
import { Azurite } from '../support/azurite.js';
import { HAS_REDIS, RedisServer } from '../support/redis-server.js';
import type { CrashEnvironment } from './support/crash.js';
import { crashTest } from './support/crash-suite.js';
import { FULL } from './support/profile.js';

let azurite: Azurite | undefined;
let redis: RedisServer | undefined;

beforeAll(async () => {
  if (HAS_REDIS) redis = await RedisServer.start();
});
afterEach(async () => {
  await azurite?.stop();
  azurite = undefined;
});
afterAll(async () => {
  await redis?.stop();
});

/** A fresh Azurite per run (in memory; its extent sweep off: test/support/azurite.ts). */
async function env(): Promise<CrashEnvironment> {
  azurite = await Azurite.start('queue', { withoutSweep: true });
  return {
    azurite: {
      connectionString: azurite.connectionString,
      service: QueueServiceClient.fromConnectionString(azurite.connectionString),
    },
    ...(redis ? { redisUrl: redis.url } : {}),
  };
}

describe('crash: worker SIGKILLed while consuming Storage Queue (Azurite)', () => {
  // The small profile runs one dedupe store per queue (SQS × SQLite, Storage Queue × Redis).
  crashTest('storage-queue', 'sqlite', env, !FULL);
  crashTest('storage-queue', 'redis', env, !HAS_REDIS);
});
