/**
 * `replay sqs:DLQ`: the worker itself fills a dead-letter queue (a redrive policy moves what keeps
 * failing; its `deadLetterQueue` setting sends what dies at once, with its code), then replay
 * drains it: done events are skipped and deleted, failures and forgeries stay on the queue, a
 * dry run changes nothing, and a replay SIGKILLed half-way loses nothing.
 */

import { join } from 'node:path';
import { GetQueueAttributesCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestEnvelope, forgedEnvelope, type TestEnvelope } from '../src/consumer/testing.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { runCli, startApp, startCli, startRun } from './support/cli.js';
import {
  createQueue,
  type FauxqsServer,
  fauxqsClient,
  fauxqsEnv,
  sqsCounts,
  startFauxqs,
} from './support/fauxqs.js';
import { tempDir } from './support/harness.js';
import { jsonLines, readJsonl } from './support/records.js';

/** Validly signed, but the envelope's event_id is not the body's: ENVELOPE_MISMATCH, dead at once. */
function mismatchedEnvelope(): TestEnvelope {
  const valid = createTestEnvelope('daily.data.steps.created');
  const envelope = { ...valid.envelope, event_id: 'not-the-body-event-id' };
  return { ...valid, raw: JSON.stringify(envelope), envelope };
}

let fauxqs: FauxqsServer;
let client: ReturnType<typeof fauxqsClient>;
let dir: ReturnType<typeof tempDir>;
let dlq: { url: string; name: string };
let env: NodeJS.ProcessEnv;
let dedupe: string;
const good = [
  createTestEnvelope('daily.data.steps.created'),
  createTestEnvelope('coach.nudge.created'),
  createTestEnvelope('daily.data.hrv.created'),
];
const forged = forgedEnvelope('daily.data.weight.created');
const mismatched = mismatchedEnvelope();
/** good[2] is done in the worker's store by the time replay runs (say its ack was lost). */
const done = good[2] as TestEnvelope;

/** Messages on the DLQ (visible or not), once none is in flight. */
async function settledCount(): Promise<number> {
  let counts = await sqsCounts(client, dlq.url);
  await vi.waitFor(
    async () => {
      counts = await sqsCounts(client, dlq.url);
      expect(counts.inFlight).toBe(0);
    },
    { timeout: 20_000, interval: 100 },
  );
  return counts.visible;
}

function replay(args: string[]) {
  const deadLetter = ['--dead-letter', join(dir.path, 'replay-failed.jsonl')];
  return runCli(
    ['replay', `sqs:${dlq.url}`, '--dedupe', dedupe, '--settle-seconds', '1', ...deadLetter, ...args],
    {
      env,
      killAfterMs: 90_000,
    },
  );
}

beforeAll(async () => {
  dir = tempDir('phe-replay-sqs-');
  fauxqs = await startFauxqs();
  client = fauxqsClient(fauxqs.endpoint);
  env = fauxqsEnv(fauxqs.endpoint);
  dedupe = `sqlite:${join(dir.path, 'dedupe.db')}`;
  dlq = await createQueue(client, 'dlq');
  const { Attributes } = await client.send(
    new GetQueueAttributesCommand({ QueueUrl: dlq.url, AttributeNames: ['QueueArn'] }),
  );
  const main = await createQueue(client, 'main', {
    RedrivePolicy: JSON.stringify({ deadLetterTargetArn: Attributes?.QueueArn, maxReceiveCount: 2 }),
  });
  // The app is down: the worker retries, and SQS moves each message on after its second receive.
  const down = await startApp(() => 503);
  const worker = await startRun(
    [
      '--source',
      `sqs:${main.url}`,
      '--forward',
      down.url,
      '--dedupe',
      dedupe,
      '--dead-letter',
      join(dir.path, 'worker-dead.jsonl'),
    ],
    { env: { ...env, PARTNER_EVENTS_SQS_DEAD_LETTER_QUEUE: dlq.url } },
  );
  try {
    for (const e of [...good, forged, mismatched]) {
      await client.send(new SendMessageCommand({ QueueUrl: main.url, MessageBody: e.raw }));
    }
    // The worker must receive a message once more for SQS to move it: it polls on its own.
    await vi.waitFor(async () => expect((await sqsCounts(client, dlq.url)).visible).toBe(5), {
      timeout: 60_000,
      interval: 200,
    });
  } finally {
    await worker.stop();
    await down.close();
  }
  const store = createSqliteDedupe({ path: join(dir.path, 'dedupe.db') });
  const claim = await store.claim(done.eventId, 60_000);
  if (claim.status === 'claimed') await store.complete(done.eventId, claim.token, 3_600_000);
  await store.close();
}, 90_000);

afterAll(async () => {
  client?.destroy();
  await fauxqs?.close();
  dir?.cleanup();
});

