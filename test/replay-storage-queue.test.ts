/**
 * `replay azure-storage-queue:QUEUE-poison` against Azurite: the worker itself fills the poison
 * queue (what keeps failing after its attempts, what is malformed at once), then replay drains it:
 * done events are skipped and deleted, failures and forgeries stay on the queue, a dry run changes
 * nothing, and a replay SIGKILLed half-way loses nothing.
 */
import { join } from 'node:path';
import { type QueueClient, QueueServiceClient } from '@azure/storage-queue';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createStorageQueueAdapter } from '../adapters/storage-queue/index.js';
import { createConsumer } from '../src/consumer/consumer.js';
import {
  createTestEnvelope,
  forgedEnvelope,
  TEST_SIGNING_SECRET,
  type TestEnvelope,
} from '../src/consumer/testing.js';
import { silentLogger } from '../src/core/logger.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { Azurite } from './support/azurite.js';
import { runCli, startApp, startCli } from './support/cli.js';
import { tempDir } from './support/harness.js';
import { jsonLines, readJsonl } from './support/records.js';

/** Validly signed, but the envelope's event_id is not the body's: ENVELOPE_MISMATCH, dead at once. */
function mismatchedEnvelope(): TestEnvelope {
  const valid = createTestEnvelope('daily.data.steps.created');
  const envelope = { ...valid.envelope, event_id: 'not-the-body-event-id' };
  return { ...valid, raw: JSON.stringify(envelope), envelope };
}

let azurite: Azurite;
let dir: ReturnType<typeof tempDir>;
let poison: QueueClient;
let dedupePath: string;
const good = [
  createTestEnvelope('daily.data.steps.created'),
  createTestEnvelope('coach.nudge.created'),
  createTestEnvelope('daily.data.hrv.created'),
];
const forged = forgedEnvelope('daily.data.weight.created');
const mismatched = mismatchedEnvelope();
/** good[2] is done in the worker's store by the time replay runs. */
const done = good[2] as TestEnvelope;

/** Messages on the poison queue that another reader could take now. */
async function visible(): Promise<number> {
  return (await poison.peekMessages({ numberOfMessages: 32 })).peekedMessageItems.length;
}

/** Every message on the poison queue, hidden or not. */
async function stored(): Promise<number> {
  return (await poison.getProperties()).approximateMessagesCount ?? -1;
}

function replayArgs(args: string[]): string[] {
  return [
    'replay',
    `azure-storage-queue:${poison.name}`,
    '--dedupe',
    `sqlite:${dedupePath}`,
    '--settle-seconds',
    '1',
    '--dead-letter',
    join(dir.path, 'failed.jsonl'),
    ...args,
  ];
}

function cliOptions() {
  return { env: { AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString }, killAfterMs: 90_000 };
}

beforeAll(async () => {
  dir = tempDir('phe-replay-sq-');
  dedupePath = join(dir.path, 'dedupe.db');
  azurite = await Azurite.start('queue');
  const service = QueueServiceClient.fromConnectionString(azurite.connectionString);
  const queue = service.getQueueClient('orders');
  await queue.create();
  poison = service.getQueueClient('orders-poison');
  // The worker: its app fails every event, so each is copied to orders-poison (the mismatch at once).
  const consumer = createConsumer({
    source: createStorageQueueAdapter({
      queueClient: queue,
      pollIntervalMs: 10,
      maxPollIntervalMs: 100,
      logger: silentLogger(),
    }),
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    dedupe: createSqliteDedupe({ path: dedupePath }),
    deadLetter: join(dir.path, 'worker-dead.jsonl'),
    logger: silentLogger(),
    retry: { maxAttempts: 2, baseDelayMs: 0, maxDelayMs: 0 },
  });
  consumer.on('*', () => {
    throw new Error('the app is down');
  });
  await consumer.start();
  try {
    for (const e of [...good, forged, mismatched]) await queue.sendMessage(e.raw);
    await vi.waitFor(async () => expect(await poison.exists()).toBe(true), { timeout: 30_000, interval: 50 });
    await vi.waitFor(async () => expect(await visible()).toBe(5), { timeout: 30_000, interval: 50 });
  } finally {
    await consumer.stop();
  }
  const store = createSqliteDedupe({ path: dedupePath });
  const claim = await store.claim(done.eventId, 60_000);
  if (claim.status === 'claimed') await store.complete(done.eventId, claim.token, 3_600_000);
  await store.close();
}, 60_000);

afterAll(async () => {
  await azurite?.stop();
  dir?.cleanup();
});

describe('replay from a Storage Queue poison queue', () => {
  it('--dry-run judges every message and changes nothing', async () => {
    const result = await runCli(replayArgs(['--dry-run', '--json']), cliOptions());
    expect(result.code, result.stderr).toBe(1); // the forgery and the mismatch would be rejected
    const lines = jsonLines(result.stdout);
    expect(lines.at(-1)).toMatchObject({ total: 5, would_forward: 2, duplicates: 1, rejected: 2 });
    // A poison copy carries no code: --code selects none of them.
    expect(lines.filter((l) => l.action).every((l) => l.recorded_code === null)).toBe(true);
    expect(await visible()).toBe(5);
  }, 60_000);

  it('a failure leaves the message on the queue and in the dead-letter file; a done event is deleted', async () => {
    const failing = await startApp(() => 500);
    try {
      const result = await runCli(
        replayArgs(['--forward', failing.url, '--attempts', '1', '--json']),
        cliOptions(),
      );
      expect(result.code, result.stderr).toBe(1);
      expect(jsonLines(result.stdout).at(-1)).toMatchObject({
        total: 5,
        duplicates: 1,
        failed: 2,
        rejected: 2,
      });
      expect(failing.eventIds().sort()).toEqual([good[0], good[1]].map((e) => e?.eventId).sort());
      expect(
        readJsonl(join(dir.path, 'failed.jsonl'))
          .map((r) => r.code)
          .sort(),
      ).toEqual(['ENVELOPE_MISMATCH', 'HANDLER_FAILED', 'HANDLER_FAILED', 'SIGNATURE_MISMATCH']);
      expect(await visible()).toBe(4); // at once: released, not left to a visibility timeout
      expect(await stored()).toBe(4);
    } finally {
      await failing.close();
    }
  }, 60_000);

  it('a replay SIGKILLed half-way loses nothing; the second run sends only what was not done', async () => {
    const app = await startApp();
    try {
      // 20/min: one event every 3 s, so the kill lands between two sends.
      const first = startCli(
        replayArgs(['--forward', app.url, '--rate', '20/min', '--visibility-timeout', '2']),
        cliOptions(),
      );
      await vi.waitFor(async () => expect(await stored()).toBe(3), { timeout: 30_000, interval: 50 });
      first.child.kill('SIGKILL');
      await first.done;
      expect(app.received).toHaveLength(1);
      // What the killed run held is visible again once its visibility timeout (2 s) ends.
      const second = await runCli(
        replayArgs(['--forward', app.url, '--json', '--settle-seconds', '5']),
        cliOptions(),
      );
      expect(second.code, second.stderr).toBe(1);
      expect(jsonLines(second.stdout).at(-1)).toMatchObject({ total: 3, forwarded: 1, rejected: 2 });
      expect(app.eventIds().sort()).toEqual([good[0], good[1]].map((e) => e?.eventId).sort());
      expect(await visible()).toBe(2); // the forgery and the mismatch stay on the side channel
    } finally {
      await app.close();
    }
  }, 120_000);
});
