import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  type ChangeMessageVisibilityBatchCommandInput,
  type ChangeMessageVisibilityBatchRequestEntry,
  type DeleteMessageBatchCommandInput,
  type DeleteMessageBatchCommandOutput,
  type Message,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  createSqsAdapter,
  isSqsSourceSpec,
  type SqsAdapter,
  type SqsAdapterOptions,
  type SqsMessage,
  sqsSourceFromCli,
} from '../adapters/sqs/index.js';
import {
  type Consumer,
  type ConsumerOptions,
  createConsumer,
  type SettledReport,
} from '../src/consumer/consumer.js';
import { createTestEnvelope, staleEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { ConfigError } from '../src/core/errors.js';
import { silentLogger } from '../src/core/logger.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { createQueue, type FauxqsServer, fauxqsClient, sqsCounts, startFauxqs } from './support/fauxqs.js';
import { tempDir } from './support/harness.js';
import { recordSpans } from './support/spans.js';

let server: FauxqsServer;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  server = await startFauxqs();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(async () => {
  await server.close();
});

/** One SQS call as the client sent it (recorded by a middleware), and how it ended. */
interface Call {
  readonly command: string;
  readonly input: Record<string, unknown>;
  /** Unset while the call is pending; `messages` counts what a receive got. */
  end?:
    | { readonly kind: 'answered'; readonly messages: number }
    | { readonly kind: 'failed'; readonly error: string };
}

/** A fauxqs client that records every call; `intercept` may rewrite a call and its answer. */
function recordingClient(
  intercept?: (command: string, input: Record<string, unknown>) => Interception | undefined,
): { client: SQSClient; calls: Call[] } {
  const client = fauxqsClient(server.endpoint);
  const calls: Call[] = [];
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const command = context.commandName ?? 'unknown';
      let input = args.input as Record<string, unknown>;
      const interception = intercept?.(command, input);
      if (interception?.input) input = interception.input;
      const call: Call = { command, input };
      calls.push(call);
      let result: Awaited<ReturnType<typeof next>>;
      try {
        result = await next({ ...args, input: input as typeof args.input });
      } catch (error) {
        call.end = { kind: 'failed', error: error instanceof Error ? error.name : String(error) };
        throw error;
      }
      const { Messages } = result.output as { Messages?: unknown[] };
      call.end = { kind: 'answered', messages: Messages?.length ?? 0 };
      if (interception?.output) interception.output(result.output as unknown as Record<string, unknown>);
      return result;
    },
    { step: 'initialize', name: 'recordCalls' },
  );
  cleanups.push(() => client.destroy());
  return { client, calls };
}

interface Interception {
  readonly input?: Record<string, unknown>;
  readonly output?: (output: Record<string, unknown>) => void;
}

interface Setup {
  readonly queueUrl: string;
  readonly client: SQSClient;
  readonly calls: Call[];
  readonly adapter: SqsAdapter;
  readonly consumer: Consumer<SqsMessage>;
  readonly reports: SettledReport<SqsMessage>[];
  readonly deadLetterPath: string;
}

/** A fresh queue, an adapter on it and a consumer with fast retries, a temp dead-letter file, no logs. */
async function setup(
  options: {
    adapter?: Partial<SqsAdapterOptions>;
    consumer?: Partial<ConsumerOptions<SqsMessage>>;
    queue?: string;
    intercept?: Parameters<typeof recordingClient>[0];
  } = {},
): Promise<Setup> {
  const { client, calls } = recordingClient(options.intercept);
  const queue = await createQueue(client, options.queue ?? 'events');
  const dir = tempDir('phe-sqs-');
  const adapter = createSqsAdapter({
    queueUrl: queue.url,
    client,
    waitTimeSeconds: 1,
    ...options.adapter,
  });
  const reports: SettledReport<SqsMessage>[] = [];
  const deadLetterPath = join(dir.path, 'dead.jsonl');
  const consumer = createConsumer<SqsMessage>({
    source: adapter,
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    dedupe: createMemoryDedupe(),
    deadLetter: deadLetterPath,
    logger: silentLogger(),
    retry: { maxAttempts: 3, baseDelayMs: 0, maxDelayMs: 0 },
    ...options.consumer,
    onSettled: (report) => reports.push(report),
  });
  cleanups.push(async () => {
    await consumer.stop();
    dir.cleanup();
  });
  return { queueUrl: queue.url, client, calls, adapter, consumer, reports, deadLetterPath };
}

/** Sends the bodies (10 per SendMessageBatch); returns their MessageIds in order. */
async function send(client: SQSClient, queueUrl: string, bodies: readonly string[]): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < bodies.length; i += 10) {
    const chunk = bodies.slice(i, i + 10);
    const out = await client.send(
      new SendMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: chunk.map((MessageBody, j) => ({ Id: String(j), MessageBody })),
      }),
    );
    expect(out.Failed ?? []).toEqual([]);
    const byId = new Map((out.Successful ?? []).map((s) => [s.Id, s.MessageId]));
    chunk.forEach((_, j) => {
      ids.push(byId.get(String(j)) as string);
    });
  }
  return ids;
}

/** Everything visible on a queue right now, received by a bystander (who does not delete it). */
async function peekAll(client: SQSClient, queueUrl: string, waitTimeSeconds = 0) {
  const { Messages = [] } = await client.send(
    new ReceiveMessageCommand({
      QueueUrl: queueUrl,
      MaxNumberOfMessages: 10,
      WaitTimeSeconds: waitTimeSeconds,
      VisibilityTimeout: 30,
      MessageAttributeNames: ['All'],
      MessageSystemAttributeNames: ['ApproximateReceiveCount', 'SentTimestamp'],
    }),
  );
  return Messages;
}