describe('replay from an SQS dead-letter queue', () => {
  it('--dry-run judges every message and changes nothing; --code selects by the recorded code', async () => {
    const result = await replay(['--dry-run', '--json']);
    const lines = jsonLines(result.stdout);
    expect(result.code, result.stderr).toBe(1); // the forgery and the mismatch would be rejected
    expect(lines.at(-1)).toMatchObject({
      total: 5,
      would_forward: 2,
      duplicates: 1,
      rejected: 2,
      dry_run: true,
    });
    const rows = lines.filter((l) => l.action);
    expect(rows.every((l) => typeof l.message_id === 'string')).toBe(true);
    // The worker sent the one that died at once with its code; SQS moved the others without one.
    expect(rows.filter((l) => l.recorded_code !== null).map((l) => [l.recorded_code, l.action])).toEqual([
      ['ENVELOPE_MISMATCH', 'reject'],
    ]);
    expect(await settledCount()).toBe(5);
    const coded = await replay(['--dry-run', '--json', '--code', 'ENVELOPE_MISMATCH']);
    expect(jsonLines(coded.stdout).at(-1)).toMatchObject({ total: 1, rejected: 1, filtered_out: 4 });
    expect(await settledCount()).toBe(5);
  }, 60_000);

  it('messages the filters leave out are visible again at once; --max caps what is read', async () => {
    const app = await startApp();
    try {
      const result = await replay(['--forward', app.url, '--type', 'no.such.type', '--json']);
      expect(result.code, result.stderr).toBe(0);
      expect(jsonLines(result.stdout).at(-1)).toMatchObject({ total: 0, filtered_out: 5 });
      expect(app.received).toHaveLength(0);
      expect(await settledCount()).toBe(5);
      const capped = await replay(['--dry-run', '--json', '--max', '2']);
      expect(jsonLines(capped.stdout).at(-1)).toMatchObject({ total: 2 });
      expect(await settledCount()).toBe(5);
    } finally {
      await app.close();
    }
  }, 60_000);

  it('a failure leaves the message on the queue and in the dead-letter file; a done event is deleted', async () => {
    const failing = await startApp(() => 500);
    const deadLetter = join(dir.path, 'failed-1.jsonl');
    try {
      const result = await replay([
        '--forward',
        failing.url,
        '--attempts',
        '1',
        '--dead-letter',
        deadLetter,
        '--json',
      ]);
      expect(result.code, result.stderr).toBe(1);
      expect(jsonLines(result.stdout).at(-1)).toMatchObject({
        total: 5,
        forwarded: 0,
        duplicates: 1,
        failed: 2,
        rejected: 2,
        dead_letter_file: deadLetter,
      });
      expect(
        readJsonl(deadLetter)
          .map((r) => r.code)
          .sort(),
      ).toEqual(['ENVELOPE_MISMATCH', 'HANDLER_FAILED', 'HANDLER_FAILED', 'SIGNATURE_MISMATCH']);
      // Forged and mismatched envelopes were never forwarded.
      expect(failing.eventIds().sort()).toEqual([good[0], good[1]].map((e) => e?.eventId).sort());
      expect(await settledCount()).toBe(4); // the done event is gone, the rest stay
      // One audit record per replay, beside the dead-letter file.
      const audit = readJsonl(join(dir.path, 'partner-events-replays.jsonl'));
      expect(audit.at(-1)).toMatchObject({ dry_run: false, exit_code: 1, counts: { failed: 2 } });
      expect(String(audit.at(-1)?.source)).toContain(dlq.url.replace(/^https?:\/\//, '').split('/')[0]);
    } finally {
      await failing.close();
    }
  }, 60_000);

  it('a replay SIGKILLed half-way loses nothing; the second run sends only what was not done', async () => {
    const app = await startApp();
    try {
      // 20/min: one event every 3 s, so the kill lands between two sends.
      const first = startCli(
        [
          'replay',
          `sqs:${dlq.url}`,
          '--dedupe',
          dedupe,
          '--forward',
          app.url,
          '--rate',
          '20/min',
          '--visibility-timeout',
          '2',
          '--dead-letter',
          join(dir.path, 'killed.jsonl'),
          '--json',
        ],
        { env, killAfterMs: 90_000 },
      );
      await vi.waitFor(
        async () =>
          expect(
            (await sqsCounts(client, dlq.url)).visible + (await sqsCounts(client, dlq.url)).inFlight,
          ).toBe(3),
        {
          timeout: 30_000,
          interval: 50,
        },
      );
      first.child.kill('SIGKILL');
      await first.done;
      expect(app.received).toHaveLength(1);
      // What the killed run held comes back once its visibility timeout (2 s) ends: the second
      // run waits longer than that for messages before it calls the queue drained.
      const second = await replay(['--forward', app.url, '--json', '--settle-seconds', '5']);
      expect(second.code, second.stderr).toBe(1); // the two bad ones, again
      expect(jsonLines(second.stdout).at(-1)).toMatchObject({ total: 3, forwarded: 1, rejected: 2 });
      expect(app.eventIds().sort()).toEqual([good[0], good[1]].map((e) => e?.eventId).sort());
      expect(await settledCount()).toBe(2); // the forgery and the mismatch stay on the side channel
    } finally {
      await app.close();
    }
  }, 120_000);
});
