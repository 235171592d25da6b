/**
 * Crash suite on SQS (fauxqs, in this process; the worker processes reach it on 127.0.0.1):
 * a worker SIGKILLed at random points and restarted loses nothing, and repeats handler runs only
 * within the crash window. See support/crash.ts for the scenario and docs/reliability.md for the
 * figures.
 */
import type { SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FauxqsServer, fauxqsClient, startFauxqs } from '../support/fauxqs.js';
import { HAS_REDIS, RedisServer } from '../support/redis-server.js';
import { type CrashResult, runCrash } from './support/crash.js';
import { FULL, report, SIZES, seedFor, timeout } from './support/profile.js';

let fauxqs: FauxqsServer;
let client: SQSClient;
let redis: RedisServer | undefined;

beforeAll(async () => {
  fauxqs = await startFauxqs();
  client = fauxqsClient(fauxqs.endpoint);
  if (HAS_REDIS && FULL) redis = await RedisServer.start();
});
afterAll(async () => {
  client?.destroy();
  await fauxqs?.close();
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

describe('crash: worker SIGKILLed while consuming SQS (fauxqs)', () => {
  const { events, kills } = SIZES.crash;

  it(
    `SQLite dedupe: ${events} events, ${kills} kills — none lost, no forgery handled, repeats ≤ kills × concurrency`,
    async () => {
      const result = await runCrash(
        {
          queue: 'sqs',
          dedupe: 'sqlite',
          events,
          kills,
          concurrency: CONCURRENCY,
          seed: seedFor('crash-sqs-sqlite'),
          finishTimeoutMs: timeout(30_000, 300_000),
        },
        { sqs: { client, endpoint: fauxqs.endpoint } },
      );
      check(result);
    },
    timeout(60_000, 900_000),
  );

  // The small profile runs one dedupe store per queue (SQS × SQLite, Storage Queue × Redis).
  it.skipIf(!HAS_REDIS || !FULL)(
    `Redis dedupe: ${events} events, ${kills} kills — none lost, no forgery handled, repeats ≤ kills × concurrency`,
    async () => {
      const result = await runCrash(
        {
          queue: 'sqs',
          dedupe: 'redis',
          events,
          kills,
          concurrency: CONCURRENCY,
          seed: seedFor('crash-sqs-redis'),
          finishTimeoutMs: timeout(30_000, 300_000),
        },
        { sqs: { client, endpoint: fauxqs.endpoint }, redisUrl: redis?.url as string },
      );
      check(result);
    },
    timeout(60_000, 900_000),
  );
});