const ackedHandled = (r: SettledReport<SqsMessage>) =>
  r.outcome.kind === 'ack' && r.outcome.result === 'handled';

/** The `Entries` of a batch call. */
function entriesOf(call: Call | undefined): ChangeMessageVisibilityBatchRequestEntry[] {
  return (call?.input.Entries ?? []) as ChangeMessageVisibilityBatchRequestEntry[];
}

/** The ReceiveMessage calls still waiting for their answer. */
function openPolls(calls: readonly Call[]): Call[] {
  return calls.filter((c) => c.command === 'ReceiveMessageCommand' && c.end === undefined);
}

/** Receipt handles of every delete the client sent, batched or not. */
function deletedHandles(calls: readonly Call[]): string[] {
  return calls.flatMap((c) => {
    if (c.command === 'DeleteMessageCommand') return [String(c.input.ReceiptHandle)];
    if (c.command === 'DeleteMessageBatchCommand') {
      return entriesOf(c).map((e) => String(e.ReceiptHandle));
    }
    return [];
  });
}

describe('SqsAdapter through the consumer (fauxqs)', () => {
  it('happy path: verifies, de-duplicates in SQLite, hands each event over once and deletes every message', async () => {
    const dir = tempDir('phe-sqs-sqlite-');
    cleanups.push(() => dir.cleanup());
    const s = await setup({
      consumer: { dedupe: createSqliteDedupe({ path: join(dir.path, 'dedupe.sqlite') }), concurrency: 16 },
    });
    const events = Array.from({ length: 25 }, (_, i) =>
      createTestEnvelope(i % 2 ? 'daily.data.heart_rate.created' : 'daily.data.steps.created'),
    );
    const sentBefore = Date.now();
    const ids = await send(
      s.client,
      s.queueUrl,
      events.map((e) => e.raw),
    );
    const seen: string[] = [];
    s.consumer.on('*', (event) => {
      seen.push(event.event_id);
    });
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports.filter(ackedHandled)).toHaveLength(25), { timeout: 5000 });

    expect(seen.sort()).toEqual(events.map((e) => e.eventId).sort());
    const first = s.reports.find((r) => r.eventId === events[0]?.eventId)?.message;
    expect(first).toMatchObject({
      id: ids[0],
      body: events[0]?.raw,
      attempt: 1,
      metadata: { queue: expect.stringMatching(/^events-/), receive_count: 1, sqs_message_id: ids[0] },
    });
    expect(first?.enqueuedAt).toBeGreaterThanOrEqual(sentBefore - 1000);
    expect(first?.enqueuedAt).toBeLessThanOrEqual(Date.now());
    await vi.waitFor(async () =>
      expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 }),
    );
  });

  it('a failed handler leaves the message on the queue; it reappears after the retry delay and succeeds', async () => {
    const s = await setup({ consumer: { retry: { maxAttempts: 5, baseDelayMs: 1000, maxDelayMs: 1000 } } });
    const event = createTestEnvelope('daily.data.steps.created');
    await send(s.client, s.queueUrl, [event.raw]);
    const attempts: { attempt: number; at: number }[] = [];
    s.consumer.on('daily.data.steps.created', (_e, ctx) => {
      attempts.push({ attempt: ctx.attempt, at: Date.now() });
      if (attempts.length === 1) throw new Error('app down');
    });
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports.some(ackedHandled)).toBe(true), { timeout: 5000 });

    expect(s.reports.map((r) => r.outcome.kind)).toEqual(['retry', 'ack']);
    expect(attempts.map((a) => a.attempt)).toEqual([1, 2]);
    // Backoff of 500–1000 ms, rounded up to whole seconds by SQS visibility: 1 s.
    expect((attempts[1]?.at ?? 0) - (attempts[0]?.at ?? 0)).toBeGreaterThanOrEqual(900);
    const retry = s.calls.find((c) => c.command === 'ChangeMessageVisibilityBatchCommand');
    expect(entriesOf(retry)).toEqual([expect.objectContaining({ VisibilityTimeout: 1 })]);
    expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('poison: dead-lettered to the file and the DLQ after N receives, then gone from the queue; malformed at once', async () => {
    const { client } = recordingClient();
    const dlq = await createQueue(client, 'events-dlq');
    const s = await setup({ adapter: { deadLetterQueue: dlq.url } });
    const poison = createTestEnvelope('daily.data.steps.created');
    const malformed = '{"event_id": "evt_1", "not": "an envelope"';
    const [poisonId, malformedId] = await send(s.client, s.queueUrl, [poison.raw, malformed]);
    s.consumer.on('*', () => {
      throw new Error('always fails');
    });
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports.filter((r) => r.outcome.kind === 'dead')).toHaveLength(2), {
      timeout: 5000,
    });
    await s.consumer.stop();

    expect(s.reports.filter((r) => r.message.id === poisonId).map((r) => r.message.attempt)).toEqual([
      1, 2, 3,
    ]);
    const records = readFileSync(s.deadLetterPath, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(records).toHaveLength(2);
    expect(records.find((r) => r.message_id === poisonId)).toMatchObject({
      code: 'HANDLER_FAILED',
      attempts: 3,
      raw: poison.raw,
      event_id: poison.eventId,
      metadata: { receive_count: 3 },
    });
    expect(records.find((r) => r.message_id === malformedId)).toMatchObject({
      code: 'MALFORMED_ENVELOPE',
      attempts: 1,
      raw: malformed,
    });
    expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });

    const onDlq = await peekAll(client, dlq.url);
    expect(onDlq.map((m) => m.Body).sort()).toEqual([poison.raw, malformed].sort());
    const poisonOnDlq = onDlq.find((m) => m.Body === poison.raw);
    expect(poisonOnDlq?.MessageAttributes).toMatchObject({
      partner_events_code: { DataType: 'String', StringValue: 'HANDLER_FAILED' },
      partner_events_message_id: { StringValue: poisonId },
      partner_events_attempts: { DataType: 'Number', StringValue: '3' },
      partner_events_source: { StringValue: s.adapter.name },
    });
  });

  it('duplicate deliveries (the same message sent again, a re-signed retry) run the handler once', async () => {
    const s = await setup({ consumer: { concurrency: 4 } });
    const event = createTestEnvelope('daily.data.heart_rate.created');
    const resigned = createTestEnvelope('daily.data.heart_rate.created', {
      fields: event.event,
      signedAt: Math.floor(Date.now() / 1000) - 30,
    });
    const handler = vi.fn();
    s.consumer.on('daily.data.heart_rate.created', handler);
    await send(s.client, s.queueUrl, [event.raw, event.raw, resigned.raw, event.raw]);
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports.filter((r) => r.outcome.kind === 'ack')).toHaveLength(4), {
      timeout: 5000,
    });

    expect(handler).toHaveBeenCalledOnce();
    const acks = s.reports.flatMap((r) => (r.outcome.kind === 'ack' ? [r.outcome.result] : []));
    expect(acks.sort()).toEqual(['duplicate', 'duplicate', 'duplicate', 'handled']);
    // Copies that arrived while the first was being handled were put back, not acked blindly.
    const others = s.reports.filter((r) => r.outcome.kind !== 'ack').map((r) => r.outcome);
    expect(others).toEqual(others.map(() => expect.objectContaining({ kind: 'retry', code: 'IN_PROGRESS' })));
    expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('a backlog older than 5 minutes is accepted (age = SentTimestamp − signed_at); an old envelope re-sent now is not', async () => {
    // The consumer's clock is 10 minutes ahead: it was down while these queued up.
    const s = await setup({ consumer: { now: () => Date.now() + 10 * 60_000 } });
    const backlog = createTestEnvelope('daily.data.steps.created');
    const replayed = staleEnvelope('daily.data.steps.created', 600);
    const handler = vi.fn();
    s.consumer.on('*', handler);
    await send(s.client, s.queueUrl, [backlog.raw, replayed.raw]);
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports).toHaveLength(2), { timeout: 5000 });

    const byEvent = (id: string) => s.reports.find((r) => r.message.body.includes(id))?.outcome;
    expect(byEvent(backlog.eventId)).toEqual({ kind: 'ack', result: 'handled' });
    expect(byEvent(replayed.eventId)).toMatchObject({ kind: 'dead', code: 'TIMESTAMP_TOO_OLD' });
    expect(handler).toHaveBeenCalledOnce();
  });

  it('with strictAge, the same backlog is measured against the clock and rejected', async () => {
    const s = await setup({ consumer: { now: () => Date.now() + 10 * 60_000, strictAge: true } });
    await send(s.client, s.queueUrl, [createTestEnvelope('daily.data.steps.created').raw]);
    s.consumer.on('*', vi.fn());
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports).toHaveLength(1), { timeout: 5000 });
    expect(s.reports[0]?.outcome).toMatchObject({ kind: 'dead', code: 'TIMESTAMP_TOO_OLD' });
  });

  it('the heartbeat keeps a slow handler’s message invisible well past the visibility timeout', async () => {
    const s = await setup({
      adapter: { visibilityTimeoutSeconds: 1, heartbeatIntervalSeconds: 0.3 },
    });
    const event = createTestEnvelope('daily.data.steps.created');
    await send(s.client, s.queueUrl, [event.raw]);
    const handler = vi.fn(() => new Promise((resolve) => setTimeout(resolve, 2500)));
    s.consumer.on('*', handler);
    await s.consumer.start();
    await vi.waitFor(() => expect(handler).toHaveBeenCalledOnce());

    // A competing consumer long-polls for 2 s: twice the visibility timeout, and gets nothing.
    const { client: bystander } = recordingClient();
    expect(await peekAll(bystander, s.queueUrl, 2)).toEqual([]);
    await vi.waitFor(() => expect(s.reports.some(ackedHandled)).toBe(true), { timeout: 3000 });

    const beats = s.calls.filter((c) => c.command === 'ChangeMessageVisibilityBatchCommand');
    expect(beats.length).toBeGreaterThanOrEqual(5);
    for (const beat of beats) {
      expect(entriesOf(beat)).toEqual([expect.objectContaining({ VisibilityTimeout: 1 })]);
    }
    expect(handler).toHaveBeenCalledOnce();
    expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('when a heartbeat cannot extend the visibility, the handler is aborted and the message is not deleted', async () => {
    // SQS answers the heartbeats (VisibilityTimeout 7) as if the message were no longer in flight;
    // the retry that follows (VisibilityTimeout 0) goes through.
    const s = await setup({
      adapter: { visibilityTimeoutSeconds: 7, heartbeatIntervalSeconds: 0.2 },
      consumer: { leaseMs: 300 },
      intercept: (command, input) =>
        command === 'ChangeMessageVisibilityBatchCommand' &&
        (input as unknown as ChangeMessageVisibilityBatchCommandInput).Entries?.every(
          (e) => e.VisibilityTimeout === 7,
        )
          ? {
              output: (out) => {
                const entries = (out.Successful ?? []) as { Id: string }[];
                if (entries.length === 0) return;
                out.Failed = entries.map(({ Id }) => ({
                  Id,
                  SenderFault: true,
                  Code: 'MessageNotInflight',
                  Message: 'gone',
                }));
                out.Successful = [];
              },
            }
          : undefined,
    });
    const event = createTestEnvelope('daily.data.steps.created');
    await send(s.client, s.queueUrl, [event.raw]);
    const aborted = vi.fn();
    s.consumer.on('*', (_e, ctx) => {
      if (ctx.attempt > 1) return;
      return new Promise<void>((resolve) => {
        ctx.signal.addEventListener('abort', () => {
          aborted(ctx.signal.reason);
          resolve();
        });
      });
    });
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports.length).toBeGreaterThan(0), { timeout: 3000 });
    expect(aborted).toHaveBeenCalledOnce();
    expect(s.reports[0]?.outcome).toMatchObject({ kind: 'retry', code: 'LEASE_LOST', delayMs: 0 });
    // The aborted delivery is never deleted; the redelivery (a new receipt handle) handles it.
    const abortedHandle = s.reports[0]?.message.receiptHandle;
    await vi.waitFor(() => expect(s.reports.some(ackedHandled)).toBe(true), { timeout: 5000 });
    const deleted = deletedHandles(s.calls);
    expect(deleted).toHaveLength(1);
    expect(deleted).not.toContain(abortedHandle);
  });

  it('graceful stop: cuts a 20 s poll short, deletes only what was handled, unfinished messages are visible again', async () => {
    const s = await setup({
      adapter: { waitTimeSeconds: 20 },
      consumer: { concurrency: 8, shutdownTimeoutMs: 200 },
    });
    const fast = Array.from({ length: 3 }, () => createTestEnvelope('daily.data.heart_rate.created'));
    const stuck = Array.from({ length: 3 }, () => createTestEnvelope('daily.data.steps.created'));
    const started = vi.fn();
    s.consumer.on('daily.data.heart_rate.created', () => {});
    s.consumer.on(
      'daily.data.steps.created',
      (_e, ctx) =>
        new Promise<void>((resolve) => {
          started();
          ctx.signal.addEventListener('abort', () => resolve());
        }),
    );
    await send(
      s.client,
      s.queueUrl,
      [...fast, ...stuck].map((e) => e.raw),
    );
    await s.consumer.start();
    await vi.waitFor(() => {
      expect(started).toHaveBeenCalledTimes(3);
      expect(s.reports.filter(ackedHandled)).toHaveLength(3);
      expect(openPolls(s.calls)).toHaveLength(1); // the next 20 s poll, on an empty queue
    });
    const [poll] = openPolls(s.calls);

    await s.consumer.stop();
    // A poll on an empty queue answers empty only when its 20 s are up: the stop ended it
    // (aborted, or answered with the messages the stop handed back), it did not wait it out.
    expect(poll?.end).not.toEqual({ kind: 'answered', messages: 0 });
    expect(poll?.end).toBeDefined(); // and left no request open

    const handled = s.reports.filter(ackedHandled).map((r) => r.message.receiptHandle);
    expect(deletedHandles(s.calls).sort()).toEqual(handled.sort());
    expect(s.reports.filter((r) => r.outcome.kind === 'retry').map((r) => r.outcome)).toEqual(
      Array(3).fill(expect.objectContaining({ code: 'SHUTDOWN', delayMs: 0 })),
    );
    expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 3, inFlight: 0, delayed: 0 });
    const left = await peekAll(s.client, s.queueUrl);
    expect(left.map((m) => m.Body).sort()).toEqual(stuck.map((e) => e.raw).sort());
  });

  it('gathers acks of concurrent handlers into few DeleteMessageBatch calls, retrying an entry SQS reports failed', async () => {
    let failedOnce: string | undefined;
    const s = await setup({
      consumer: { concurrency: 32 },
      // The first DeleteMessageBatch: SQS keeps its first entry and reports it failed (a server fault).
      intercept: (command, input) => {
        if (command !== 'DeleteMessageBatchCommand' || failedOnce !== undefined) return undefined;
        const { Entries = [] } = input as unknown as DeleteMessageBatchCommandInput;
        const [dropped, ...kept] = Entries;
        if (!dropped) return undefined;
        failedOnce = dropped.ReceiptHandle;
        return {
          input: { ...input, Entries: kept },
          output: (out) => {
            (out as unknown as DeleteMessageBatchCommandOutput).Failed = [
              { Id: dropped.Id, SenderFault: false, Code: 'InternalError', Message: 'try again' },
            ];
          },
        };
      },
    });
    s.consumer.on('*', () => {});
    await send(
      s.client,
      s.queueUrl,
      Array.from({ length: 100 }, () => createTestEnvelope('daily.data.steps.created').raw),
    );
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports.filter(ackedHandled)).toHaveLength(100), { timeout: 8000 });

    const deletes = s.calls.filter((c) => c.command.startsWith('DeleteMessage'));
    expect(deletes.every((c) => c.command === 'DeleteMessageBatchCommand')).toBe(true);
    expect(deletes.length).toBeLessThanOrEqual(20);
    // Left out of the first call (as SQS did not delete it), it went in a later one.
    expect(entriesOf(deletes[0]).some((e) => e.ReceiptHandle === failedOnce)).toBe(false);
    expect(deletedHandles(s.calls).filter((h) => h === failedOnce)).toHaveLength(1);
    expect(new Set(deletedHandles(s.calls)).size).toBe(100);
    expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('maxInFlightBytes: several pollers together hold no more than the bound, and ask SQS for no more', async () => {
    const pad = 'x'.repeat(8_000);
    const bodies = Array.from(
      { length: 40 },
      () => createTestEnvelope('daily.data.steps.created', { fields: { raw_data: { pad } } }).raw,
    );
    const size = (bodies[0] as string).length;
    // concurrency 40 runs four pollers (10 per receive); the bound leaves room for 6 messages.
    const s = await setup({ consumer: { concurrency: 40, maxInFlightBytes: 6 * size } });
    const held: (() => void)[] = [];
    let calls = 0;
    let most = 0; // in flight as each handler after the first batch starts
    s.consumer.on('*', async () => {
      if (++calls > 10) most = Math.max(most, s.consumer.status.inFlight);
      await new Promise<void>((resolve) => held.push(resolve));
    });
    const releaseAll = () => {
      for (const release of held.splice(0)) release();
    };
    // Before any size is known, one receive at a time: the first one, a full batch of 10.
    await send(s.client, s.queueUrl, bodies.slice(0, 10));
    await s.consumer.start();
    await vi.waitFor(() => expect(held.length).toBe(10), { timeout: 8000 });
    await send(s.client, s.queueUrl, bodies.slice(10));
    // Long enough for the other pollers to come back had the bound not held them.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(held.length).toBe(10);
    releaseAll();
    // Then no more than the room: 6 at most in flight, asked for in receives of 6 at most.
    await vi.waitFor(
      () => {
        releaseAll();
        expect(s.reports.filter(ackedHandled)).toHaveLength(40);
      },
      { timeout: 8000, interval: 10 },
    );
    expect(most).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(6);
    const asked = s.calls
      .filter((c) => c.command === 'ReceiveMessageCommand')
      .map((c) => c.input.MaxNumberOfMessages as number);
    expect(asked[0]).toBe(10);
    expect(Math.max(...asked.slice(1))).toBeLessThanOrEqual(6);
    expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('FIFO: keeps the message group in the metadata and dead-letters to a FIFO DLQ', async () => {
    const { client } = recordingClient();
    const dlq = await createQueue(client, 'dead.fifo');
    const s = await setup({ queue: 'events.fifo', adapter: { deadLetterQueue: dlq.url } });
    await s.client.send(
      new SendMessageBatchCommand({
        QueueUrl: s.queueUrl,
        Entries: [
          { Id: 'a', MessageBody: 'not an envelope', MessageGroupId: 'user-1', MessageDeduplicationId: 'a' },
        ],
      }),
    );
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports).toHaveLength(1), { timeout: 5000 });
    expect(s.reports[0]?.message.metadata).toMatchObject({ message_group_id: 'user-1' });
    expect(s.reports[0]?.outcome).toMatchObject({ kind: 'dead', code: 'MALFORMED_ENVELOPE' });
    const onDlq = await peekAll(client, dlq.url);
    expect(onDlq.map((m) => m.Body)).toEqual(['not an envelope']);
  });
});

