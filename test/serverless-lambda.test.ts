/**
 * The Lambda SQS handler (partner-health-events/lambda) against fauxqs, driven the way an event
 * source mapping with ReportBatchItemFailures drives it: receive, build the exact SQSEvent record
 * shape, call the handler, delete what it did not report as failed, and let the visibility
 * timeout bring back the rest.
 */
import { join } from 'node:path';
import {
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { SQSEvent, SQSRecord } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConsumerOptions, createConsumer } from '../src/consumer/consumer.js';
import { createTestEnvelope, forgedEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { silentLogger } from '../src/core/logger.js';
import type { SigningSecret } from '../src/core/secrets.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import type { DedupeStore } from '../src/dedupe/types.js';
import {
  EphemeralDedupeError,
  type LambdaSqsMessage,
  type SqsBatchHandler,
  sqsHandler,
} from '../src/serverless/lambda.js';
import { createQueue, type FauxqsServer, fauxqsClient, sqsCounts, startFauxqs } from './support/fauxqs.js';
import { tempDir } from './support/harness.js';
import { readJsonl } from './support/records.js';

let server: FauxqsServer;
let client: SQSClient;
const dir = tempDir('phe-lambda-');

beforeAll(async () => {
  server = await startFauxqs();
  client = fauxqsClient(server.endpoint);
});
afterAll(async () => {
  client.destroy();
  await server.close();
  dir.cleanup();
});

const SECRETS = [{ id: 'current', secret: TEST_SIGNING_SECRET }];
let consumerSeq = 0;

/** A consumer as a function would build it, with a memory store allowed by the handler's test flag. */
function testConsumer(options: Partial<ConsumerOptions<LambdaSqsMessage>> = {}) {
  return createConsumer<LambdaSqsMessage>({
    secrets: SECRETS,
    dedupe: createMemoryDedupe(),
    deadLetter: join(dir.path, `dead-${++consumerSeq}.jsonl`),
    logger: silentLogger(),
    ...options,
  });
}

async function queueArn(url: string): Promise<string> {
  const { Attributes } = await client.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['QueueArn'] }),
  );
  if (!Attributes?.QueueArn) throw new Error(`no QueueArn for ${url}`);
  return Attributes.QueueArn;
}

async function send(url: string, body: string): Promise<void> {
  await client.send(new SendMessageCommand({ QueueUrl: url, MessageBody: body }));
}

interface Invocation {
  readonly records: SQSRecord[];
  readonly failed: string[];
}

interface MappingOptions {
  /** What `context.getRemainingTimeInMillis()` starts at. Default 30 s. */
  readonly remainingMs?: number;
  readonly batchSize?: number;
}

/**
 * One turn of an event source mapping: a receive (1 s visibility, so failures come back soon),
 * the SQSEvent built from what came, the handler's answer, and the deletes of what succeeded.
 * Undefined when the receive came back empty.
 */
async function mappingTurn(
  handler: SqsBatchHandler,
  queueUrl: string,
  options: MappingOptions = {},
): Promise<Invocation | undefined> {
  const { Messages = [] } = await client.send(
    new ReceiveMessageCommand({
      QueueUrl: queueUrl,
      MaxNumberOfMessages: options.batchSize ?? 10,
      WaitTimeSeconds: 1,
      VisibilityTimeout: 1,
      MessageSystemAttributeNames: ['All'],
    }),
  );
  if (Messages.length === 0) return undefined;
  const arn = await queueArn(queueUrl);
  const records: SQSRecord[] = Messages.map((m) => ({
    messageId: m.MessageId as string,
    receiptHandle: m.ReceiptHandle as string,
    body: m.Body as string,
    attributes: {
      ApproximateReceiveCount: m.Attributes?.ApproximateReceiveCount as string,
      SentTimestamp: m.Attributes?.SentTimestamp as string,
      SenderId: m.Attributes?.SenderId ?? 'AIDAEXAMPLE',
      ApproximateFirstReceiveTimestamp: m.Attributes?.ApproximateFirstReceiveTimestamp as string,
    },
    messageAttributes: {},
    md5OfBody: m.MD5OfBody as string,
    eventSource: 'aws:sqs',
    eventSourceARN: arn,
    awsRegion: 'us-east-1',
  }));
  const event: SQSEvent = { Records: records };
  const deadline = Date.now() + (options.remainingMs ?? 30_000);
  const answer = await handler(event, { getRemainingTimeInMillis: () => deadline - Date.now() });
  const failed = answer.batchItemFailures.map((f) => f.itemIdentifier);
  const done = records.filter((r) => !failed.includes(r.messageId));
  if (done.length > 0) {
    await client.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: done.map((r, i) => ({ Id: String(i), ReceiptHandle: r.receiptHandle })),
      }),
    );
  }
  return { records, failed };
}

