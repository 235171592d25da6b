/**
 * Crash suite on Azure Storage Queue (Azurite, in memory, a child process on 127.0.0.1): a worker
 * SIGKILLed at random points and restarted loses nothing, and repeats handler runs only within
 * the crash window. See support/crash.ts for the scenario and docs/reliability.md for the figures.
 */
import { QueueServiceClient } from '@azure/storage-queue';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { HAS_REDIS, RedisServer } from '../support/redis-server.js';
import { AzuriteQueue } from './support/azurite.js';
import { type CrashResult, runCrash } from './support/crash.js';
import { FULL, report, SIZES, seedFor, timeout } from './support/profile.js';

let azurite: AzuriteQueue | undefined;
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

const CONCURRENCY = 8;

function check(result: CrashResult): void {
  const f = result.figures;
  report(`crash-${f.queue}-${f.dedupe}`, {
    ...f,
    killed_at_handled: result.killedAt,
    ...result.scan.figures,
  });
  expect(f.lost, 'events never handled').toBe(0);
  expect(f.unexpected_ids).toBe(0);
  expect(f.handled_distinct).toBe(f.events);
  expect(f.repeated_runs, 'repeats beyond the crash window').toBeLessThanOrEqual(f.repeat_bound);
  expect(f.forged_accepted, 'forged events handled').toBe(0);
  expect(f.forged_dead_lettered, 'forged events not in the dead letters').toBe(f.forged_sent);
  expect(f.valid_dead_lettered).toBe(0);
  expect(f.final_exit_code, result.logTail).toBe(0);
  expect(result.scan.hits).toEqual([]);
}

describe('crash: worker SIGKILLed while consuming Storage Queue (Azurite)', () => {
  const { events, kills } = SIZES.crash;
  /** A fresh Azurite per run (in memory; its extent sweep off: support/azurite.ts). */
  const env = async () => {
    azurite = await AzuriteQueue.start();
    return {
      azurite: {
        connectionString: azurite.connectionString,
        service: QueueServiceClient.fromConnectionString(azurite.connectionString),
      },
      ...(redis ? { redisUrl: redis.url } : {}),
    };
  };

  // The small profile runs one dedupe store per queue (SQS × SQLite, Storage Queue × Redis).
  it.skipIf(!FULL)(
    `SQLite dedupe: ${events} events, ${kills} kills — none lost, no forgery handled, repeats ≤ kills × concurrency`,
    async () => {
      const result = await runCrash(
        {
          queue: 'storage-queue',
          dedupe: 'sqlite',
          events,
          kills,
          concurrency: CONCURRENCY,
          seed: seedFor('crash-storage-queue-sqlite'),
          finishTimeoutMs: timeout(30_000, 300_000),
        },
        await env(),
      );
      check(result);
    },
    timeout(60_000, 900_000),
  );

  it.skipIf(!HAS_REDIS)(
    `Redis dedupe: ${events} events, ${kills} kills — none lost, no forgery handled, repeats ≤ kills × concurrency`,
    async () => {
      const result = await runCrash(
        {
          queue: 'storage-queue',
          dedupe: 'redis',
          events,
          kills,
          concurrency: CONCURRENCY,
          seed: seedFor('crash-storage-queue-redis'),
          finishTimeoutMs: timeout(30_000, 300_000),
        },
        await env(),
      );
      check(result);
    },
    timeout(60_000, 900_000),
  );
});