/** A logger that keeps what it logs at warn and above, parsed. */
function capturedLogs() {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) });
  return { logger, lines };
}

/** Bytes of a message as SQS counts them against MaximumMessageSize: body, and each attribute's name, type and value. */
function sqsMessageBytes(message: Message): number {
  let bytes = Buffer.byteLength(message.Body ?? '');
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    bytes += Buffer.byteLength(name) + Buffer.byteLength(value.DataType ?? '');
    bytes += Buffer.byteLength(value.StringValue ?? '');
  }
  return bytes;
}

/** The adapter's reads of a queue's MaximumMessageSize (the tests' own counts ask for others). */
const limitReads = (calls: readonly Call[]) =>
  calls.filter(
    (c) =>
      c.command === 'GetQueueAttributesCommand' &&
      (c.input.AttributeNames as string[]).includes('MaximumMessageSize'),
  );

/** The characters SQS allows in a message or attribute value. */
const SQS_TEXT = /^[\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]*$/u;

/** A malformed envelope (dead at once) of `bytes` bytes. */
const malformedOf = (bytes: number) => `{"event_id":"evt_1","pad":"${'x'.repeat(bytes - 29)}"}`;

describe('dead-letter queue copies that SQS can never take (fauxqs enforces MaximumMessageSize)', () => {
  it('a body alone over the DLQ’s MaximumMessageSize: one dead-letter record, an error, the message deleted (not dead again after each visibility timeout)', async () => {
    const { client } = recordingClient();
    const dlq = await createQueue(client, 'small-dlq', { MaximumMessageSize: '1024' });
    const { logger, lines } = capturedLogs();
    const s = await setup({ adapter: { deadLetterQueue: dlq.url, visibilityTimeoutSeconds: 1, logger } });
    const bodies = [malformedOf(2000), malformedOf(1500)];
    expect(bodies.map((b) => b.length)).toEqual([2000, 1500]);
    const ids = await send(s.client, s.queueUrl, bodies);
    await s.consumer.start();
    await vi.waitFor(
      async () =>
        expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 }),
      { timeout: 5000 },
    );
    await s.consumer.stop();

    expect(s.reports.map((r) => [r.message.attempt, r.outcome.kind])).toEqual([
      [1, 'dead'],
      [1, 'dead'],
    ]);
    // The record holds the message: it is the only copy now.
    const records = readFileSync(s.deadLetterPath, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(records.map((r) => [r.message_id, r.raw]).sort()).toEqual(
      ids.map((id, i) => [id, bodies[i]]).sort(),
    );
    expect(await sqsCounts(client, dlq.url)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
    const given = lines.filter((l) =>
      String(l.msg).startsWith('dead-letter queue can never take this message'),
    );
    expect(given.map((l) => [l.level, l.message_id]).sort()).toEqual(ids.map((id) => [50, id]).sort());
    expect(String(given[0]?.err)).toMatch(/the body is \d+ bytes; the dead-letter queue takes at most 1024/);
    // The DLQ's limit is read once.
    expect(limitReads(s.calls)).toHaveLength(1);
  });

  it('a body that fits alone: the reason is shortened to the room the DLQ’s MaximumMessageSize leaves, the other attributes kept', async () => {
    const { client } = recordingClient();
    const dlq = await createQueue(client, 'small-dlq', { MaximumMessageSize: '1024' });
    const s = await setup({
      adapter: { deadLetterQueue: dlq.url, visibilityTimeoutSeconds: 1 },
      consumer: { retry: { maxAttempts: 1, baseDelayMs: 0, maxDelayMs: 0 } },
    });
    const event = createTestEnvelope('daily.data.steps.created');
    const [id] = await send(s.client, s.queueUrl, [event.raw]);
    s.consumer.on('*', () => {
      throw new Error(`app refused it: ${'detail '.repeat(300)}`);
    });
    await s.consumer.start();
    await vi.waitFor(
      async () =>
        expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 }),
      { timeout: 5000 },
    );
    await s.consumer.stop();

    const [copy, ...more] = await peekAll(client, dlq.url);
    expect(more).toEqual([]);
    expect(copy?.Body).toBe(event.raw);
    expect(sqsMessageBytes(copy as Message)).toBeLessThanOrEqual(1024);
    const attributes = copy?.MessageAttributes ?? {};
    expect(Object.keys(attributes).sort()).toEqual([
      'partner_events_attempts',
      'partner_events_code',
      'partner_events_dead_lettered_at',
      'partner_events_message_id',
      'partner_events_reason',
      'partner_events_sent_timestamp',
      'partner_events_source',
    ]);
    expect(attributes.partner_events_message_id?.StringValue).toBe(id);
    const [record] = readFileSync(s.deadLetterPath, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const reason = attributes.partner_events_reason?.StringValue ?? '';
    expect(reason.length).toBeGreaterThan(100);
    expect(reason.length).toBeLessThan(300);
    expect(record.reason.startsWith(reason)).toBe(true);
    expect(s.reports.map((r) => r.outcome.kind)).toEqual(['dead']);
  });

  it('characters SQS refuses in an attribute value (an ANSI colour escape, a lone surrogate in a handler’s error) are replaced in the copy', async () => {
    const { client } = recordingClient();
    const dlq = await createQueue(client, 'events-dlq');
    const s = await setup({
      adapter: { deadLetterQueue: dlq.url },
      consumer: { retry: { maxAttempts: 1, baseDelayMs: 0, maxDelayMs: 0 } },
    });
    await send(s.client, s.queueUrl, [createTestEnvelope('daily.data.steps.created').raw]);
    s.consumer.on('*', () => {
      throw new Error('\u001b[31mred\u001b[0m \uD800 \u0000 end');
    });
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports).toHaveLength(1), { timeout: 5000 });
    await s.consumer.stop();

    const [copy] = await peekAll(client, dlq.url);
    const reason = copy?.MessageAttributes?.partner_events_reason?.StringValue ?? '';
    expect(reason).toMatch(SQS_TEXT);
    expect(reason).toContain('\uFFFD[31mred\uFFFD[0m \uFFFD \uFFFD end');
  });

  it('a DLQ whose limit cannot be read: copies are fitted to the SQS maximum, and one the queue then refuses (InvalidParameterValue) is given up the same way', async () => {
    const { client } = recordingClient();
    const dlq = await createQueue(client, 'small-dlq', { MaximumMessageSize: '1024' });
    const { logger, lines } = capturedLogs();
    const s = await setup({
      adapter: { deadLetterQueue: dlq.url, visibilityTimeoutSeconds: 1, logger },
      // As an IAM policy without sqs:GetQueueAttributes on the DLQ would: its answer is a refusal.
      intercept: (command, input) =>
        command === 'GetQueueAttributesCommand' && input.QueueUrl === dlq.url
          ? { input: { ...input, QueueUrl: `${dlq.url}-denied` } }
          : undefined,
    });
    const bodies = [malformedOf(1100), malformedOf(1200)];
    await send(s.client, s.queueUrl, bodies);
    await s.consumer.start();
    await vi.waitFor(
      async () =>
        expect(await sqsCounts(s.client, s.queueUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 }),
      { timeout: 5000 },
    );
    await s.consumer.stop();

    expect(s.reports.map((r) => r.outcome.kind)).toEqual(['dead', 'dead']);
    expect(readFileSync(s.deadLetterPath, 'utf8').trim().split('\n')).toHaveLength(2);
    expect(s.calls.filter((c) => c.command === 'SendMessageCommand').map((c) => c.end)).toEqual([
      { kind: 'failed', error: expect.stringMatching(/InvalidParameterValue$/) },
      { kind: 'failed', error: expect.stringMatching(/InvalidParameterValue$/) },
    ]);
    // A refusal is not asked again for every dead message.
    expect(limitReads(s.calls)).toHaveLength(1);
    expect(lines.map((l) => [l.level, l.msg])).toEqual(
      expect.arrayContaining([
        [40, expect.stringContaining('cannot read the dead-letter queue’s MaximumMessageSize')],
        [50, expect.stringContaining('dead-letter queue can never take this message')],
      ]),
    );
  });
});