/** Runs the mapping until `done()` holds (each turn waits on a long poll), at most `turns` turns. */
async function runMapping(
  handler: SqsBatchHandler,
  queueUrl: string,
  done: () => boolean | Promise<boolean>,
  options: MappingOptions & { turns?: number } = {},
): Promise<Invocation[]> {
  const invocations: Invocation[] = [];
  for (let turn = 0; turn < (options.turns ?? 40); turn++) {
    if (await done()) return invocations;
    const invocation = await mappingTurn(handler, queueUrl, options);
    if (invocation) invocations.push(invocation);
  }
  throw new Error(`the mapping did not get there: ${JSON.stringify(invocations)}`);
}

async function receiveAll(queueUrl: string) {
  const { Messages = [] } = await client.send(
    new ReceiveMessageCommand({
      QueueUrl: queueUrl,
      MaxNumberOfMessages: 10,
      WaitTimeSeconds: 1,
      MessageAttributeNames: ['All'],
    }),
  );
  return Messages;
}

describe('sqsHandler on an SQS event source mapping', () => {
  it('reports only the failed record, which comes back with the next ApproximateReceiveCount and is handled', async () => {
    const queue = await createQueue(client, 'lambda-retry');
    const flaky = createTestEnvelope('daily.data.steps.created');
    const steady = createTestEnvelope('daily.data.steps.created');
    const calls: { eventId: string; attempt: number; enqueuedAt: number | undefined }[] = [];
    const consumer = testConsumer().on('daily.data.steps.created', (event, ctx) => {
      calls.push({ eventId: event.event_id, attempt: ctx.attempt, enqueuedAt: ctx.enqueuedAt });
      if (event.event_id === flaky.eventId && ctx.attempt === 1) throw new Error('downstream busy');
    });
    const handler = sqsHandler(consumer, { allowEphemeralDedupe: true });
    await send(queue.url, flaky.raw);
    await send(queue.url, steady.raw);

    const invocations = await runMapping(handler, queue.url, () =>
      calls.some((c) => c.eventId === flaky.eventId && c.attempt === 2),
    );
    const first = invocations[0] as Invocation;
    const flakyRecord = first.records.find((r) => r.body === flaky.raw) as SQSRecord;
    expect(first.failed).toEqual([flakyRecord.messageId]);
    expect(calls.filter((c) => c.eventId === steady.eventId)).toHaveLength(1);
    expect(calls.every((c) => typeof c.enqueuedAt === 'number' && c.enqueuedAt > 0)).toBe(true);
    expect(invocations.at(-1)?.failed).toEqual([]);
    expect(await sqsCounts(client, queue.url)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('without deadLetterQueue, a record that keeps failing is moved by the queue’s redrive policy after maxReceiveCount', async () => {
    const dlq = await createQueue(client, 'lambda-redrive-dlq');
    const queue = await createQueue(client, 'lambda-redrive', {
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: await queueArn(dlq.url), maxReceiveCount: 2 }),
    });
    const poison = createTestEnvelope('daily.data.steps.created');
    let calls = 0;
    const consumer = testConsumer().on('daily.data.steps.created', () => {
      calls++;
      throw new Error('always fails');
    });
    const handler = sqsHandler(consumer, { allowEphemeralDedupe: true });
    await send(queue.url, poison.raw);

    await runMapping(handler, queue.url, async () => (await sqsCounts(client, dlq.url)).visible === 1);
    expect(calls).toBe(2);
    const [moved] = await receiveAll(dlq.url);
    expect(moved?.Body).toBe(poison.raw);
    expect(await sqsCounts(client, queue.url)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('with deadLetterQueue, a forged and a malformed message are sent there as received (forged after its retries), then reported done', async () => {
    const dlq = await createQueue(client, 'lambda-kit-dlq');
    const queue = await createQueue(client, 'lambda-kit');
    const forged = forgedEnvelope('daily.data.steps.created');
    const malformed = '{"not":"an envelope"}';
    const deadLetterPath = join(dir.path, 'kit-dlq-dead.jsonl');
    let calls = 0;
    const consumer = testConsumer({
      retry: { maxAttempts: 2, baseDelayMs: 0, maxDelayMs: 0 },
      deadLetter: deadLetterPath,
    }).on('daily.data.steps.created', () => {
      calls++;
    });
    const handler = sqsHandler(consumer, { allowEphemeralDedupe: true, deadLetterQueue: dlq.url, client });
    await send(queue.url, forged.raw);
    await send(queue.url, malformed);

    const invocations = await runMapping(
      handler,
      queue.url,
      async () => (await sqsCounts(client, dlq.url)).visible === 2,
    );
    expect(calls).toBe(0);
    // The malformed one went at once; the forged one was handed back once (SIGNATURE_MISMATCH is retried).
    expect(invocations[0]?.failed).toHaveLength(1);
    const copies = await receiveAll(dlq.url);
    const byBody = new Map(
      copies.map((m) => [m.Body, m.MessageAttributes?.partner_events_code?.StringValue]),
    );
    expect(byBody).toEqual(
      new Map([
        [forged.raw, 'SIGNATURE_MISMATCH'],
        [malformed, 'MALFORMED_ENVELOPE'],
      ]),
    );
    expect(
      readJsonl(deadLetterPath)
        .map((r) => r.code)
        .sort(),
    ).toEqual(['MALFORMED_ENVELOPE', 'SIGNATURE_MISMATCH']);
    expect(await sqsCounts(client, queue.url)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('with deadLetterQueue, a dead record whose copy the queue can never take (over its MaximumMessageSize) is reported done once, with its dead-letter record', async () => {
    const dlq = await createQueue(client, 'lambda-small-dlq', { MaximumMessageSize: '1024' });
    const queue = await createQueue(client, 'lambda-big');
    const big = `{"not":"an envelope","pad":"${'x'.repeat(2000)}"}`;
    const deadLetterPath = join(dir.path, 'small-dlq-dead.jsonl');
    const consumer = testConsumer({ deadLetter: deadLetterPath });
    const handler = sqsHandler(consumer, { allowEphemeralDedupe: true, deadLetterQueue: dlq.url, client });
    await send(queue.url, big);

    const empty = async () => {
      const { visible, inFlight, delayed } = await sqsCounts(client, queue.url);
      return visible + inFlight + delayed === 0;
    };
    const invocations = await runMapping(handler, queue.url, empty, { turns: 5 });
    expect(invocations.map((i) => i.failed)).toEqual([[]]);
    expect(readJsonl(deadLetterPath).map((r) => [r.code, r.raw])).toEqual([['MALFORMED_ENVELOPE', big]]);
    expect(await sqsCounts(client, dlq.url)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it('a duplicate in a later batch is acked without running the handler again (SQLite store kept across invocations)', async () => {
    const queue = await createQueue(client, 'lambda-dup');
    const envelope = createTestEnvelope('daily.data.steps.created');
    let calls = 0;
    const dedupe = createSqliteDedupe({ path: join(dir.path, 'dedupe.db') });
    const consumer = testConsumer({ dedupe }).on('daily.data.steps.created', () => {
      calls++;
    });
    const handler = sqsHandler(consumer, { allowEphemeralDedupe: true });
    await send(queue.url, envelope.raw);
    await runMapping(handler, queue.url, () => calls === 1);
    await send(queue.url, envelope.raw);
    const second = await runMapping(handler, queue.url, async () => {
      const counts = await sqsCounts(client, queue.url);
      return counts.visible + counts.inFlight === 0;
    });
    expect(second.map((i) => i.failed)).toEqual([[]]);
    expect(calls).toBe(1);
    await dedupe.close();
  });

  it('runs the records of one batch with the consumer’s concurrency', async () => {
    const queue = await createQueue(client, 'lambda-concurrency');
    let inside = 0;
    let most = 0;
    let handled = 0;
    let openGate: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      openGate = resolve;
    });
    const consumer = testConsumer({ concurrency: 4 }).on('daily.data.steps.created', async () => {
      most = Math.max(most, ++inside);
      if (inside === 4) openGate();
      await gate; // resolves only once four handlers are inside at once
      inside--;
      handled++;
    });
    const handler = sqsHandler(consumer, { allowEphemeralDedupe: true });
    for (let i = 0; i < 4; i++) await send(queue.url, createTestEnvelope('daily.data.steps.created').raw);
    await runMapping(
      handler,
      queue.url,
      async () => {
        const counts = await sqsCounts(client, queue.url);
        return handled === 4 && counts.visible + counts.inFlight === 0;
      },
      { batchSize: 4, remainingMs: 5000 },
    );
    expect(most).toBe(4);
  });

  it('a handler still running close to the deadline is cut off and its record reported as failed, never as done', async () => {
    const queue = await createQueue(client, 'lambda-deadline');
    const envelope = createTestEnvelope('daily.data.steps.created');
    let slow = true;
    const attempts: number[] = [];
    const consumer = testConsumer().on('daily.data.steps.created', async (_event, ctx) => {
      attempts.push(ctx.attempt);
      // The first delivery ignores its signal and would run far past the function's timeout.
      if (slow) await new Promise(() => undefined);
    });
    const handler = sqsHandler(consumer, { allowEphemeralDedupe: true, reserveMs: 500 });
    await send(queue.url, envelope.raw);

    const first = await runMapping(handler, queue.url, () => attempts.length === 1, {
      remainingMs: 1500,
    }).then(
      async (list) =>
        list[0] ?? ((await mappingTurn(handler, queue.url, { remainingMs: 1500 })) as Invocation),
    );
    expect(first.failed).toEqual([first.records[0]?.messageId]);
    slow = false;
    // Its claim was let go at the deadline, so the redelivery runs the handler and is done.
    await runMapping(handler, queue.url, async () => {
      const counts = await sqsCounts(client, queue.url);
      return attempts.length === 2 && counts.visible + counts.inFlight === 0;
    });
    expect(attempts).toEqual([1, 2]);
  });

  it('a message whose dedupe claim has not answered by the deadline is reported as failed too', async () => {
    const queue = await createQueue(client, 'lambda-stuck-store');
    const envelope = createTestEnvelope('daily.data.steps.created');
    const inner = createMemoryDedupe();
    let claims = 0;
    // A store that does not answer the first claim (a network partition): only the deadline ends it.
    const dedupe: DedupeStore = {
      claim: (id, leaseMs) => (++claims === 1 ? new Promise(() => undefined) : inner.claim(id, leaseMs)),
      extend: (id, token, leaseMs) => inner.extend(id, token, leaseMs),
      complete: (id, token, retentionMs) => inner.complete(id, token, retentionMs),
      release: (id, token) => inner.release(id, token),
      peek: (id) => inner.peek(id),
      close: () => inner.close(),
    };
    let calls = 0;
    const consumer = testConsumer({ dedupe }).on('daily.data.steps.created', () => {
      calls++;
    });
    const handler = sqsHandler(consumer, { reserveMs: 500 });
    await send(queue.url, envelope.raw);
    const invocations = await runMapping(handler, queue.url, () => calls === 1, { remainingMs: 1500 });
    expect(invocations.map((i) => i.failed.length)).toEqual([1, 0]);
  });
});

describe('sqsHandler setup', () => {
  it('refuses a dedupe store that does not outlive the instance: memory, or a SQLite file in the temporary folder', async () => {
    const memory = testConsumer();
    expect(() => sqsHandler(memory)).toThrow(EphemeralDedupeError);
    const sqlite = testConsumer({ dedupe: createSqliteDedupe({ path: join(dir.path, 'tmp-store.db') }) });
    expect(() => sqsHandler(sqlite)).toThrow(/temporary folder/);
    expect(() => sqsHandler(sqlite, { allowEphemeralDedupe: true })).not.toThrow();
    // Built by a factory: refused at the first invocation, which fails as a whole.
    const handler = sqsHandler(() => testConsumer(), { secrets: () => SECRETS });
    await expect(handler({ Records: [] }, { getRemainingTimeInMillis: () => 10_000 })).rejects.toThrow(
      EphemeralDedupeError,
    );
  });

  it('loads secrets once per cold start through the loader, and reloads them once secretsRefreshMs have passed', async () => {
    const queue = await createQueue(client, 'lambda-secrets');
    let current: readonly SigningSecret[] = SECRETS;
    let loads = 0;
    let built = 0;
    const handled: string[] = [];
    const options = {
      allowEphemeralDedupe: true,
      secrets: async () => {
        loads++;
        return current;
      },
    };
    const factory = (secrets: readonly SigningSecret[]) => {
      built++;
      return testConsumer({ secrets }).on('daily.data.steps.created', (event) => {
        handled.push(event.event_id);
      });
    };
    const handler = sqsHandler(factory, options);
    const a = createTestEnvelope('daily.data.steps.created');
    const b = createTestEnvelope('daily.data.steps.created');
    await send(queue.url, a.raw);
    await runMapping(handler, queue.url, () => handled.length === 1);
    await send(queue.url, b.raw);
    await runMapping(handler, queue.url, () => handled.length === 2);
    expect({ loads, built }).toEqual({ loads: 1, built: 1 });

    // A rotation: the loader now returns only a new secret; a handler that refreshes at once picks it up.
    const rotated = 'rotated-signing-secret-for-lambda-test';
    current = [{ id: 'next', secret: rotated }];
    const rotating = sqsHandler(factory, { ...options, secretsRefreshMs: 0 });
    const c = createTestEnvelope('daily.data.steps.created', { secret: rotated });
    await send(queue.url, c.raw);
    await runMapping(rotating, queue.url, () => handled.length === 3);
    current = [{ id: 'next-after', secret: `${rotated}-2` }];
    const d = createTestEnvelope('daily.data.steps.created', { secret: `${rotated}-2` });
    await send(queue.url, d.raw);
    await runMapping(rotating, queue.url, () => handled.includes(d.eventId));
    expect(handled).toEqual([a.eventId, b.eventId, c.eventId, d.eventId]);
  });
});
