/**
 * (c) Dedupe stores alone: claim + complete pairs per second, one at a time (each awaited
 * before the next) and with 64 in flight (SQLite group-commits them; ioredis pipelines them).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../src/core/logger.js';
import { createRedisDedupe } from '../src/dedupe/redis.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import type { DedupeStore } from '../src/dedupe/types.js';
import { HAS_REDIS, RedisServer } from '../test/support/redis-server.js';

export interface DedupeBenchRow {
  store: 'sqlite' | 'redis';
  mode: 'one at a time' | '64 in flight';
  pairsPerSec: number;
}

let seq = 0;
async function pair(store: DedupeStore): Promise<void> {
  const id = `evt_${process.pid}_${++seq}_${Math.random().toString(36).slice(2)}`;
  const claim = await store.claim(id, 60_000);
  if (claim.status !== 'claimed') throw new Error(`unexpected ${claim.status}`);
  await store.complete(id, claim.token, 7 * 86_400_000);
}

async function measure(store: DedupeStore, n: number, inFlight: number): Promise<number> {
  const warm = Math.max(200, n / 10);
  for (let i = 0; i < warm; i++) await pair(store);
  const start = performance.now();
  let next = 0;
  const lane = async () => {
    while (next++ < n) await pair(store);
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
  return (n / (performance.now() - start)) * 1000;
}

export async function runDedupeBench(options: { quick: boolean }): Promise<DedupeBenchRow[]> {
  const n = options.quick ? 2000 : 20_000;
  const rows: DedupeBenchRow[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'phe-bench-dedupe-'));
  try {
    for (const [mode, inFlight] of [
      ['one at a time', 1],
      ['64 in flight', 64],
    ] as const) {
      const sqlite = createSqliteDedupe({ path: join(dir, `${inFlight}.db`) });
      rows.push({ store: 'sqlite', mode, pairsPerSec: await measure(sqlite, n, inFlight) });
      await sqlite.close();
    }
    if (HAS_REDIS) {
      const server = await RedisServer.start();
      try {
        for (const [mode, inFlight] of [
          ['one at a time', 1],
          ['64 in flight', 64],
        ] as const) {
          const redis = createRedisDedupe({ url: server.url, logger: silentLogger() });
          rows.push({ store: 'redis', mode, pairsPerSec: await measure(redis, n, inFlight) });
          await redis.close();
        }
      } finally {
        await server.stop();
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return rows;
}
