/**
 * Crash suite on SQS (fauxqs, in this process; the worker processes reach it on 127.0.0.1):
 * a worker SIGKILLed at random points and restarted loses nothing, and repeats handler runs only
 * within the crash window. See support/crash.ts for the scenario and docs/reliability.md for the
 * figures.
 */
import type { SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe } from 'vitest';
import { type FauxqsServer, fauxqsClient, startFauxqs } from '../support/fauxqs.js';
import { HAS_REDIS, RedisServer } from '../support/redis-server.js';
import { crashTest } from './support/crash-suite.js';
import { FULL } from './support/profile.js';

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

describe('crash: worker SIGKILLed while consuming SQS (fauxqs)', () => {
  crashTest('sqs', 'sqlite', () => ({ sqs: { client, endpoint: fauxqs.endpoint } }));
  // The small profile runs one dedupe store per queue (SQS × SQLite, Storage Queue × Redis).
  crashTest(
    'sqs',
    'redis',
    () => ({ sqs: { client, endpoint: fauxqs.endpoint }, redisUrl: redis?.url as string }),
    !HAS_REDIS || !FULL,
  );
});