/** The trace contexts the delivery span of message `id` links to, as `traceId/spanId`. */
function linksOf(recorder: ReturnType<typeof recordSpans>, id: string): string[] | undefined {
  const delivery = recorder
    .spans()
    .find((span) => span.name.startsWith('process ') && span.attributes['messaging.message.id'] === id);
  return delivery?.links.map((l) => `${l.context.traceId}/${l.context.spanId}`);
}

describe('trace context through fauxqs: the delivery span links to what the message carried', () => {
  let recorder: ReturnType<typeof recordSpans>;
  beforeAll(() => {
    recorder = recordSpans();
  });
  afterAll(() => recorder.stop());

  const PRODUCER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
  const PRODUCER_SPAN = '00f067aa0ba902b7';
  const XRAY_HEADER = 'Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1';

  /** Sends one signed event with these message attributes (String) and system attributes. */
  async function sendTraced(
    s: Setup,
    attributes: Record<string, string>,
    systemAttributes: Record<string, string> = {},
  ): Promise<string> {
    const string = (value: string) => ({ DataType: 'String', StringValue: value });
    const { MessageId } = await s.client.send(
      new SendMessageCommand({
        QueueUrl: s.queueUrl,
        MessageBody: createTestEnvelope('daily.data.steps.created').raw,
        MessageAttributes: Object.fromEntries(Object.entries(attributes).map(([k, v]) => [k, string(v)])),
        MessageSystemAttributes: Object.fromEntries(
          Object.entries(systemAttributes).map(([k, v]) => [k, string(v)]),
        ),
      }),
    );
    return MessageId as string;
  }

  it('traceparent / tracestate message attributes; a malformed traceparent is handled without a link', async () => {
    const s = await setup();
    s.consumer.on('*', () => {});
    const carried = await sendTraced(s, {
      traceparent: `00-${PRODUCER_TRACE}-${PRODUCER_SPAN}-01`,
      tracestate: 'vendor=1',
      tenant: 'acme',
    });
    const malformed = await sendTraced(s, { traceparent: '00-not-a-trace-context-01', tracestate: 'x' });
    const plain = await sendTraced(s, {});
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports.filter(ackedHandled)).toHaveLength(3), { timeout: 5000 });

    expect(linksOf(recorder, carried)).toEqual([`${PRODUCER_TRACE}/${PRODUCER_SPAN}`]);
    const delivery = recorder.spans().find((span) => span.attributes['messaging.message.id'] === carried);
    expect(delivery?.links[0]?.context.traceState?.serialize()).toBe('vendor=1');
    expect(delivery?.attributes).toMatchObject({
      'messaging.system': 'aws_sqs',
      'partner_events.outcome': 'handled',
    });
    expect(linksOf(recorder, malformed)).toEqual([]);
    expect(linksOf(recorder, plain)).toEqual([]);
  });

  it('every receive asks for AWSTraceHeader and the trace message attributes (SQS returns only what is asked for)', async () => {
    const s = await setup();
    s.consumer.on('*', () => {});
    await send(s.client, s.queueUrl, [createTestEnvelope('daily.data.steps.created').raw]);
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports.filter(ackedHandled)).toHaveLength(1), { timeout: 5000 });
    const receives = s.calls.filter((c) => c.command === 'ReceiveMessageCommand');
    expect(receives.length).toBeGreaterThan(0);
    for (const receive of receives) {
      expect(receive.input.MessageSystemAttributeNames).toEqual(expect.arrayContaining(['AWSTraceHeader']));
      expect(receive.input.MessageAttributeNames).toEqual(
        expect.arrayContaining(['traceparent', 'tracestate']),
      );
    }
  });

  it('the AWSTraceHeader system attribute (X-Ray)', async (ctx) => {
    const s = await setup();
    // fauxqs (1.9.x) drops SendMessage's MessageSystemAttributes: sendMessage.js never reads them
    // and receiveMessage.js answers only SenderId, SentTimestamp, ApproximateReceiveCount,
    // ApproximateFirstReceiveTimestamp, MessageGroupId, MessageDeduplicationId and SequenceNumber.
    // Asked here of the emulator itself (not through the adapter), so the test runs once it does.
    const probe = await createQueue(s.client, 'xray-probe');
    await s.client.send(
      new SendMessageCommand({
        QueueUrl: probe.url,
        MessageBody: 'probe',
        MessageSystemAttributes: { AWSTraceHeader: { DataType: 'String', StringValue: XRAY_HEADER } },
      }),
    );
    const { Messages = [] } = await s.client.send(
      new ReceiveMessageCommand({ QueueUrl: probe.url, MessageSystemAttributeNames: ['All'] }),
    );
    if (Messages[0]?.Attributes?.AWSTraceHeader === undefined) {
      ctx.skip(
        'fauxqs does not carry the AWSTraceHeader system attribute (SendMessage MessageSystemAttributes)',
      );
    }

    s.consumer.on('*', () => {});
    const carried = await sendTraced(s, {}, { AWSTraceHeader: XRAY_HEADER });
    await s.consumer.start();
    await vi.waitFor(() => expect(s.reports.filter(ackedHandled)).toHaveLength(1), { timeout: 5000 });
    expect(linksOf(recorder, carried)).toEqual(['5759e988bd862e3fe1be46a994272793/53995c3f42cd8ad8']);
  });
});

describe('SqsAdapter errors and options', () => {
  it('receive throws an AdapterError naming the AWS code; the consumer reports it and keeps polling', async () => {
    const { client } = recordingClient();
    const missing = `${(await createQueue(client)).url}-missing`;
    const adapter = createSqsAdapter({ queueUrl: missing, client, waitTimeSeconds: 0 });
    await expect(adapter.receive(10, new AbortController().signal)).rejects.toMatchObject({
      name: 'AdapterError',
      code: 'ADAPTER_ERROR',
      details: { action: 'ReceiveMessage', aws_code: 'QueueDoesNotExist', retryable: false },
    });

    const consumer = createConsumer<SqsMessage>({
      source: adapter,
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      dedupe: createMemoryDedupe(),
      logger: silentLogger(),
    });
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await vi.waitFor(() =>
      expect(consumer.status.lastReceiveError).toMatch(/ReceiveMessage .* QueueDoesNotExist/),
    );
    expect(consumer.status.state).toBe('running');
  });

  it('a network failure on receive throws too (retryable), never an empty batch', async () => {
    const closed = await startFauxqs();
    await closed.close();
    const client = fauxqsClient(closed.endpoint, { maxAttempts: 1 });
    cleanups.push(() => client.destroy());
    const adapter = createSqsAdapter({
      queueUrl: `${closed.endpoint}/000000000000/gone`,
      client,
      waitTimeSeconds: 0,
    });
    await expect(adapter.receive(10, new AbortController().signal)).rejects.toMatchObject({
      code: 'ADAPTER_ERROR',
      details: { action: 'ReceiveMessage', retryable: true },
    });
  });

  it('a stop during a long poll returns [] at once', async () => {
    const { client, calls } = recordingClient();
    const adapter = createSqsAdapter({
      queueUrl: (await createQueue(client)).url,
      client,
      waitTimeSeconds: 20,
    });
    const stop = new AbortController();
    const waiting = adapter.receive(10, stop.signal);
    await vi.waitFor(() => expect(openPolls(calls)).toHaveLength(1));
    const [poll] = openPolls(calls);
    stop.abort();
    expect(await waiting).toEqual([]);
    // Nothing is ever sent to this queue: only its 20 s or close() can end the poll, and neither
    // has happened yet; receive returned while it was still open.
    expect(poll?.end).toBeUndefined();
    await adapter.close();
    expect(poll?.end).toMatchObject({ kind: 'failed' }); // close() aborted it
    expect(await adapter.receive(10, new AbortController().signal)).toBeNull();
  });

  it('rejects bad options with a ConfigError naming the field', () => {
    const queueUrl = 'https://sqs.eu-west-1.amazonaws.com/123456789012/partner-events';
    const client = fauxqsClient(server.endpoint);
    cleanups.push(() => client.destroy());
    expect(() => createSqsAdapter({ queueUrl, client, batchSize: 11 })).toThrow(ConfigError);
    expect(() => createSqsAdapter({ queueUrl, client, visibilityTimeoutSeconds: 43_201 })).toThrow(
      /visibilityTimeoutSeconds/,
    );
    expect(() =>
      createSqsAdapter({ queueUrl, client, visibilityTimeoutSeconds: 10, heartbeatIntervalSeconds: 10 }),
    ).toThrow(/heartbeatIntervalSeconds/);
    expect(() => createSqsAdapter({ queueUrl: 'partner-events', client })).toThrow(/queueUrl/);
    const adapter = createSqsAdapter({ queueUrl, client, visibilityTimeoutSeconds: 45 });
    expect(adapter).toMatchObject({
      name: 'sqs:partner-events',
      maxBatchSize: 10,
      heartbeatIntervalMs: 15_000,
    });
  });

  it('the CLI names a queue by URL or sqs:URL', async () => {
    const url = 'https://sqs.eu-west-1.amazonaws.com/123456789012/partner-events';
    expect(isSqsSourceSpec(url)).toBe(true);
    expect(isSqsSourceSpec(`sqs:${server.endpoint}/000000000000/q`)).toBe(true);
    expect(isSqsSourceSpec('file:events.jsonl')).toBe(false);
    expect(isSqsSourceSpec('https://example.com/partner-events')).toBe(false);
    const vars = ['AWS_REGION', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'] as const;
    const saved = vars.map((v) => process.env[v]);
    Object.assign(process.env, {
      AWS_REGION: 'eu-west-1',
      AWS_ACCESS_KEY_ID: 'x',
      AWS_SECRET_ACCESS_KEY: 'y',
    });
    try {
      const adapter = sqsSourceFromCli(`sqs:${url}`, { logger: silentLogger() });
      expect(adapter).toMatchObject({ name: 'sqs:partner-events', queueUrl: url });
      expect(await adapter.client.config.region()).toBe('eu-west-1');
      await adapter.close();
    } finally {
      vars.forEach((v, i) => {
        if (saved[i] === undefined) delete process.env[v];
        else process.env[v] = saved[i];
      });
    }
  });
});
