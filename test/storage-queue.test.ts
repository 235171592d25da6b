import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { type QueueClient, QueueSASPermissions, QueueServiceClient } from '@azure/storage-queue';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  createStorageQueueAdapter,
  decodeMessageText,
  isStorageQueueSpec,
  type StorageQueueAdapter,
  type StorageQueueAdapterOptions,
  type StorageQueueMessage,
  storageQueueSourceFromCli,
} from '../adapters/storage-queue/index.js';
import {
  type Consumer,
  type ConsumerOptions,
  createConsumer,
  type SettledReport,
} from '../src/consumer/consumer.js';
import type { HandlerContext } from '../src/consumer/router.js';
import { createTestEnvelope, staleEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import type { DeadLetterRecord } from '../src/core/dead-letter-record.js';
import { AdapterError, ConfigError } from '../src/core/errors.js';
import { createLogger } from '../src/core/logger.js';
import { Azurite } from './support/azurite.js';
import { tempDir } from './support/harness.js';
import { expectNothingLeftOn } from './support/signals.js';

let azurite: Azurite;
let service: QueueServiceClient;

beforeAll(async () => {
  azurite = await Azurite.start('queue');
  service = QueueServiceClient.fromConnectionString(azurite.connectionString);
});
afterAll(async () => {
  await azurite?.stop();
});

const WAIT = { timeout: 8_000, interval: 25 };
const base64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

async function newQueue(): Promise<QueueClient> {
  const queue = service.getQueueClient(`q-${randomUUID().slice(0, 8)}`);
  await queue.create();
  return queue;
}

async function countOf(queue: QueueClient): Promise<number> {
  return (await queue.getProperties()).approximateMessagesCount ?? -1;
}

async function peekTexts(queue: QueueClient): Promise<string[]> {
  const { peekedMessageItems } = await queue.peekMessages({ numberOfMessages: 32 });
  return peekedMessageItems.map((m) => m.messageText);
}

interface Run {
  adapter: StorageQueueAdapter;
  consumer: Consumer<StorageQueueMessage>;
  reports: SettledReport<StorageQueueMessage>[];
  logs: Record<string, unknown>[];
  deadLetters(): DeadLetterRecord[];
}

const running: { consumer: Consumer<StorageQueueMessage>; cleanup(): void }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    await r.consumer.stop();
    r.cleanup();
  }
});

/** A started consumer over a Storage Queue adapter, with fast polling and retries, logs captured. */
async function start(
  queue: QueueClient,
  handler: (event: unknown, context: HandlerContext) => unknown,
  options: {
    adapter?: Omit<Partial<StorageQueueAdapterOptions>, 'queueClient' | 'queueName' | 'queueUrl'>;
    consumer?: Partial<ConsumerOptions<StorageQueueMessage>>;
    source?: StorageQueueAdapter;
  } = {},
): Promise<Run> {
  const dir = tempDir('phe-sq-');
  const logs: Record<string, unknown>[] = [];
  const logger = createLogger(
    { level: 'debug' },
    { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) },
  );
  const adapter =
    options.source ??
    createStorageQueueAdapter({
      queueClient: queue,
      pollIntervalMs: 10,
      maxPollIntervalMs: 100,
      logger,
      ...options.adapter,
    });
  const reports: SettledReport<StorageQueueMessage>[] = [];
  const deadLetterPath = join(dir.path, 'dead.jsonl');
  const consumer = createConsumer<StorageQueueMessage>({
    source: adapter,
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    deadLetter: deadLetterPath,
    logger,
    retry: { maxAttempts: 3, baseDelayMs: 0, maxDelayMs: 0 },
    onSettled: (report) => reports.push(report),
    ...options.consumer,
  });
  consumer.on('*', handler).onUnknown(handler);
  running.push({ consumer, cleanup: dir.cleanup });
  await consumer.start();
  return {
    adapter,
    consumer,
    reports,
    logs,
    deadLetters: () =>
      readFileSync(deadLetterPath, 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as DeadLetterRecord),
  };
}

describe('decodeMessageText', () => {
  const raw = createTestEnvelope('daily.data.steps.created').raw;

  it.each([
    ['auto', raw, { text: raw, applied: 'none' }],
    ['auto', `  \n${raw}`, { text: `  \n${raw}`, applied: 'none' }],
    ['auto', base64(raw), { text: raw, applied: 'base64' }],
    ['auto', base64('not an envelope'), { text: base64('not an envelope'), applied: 'none' }],
    ['auto', 'plain garbage', { text: 'plain garbage', applied: 'none' }],
    ['base64', base64(raw), { text: raw, applied: 'base64' }],
    ['base64', raw, { text: raw, applied: 'none', hint: 'looks-plain' }],
    ['base64', 'not*base64', { text: 'not*base64', applied: 'none', hint: 'not-base64' }],
    ['base64', base64('x').replace(/=+$/, ''), { text: 'eA', applied: 'none', hint: 'not-base64' }],
    ['base64', '/w==', { text: '/w==', applied: 'none', hint: 'not-utf8' }],
    ['none', raw, { text: raw, applied: 'none' }],
    ['none', base64(raw), { text: base64(raw), applied: 'none', hint: 'looks-base64' }],
    ['none', 'hello', { text: 'hello', applied: 'none' }],
  ] as const)('%s: %j', (encoding, text, expected) => {
    expect(decodeMessageText(text, encoding)).toEqual(expected);
  });

  it('keeps a byte-order mark inside base64 (the text is exactly what was encoded)', () => {
    expect(decodeMessageText(base64(`\ufeff${raw}`), 'auto').text).toBe(`\ufeff${raw}`);
  });
});

describe('StorageQueueAdapter against Azurite', () => {
  it('happy path: plain envelopes are verified, handled once and deleted', async () => {
    const queue = await newQueue();
    const events = [
      createTestEnvelope('daily.data.steps.created'),
      createTestEnvelope('daily.data.heart_rate.created'),
      createTestEnvelope('coach.nudge.created'),
    ];
    for (const e of events) await queue.sendMessage(e.raw);
    const seen: HandlerContext[] = [];
    const run = await start(queue, (_event, context) => {
      seen.push(context);
    });
    await vi.waitFor(() => expect(run.reports).toHaveLength(3), WAIT);
    expect(run.reports.map((r) => r.outcome)).toEqual(Array(3).fill({ kind: 'ack', result: 'handled' }));
    expect(seen.map((c) => c.eventId).sort()).toEqual(events.map((e) => e.eventId).sort());
    for (const c of seen) {
      expect(c.attempt).toBe(1);
      expect(Math.abs((c.enqueuedAt ?? 0) - Date.now())).toBeLessThan(10_000);
    }
    expect(run.reports[0]?.message.metadata).toMatchObject({ queue: queue.name, encoding: 'none' });
    expect(await countOf(queue)).toBe(0);
  });

  it('accepts base64 (Functions-style) and plain text with encoding auto, base64 with encoding base64', async () => {
    const queue = await newQueue();
    const plain = createTestEnvelope('daily.data.steps.created');
    const encoded = createTestEnvelope('daily.data.weight.created');
    await queue.sendMessage(plain.raw);
    await queue.sendMessage(base64(encoded.raw));
    const rawBodies = new Map<string, string>();
    const run = await start(queue, (_event, context) => {
      rawBodies.set(context.eventId, context.rawBody);
    });
    await vi.waitFor(() => expect(run.reports).toHaveLength(2), WAIT);
    expect(run.reports.every((r) => r.outcome.kind === 'ack')).toBe(true);
    // The HMAC was checked on the decoded envelope: its body is the signed text, byte for byte.
    expect(rawBodies.get(encoded.eventId)).toBe(encoded.envelope.body);
    const byId = new Map(run.reports.map((r) => [r.eventId, r.message]));
    expect(byId.get(encoded.eventId)?.metadata).toMatchObject({ encoding: 'base64' });
    expect(byId.get(encoded.eventId)?.messageText).toBe(base64(encoded.raw));
    expect(byId.get(plain.eventId)?.metadata).toMatchObject({ encoding: 'none' });

    const strict = await newQueue();
    const again = createTestEnvelope('daily.data.hrv.created');
    await strict.sendMessage(base64(again.raw));
    const strictRun = await start(strict, () => {}, { adapter: { encoding: 'base64' } });
    await vi.waitFor(() => expect(strictRun.reports).toHaveLength(1), WAIT);
    expect(strictRun.reports[0]?.outcome).toEqual({ kind: 'ack', result: 'handled' });
  });

  it("encoding 'none' receiving base64: ENCODING_MISMATCH with a hint and a warning, dead-lettered with the raw text", async () => {
    const queue = await newQueue();
    const event = createTestEnvelope('daily.data.steps.created');
    const text = base64(event.raw);
    await queue.sendMessage(text);
    const handler = vi.fn();
    const run = await start(queue, handler, { adapter: { encoding: 'none' } });
    await vi.waitFor(() => expect(run.reports).toHaveLength(1), WAIT);
    expect(run.reports[0]?.outcome).toMatchObject({ kind: 'dead', code: 'ENCODING_MISMATCH' });
    expect(handler).not.toHaveBeenCalled();
    const [record] = run.deadLetters();
    expect(record).toMatchObject({
      code: 'ENCODING_MISMATCH',
      raw: text,
      metadata: { encoding: 'none', encoding_hint: 'looks-base64' },
    });
    const warning = run.logs.find((l) => l.encoding_hint === 'looks-base64' && l.level === 40);
    expect(warning?.msg).toMatch(/set encoding to 'base64' or 'auto'/);
    const poison = service.getQueueClient(`${queue.name}-poison`);
    await vi.waitFor(async () => expect(await peekTexts(poison)).toEqual([text]), WAIT);
    expect(await countOf(queue)).toBe(0);
  });

  it('a failed handler is retried after its delay (visibility), then succeeds', async () => {
    const queue = await newQueue();
    const event = createTestEnvelope('daily.data.steps.created');
    await queue.sendMessage(event.raw);
    const handler = vi.fn().mockRejectedValueOnce(new Error('app down')).mockResolvedValue(undefined);
    const run = await start(queue, handler, {
      consumer: { retry: { maxAttempts: 5, baseDelayMs: 400, maxDelayMs: 400 } },
    });
    await vi.waitFor(() => expect(run.reports).toHaveLength(1), WAIT);
    expect(run.reports[0]?.outcome).toMatchObject({ kind: 'retry', code: 'HANDLER_FAILED' });
    // The delay is rounded up to 1 s of visibility: hidden now, back later.
    expect(await peekTexts(queue)).toEqual([]);
    await vi.waitFor(() => expect(run.reports).toHaveLength(2), WAIT);
    expect(run.reports[1]?.outcome).toEqual({ kind: 'ack', result: 'handled' });
    expect(run.reports[1]?.message.dequeueCount).toBe(2);
    expect(handler).toHaveBeenCalledTimes(2);
    expect(await countOf(queue)).toBe(0);
  });

  it('after N dequeues a failing message goes to <queue>-poison (original text) and the dead-letter file, and leaves the queue', async () => {
    const queue = await newQueue();
    const event = createTestEnvelope('daily.data.steps.created');
    const text = base64(event.raw); // the poison copy must be the stored text, not the decoded one
    await queue.sendMessage(text);
    const handler = vi.fn().mockRejectedValue(new Error('always fails'));
    const run = await start(queue, handler);
    await vi.waitFor(() => expect(run.reports.at(-1)?.outcome.kind).toBe('dead'), WAIT);
    expect(run.reports.map((r) => [r.message.dequeueCount, r.outcome.kind])).toEqual([
      [1, 'retry'],
      [2, 'retry'],
      [3, 'dead'],
    ]);
    expect(handler).toHaveBeenCalledTimes(3);
    const poison = service.getQueueClient(`${queue.name}-poison`);
    await vi.waitFor(async () => expect(await peekTexts(poison)).toEqual([text]), WAIT);
    const { peekedMessageItems } = await poison.peekMessages();
    expect(peekedMessageItems[0]?.expiresOn?.getUTCFullYear()).toBe(9999); // never expires on its own
    expect(await countOf(queue)).toBe(0);
    expect(run.deadLetters()).toEqual([
      expect.objectContaining({
        code: 'HANDLER_FAILED',
        attempts: 3,
        event_id: event.eventId,
        raw: event.raw,
        metadata: expect.objectContaining({ queue: queue.name, dequeue_count: 3, encoding: 'base64' }),
      }),
    ]);
  });

  it('deadLetterQueue: false dead-letters to the file only', async () => {
    const queue = await newQueue();
    await queue.sendMessage(staleEnvelope('daily.data.steps.created').raw);
    const run = await start(queue, vi.fn(), { adapter: { deadLetterQueue: false } });
    await vi.waitFor(() => expect(run.reports).toHaveLength(1), WAIT);
    expect(run.deadLetters()).toHaveLength(1);
    expect(await countOf(queue)).toBe(0);
    const names: string[] = [];
    for await (const q of service.listQueues({ prefix: queue.name })) names.push(q.name);
    expect(names).toEqual([queue.name]);
  });

  it('heartbeats keep a slow message invisible past its visibility timeout; the ack deletes with the newest popReceipt', async () => {
    const queue = await newQueue();
    await queue.sendMessage(createTestEnvelope('daily.data.steps.created').raw);
    const receive = vi.spyOn(queue, 'receiveMessages');
    const update = vi.spyOn(queue, 'updateMessage');
    const remove = vi.spyOn(queue, 'deleteMessage');
    let release!: () => void;
    // Beats every 0.5 s for a 2 s visibility: a stall of a second between two beats still keeps it.
    const run = await start(queue, () => new Promise<void>((resolve) => (release = resolve)), {
      adapter: { visibilityTimeoutSeconds: 2, heartbeatIntervalSeconds: 0.5 },
      consumer: { shutdownTimeoutMs: 100 },
    });
    await vi.waitFor(() => expect(release).toBeDefined(), WAIT);
    // What is under test is the visibility timeout itself, on the service's clock: a control
    // message received now with the same timeout and no heartbeat. Once it is visible again, the
    // slow message's first timeout (it was received earlier) has run out too.
    const control = await newQueue();
    await control.sendMessage('control');
    expect((await control.receiveMessages({ visibilityTimeout: 2 })).receivedMessageItems).toHaveLength(1);
    await vi.waitFor(async () => expect(await peekTexts(control)).toEqual(['control']), WAIT);
    // The slow message is still invisible, and was never received a second time.
    expect(await peekTexts(queue)).toEqual([]);
    const receipts = await Promise.all(receive.mock.results.map((r) => r.value));
    expect(receipts.flatMap((r) => r.receivedMessageItems)).toHaveLength(1);
    expect(run.reports).toEqual([]);
    expect(update).toHaveBeenCalled();
    release();
    await vi.waitFor(() => expect(run.reports).toHaveLength(1), WAIT);
    expect(run.reports[0]?.outcome).toEqual({ kind: 'ack', result: 'handled' });
    expect(run.logs.filter((l) => l.msg === 'settle failed')).toEqual([]);
    const newest = await update.mock.results.at(-1)?.value;
    expect(remove).toHaveBeenCalledOnce();
    expect(remove.mock.calls[0]?.[1]).toBe(newest.popReceipt);
    expect(remove.mock.calls[0]?.[1]).not.toBe(update.mock.calls[0]?.[1]);
    expect(await countOf(queue)).toBe(0);
  });

  it('a settle racing an in-flight heartbeat waits for it and uses the receipt it returned', async () => {
    const queue = await newQueue();
    await queue.sendMessage(createTestEnvelope('daily.data.steps.created').raw);
    const adapter = createStorageQueueAdapter({
      queueClient: queue,
      logger: createLogger({ level: 'silent' }),
    });
    const [message] = (await adapter.receive(1, new AbortController().signal)) ?? [];
    const received = adapter.popReceiptOf(message!);
    // Hold the heartbeat's answer back: the service has issued a new receipt, the adapter not yet seen it.
    const updateMessage = queue.updateMessage.bind(queue);
    let answer!: () => void;
    const held = new Promise<void>((resolve) => (answer = resolve));
    let issued: string | undefined;
    const update = vi.spyOn(queue, 'updateMessage').mockImplementationOnce(async (...args) => {
      const response = await updateMessage(...args);
      issued = response.popReceipt;
      await held;
      return response;
    });
    const remove = vi.spyOn(queue, 'deleteMessage');
    const beat = adapter.heartbeat(message!);
    await vi.waitFor(() => expect(issued).toBeDefined(), WAIT);
    const settle = adapter.settle(message!, { kind: 'ack', result: 'handled' });
    await new Promise((resolve) => setImmediate(resolve)); // a settle that did not wait would be on the wire now
    answer();
    await expect(beat).resolves.toBeUndefined();
    await expect(settle).resolves.toBeUndefined(); // a delete with the old receipt is refused
    expect(update).toHaveBeenCalledOnce();
    expect(issued).not.toBe(received);
    expect(remove).toHaveBeenCalledOnce();
    expect(remove.mock.calls[0]?.[1]).toBe(issued);
    expect(adapter.popReceiptOf(message!)).toBe(issued);
    expect(await countOf(queue)).toBe(0);
    await expect(adapter.settle(message!, { kind: 'ack', result: 'handled' })).rejects.toThrow(
      /already settled/,
    );
  });

  it('a backlog is accepted: age is measured from insertedOn, not the clock', async () => {
    const queue = await newQueue();
    const event = createTestEnvelope('daily.data.steps.created');
    await queue.sendMessage(event.raw);
    // The consumer comes up ten minutes later than the message was enqueued.
    const run = await start(queue, vi.fn(), { consumer: { now: () => Date.now() + 10 * 60_000 } });
    await vi.waitFor(() => expect(run.reports).toHaveLength(1), WAIT);
    expect(run.reports[0]?.outcome).toEqual({ kind: 'ack', result: 'handled' });
    expect(run.reports[0]?.message.enqueuedAt).toBe(run.reports[0]?.message.insertedOn.getTime());
  });

  it('an old envelope re-sent now is rejected (fresh insertedOn) and dead-lettered at once', async () => {
    const queue = await newQueue();
    const old = staleEnvelope('daily.data.steps.created', 600);
    await queue.sendMessage(old.raw);
    const handler = vi.fn();
    const run = await start(queue, handler);
    await vi.waitFor(() => expect(run.reports).toHaveLength(1), WAIT);
    expect(run.reports[0]?.outcome).toMatchObject({ kind: 'dead', code: 'TIMESTAMP_TOO_OLD' });
    expect(handler).not.toHaveBeenCalled();
    await vi.waitFor(
      async () => expect(await peekTexts(service.getQueueClient(`${queue.name}-poison`))).toEqual([old.raw]),
      WAIT,
    );
    expect(await countOf(queue)).toBe(0);
  });

  it('graceful stop: a handler that finishes in time is acked; unfinished messages become visible again, not deleted', async () => {
    const queue = await newQueue();
    const quick = createTestEnvelope('daily.data.steps.created');
    const stuck = [
      createTestEnvelope('daily.data.weight.created'),
      createTestEnvelope('daily.data.hrv.created'),
    ];
    for (const e of [quick, ...stuck]) await queue.sendMessage(e.raw);
    let finishQuick!: () => void;
    const started = new Set<string>();
    const run = await start(
      queue,
      (_event, context) => {
        started.add(context.eventId);
        if (context.eventId === quick.eventId) return new Promise<void>((resolve) => (finishQuick = resolve));
        return new Promise<void>((_, reject) =>
          context.signal.addEventListener('abort', () => reject(new Error('aborted'))),
        );
      },
      { consumer: { shutdownTimeoutMs: 300 } },
    );
    await vi.waitFor(() => expect(started.size).toBe(3), WAIT);
    const stopping = run.consumer.stop();
    finishQuick();
    await stopping;
    const outcomes = new Map(run.reports.map((r) => [r.eventId, r.outcome]));
    expect(outcomes.get(quick.eventId)).toEqual({ kind: 'ack', result: 'handled' });
    for (const e of stuck) expect(outcomes.get(e.eventId)).toMatchObject({ kind: 'retry', code: 'SHUTDOWN' });
    // Handed back with visibility 0: visible at once, first delivery still counted once.
    const { peekedMessageItems } = await queue.peekMessages({ numberOfMessages: 32 });
    expect(peekedMessageItems.map((m) => m.messageText).sort()).toEqual(stuck.map((e) => e.raw).sort());
    expect(peekedMessageItems.map((m) => m.dequeueCount)).toEqual([1, 1]);
  });

  it('stop ends an idle backoff at once', async () => {
    const queue = await newQueue();
    const receive = vi.spyOn(queue, 'receiveMessages');
    // A wait of a day: the stop below can only return by cutting it short.
    const day = 24 * 3600_000;
    const run = await start(queue, vi.fn(), { adapter: { pollIntervalMs: day, maxPollIntervalMs: day } });
    await vi.waitFor(() => expect(receive).toHaveBeenCalled(), WAIT);
    await receive.mock.results[0]?.value; // the queue answered empty: the adapter is now in its wait
    await new Promise((resolve) => setImmediate(resolve));
    await run.consumer.stop();
    expect(receive).toHaveBeenCalledOnce();
  });

  it('receives leave nothing on the long-lived stop signal: no listener, no dependent signal', async () => {
    // Each receive once made AbortSignal.any([stop, timeout]): on Node 20 every one stayed in the
    // stop signal's set of dependants for the life of the worker (about 70 bytes a receive).
    const queue = await newQueue();
    const adapter = createStorageQueueAdapter({
      queueClient: queue,
      pollIntervalMs: 0,
      maxPollIntervalMs: 0,
      logger: createLogger({ level: 'silent' }),
    });
    const stop = new AbortController();
    for (let i = 0; i < 40; i++) expect(await adapter.receive(1, stop.signal)).toEqual([]);
    await queue.sendMessage(createTestEnvelope('daily.data.steps.created').raw);
    const received = await adapter.receive(1, stop.signal);
    expect(received).toHaveLength(1);
    await adapter.settle(received?.[0] as StorageQueueMessage, { kind: 'ack', result: 'handled' });
    expectNothingLeftOn(stop.signal);
    expect(await countOf(queue)).toBe(0);
    await adapter.close();
  });

  it('concurrency is independent of the batch size', async () => {
    const queue = await newQueue();
    for (let i = 0; i < 40; i++) await queue.sendMessage(createTestEnvelope('daily.data.steps.created').raw);
    const receive = vi.spyOn(queue, 'receiveMessages');
    let inFlight = 0;
    let most = 0;
    const run = await start(
      queue,
      async () => {
        most = Math.max(most, ++inFlight);
        await new Promise((resolve) => setTimeout(resolve, 5));
        inFlight--;
      },
      { adapter: { numberOfMessages: 32 }, consumer: { concurrency: 5 } },
    );
    await vi.waitFor(() => expect(run.reports).toHaveLength(40), WAIT);
    expect(most).toBeLessThanOrEqual(5);
    expect(Math.max(...receive.mock.calls.map(([o]) => o?.numberOfMessages ?? 32))).toBeLessThanOrEqual(5);
    expect(await countOf(queue)).toBe(0);
  });

  it('receive from a missing queue throws an AdapterError naming the service code', async () => {
    const adapter = createStorageQueueAdapter({
      queueClient: service.getQueueClient('does-not-exist'),
      logger: createLogger({ level: 'silent' }),
    });
    const error = await adapter.receive(1, new AbortController().signal).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AdapterError);
    expect((error as AdapterError).message).toMatch(/404 QueueNotFound/);
    await expect(
      adapter.settle({} as StorageQueueMessage, { kind: 'ack', result: 'handled' }),
    ).rejects.toThrow(AdapterError);
  });
});

describe('StorageQueueAdapter when the service stalls or is down', () => {
  // Azurite's well-known development account key (public, in Azure's docs).
  const key = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';
  const connectionStringFor = (port: number) =>
    `DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=${key};QueueEndpoint=http://127.0.0.1:${port}/devstoreaccount1;`;

  /** A TCP server on loopback that accepts connections and never answers: a stalled service. */
  async function stalledServer(): Promise<{ port: number; requests(): number; close(): Promise<void> }> {
    const sockets = new Set<Socket>();
    let requests = 0;
    const server: Server = createServer((socket) => {
      sockets.add(socket);
      socket.once('data', () => requests++);
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return {
      port: (server.address() as AddressInfo).port,
      requests: () => requests,
      close: () =>
        new Promise<void>((resolve) => {
          for (const socket of sockets) socket.destroy();
          server.close(() => resolve());
        }),
    };
  }

  it('a receive with no answer fails after requestTimeoutMs with an AdapterError saying so', async () => {
    const stalled = await stalledServer();
    try {
      const adapter = createStorageQueueAdapter({
        queueName: 'stalled',
        connectionString: connectionStringFor(stalled.port),
        requestTimeoutMs: 300,
        logger: createLogger({ level: 'silent' }),
      });
      // The server never answers and the SDK has no timeout of its own: only ours can end the call.
      const error = await adapter.receive(1, new AbortController().signal).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(AdapterError);
      expect((error as AdapterError).message).toMatch(
        /receive from queue "stalled" failed: no answer within requestTimeoutMs/,
      );
      expect((error as AdapterError).details).toMatchObject({ timed_out: true });

      // A stop during a stalled receive ends it at once, without an error (its own timeout is
      // past the test's: the stop alone can end it).
      const patient = createStorageQueueAdapter({
        queueName: 'stalled',
        connectionString: connectionStringFor(stalled.port),
        requestTimeoutMs: 600_000,
        logger: createLogger({ level: 'silent' }),
      });
      const before = stalled.requests();
      const stop = new AbortController();
      const pending = patient.receive(1, stop.signal);
      await vi.waitFor(() => expect(stalled.requests()).toBe(before + 1), WAIT);
      stop.abort();
      await expect(pending).resolves.toEqual([]);
    } finally {
      await stalled.close();
    }
  });

  it('a worker reports a stalled service as a receive error, and keeps trying', async () => {
    const stalled = await stalledServer();
    const adapter = createStorageQueueAdapter({
      queueName: 'stalled',
      connectionString: connectionStringFor(stalled.port),
      requestTimeoutMs: 200,
      logger: createLogger({ level: 'silent' }),
    });
    const consumer = createConsumer({
      source: adapter,
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      logger: createLogger({ level: 'silent' }),
    });
    consumer.on('*', () => {});
    try {
      await consumer.start();
      await vi.waitFor(() => expect(consumer.status.lastReceiveError).toMatch(/no answer within/), WAIT);
      expect(consumer.status.state).toBe('running');
    } finally {
      await consumer.stop();
      await stalled.close();
    }
  });

  it('a refused connection surfaces after few, quick SDK retries, not minutes of them', async () => {
    const stalled = await stalledServer();
    const port = stalled.port;
    await stalled.close(); // nothing listens there now: connections are refused
    const adapter = createStorageQueueAdapter({
      queueName: 'down',
      connectionString: connectionStringFor(port),
      logger: createLogger({ level: 'silent' }),
    });
    // The SDK's waits between tries run on fake timers, each fired as soon as it is set and
    // measured on the fake clock. The refusals are real I/O.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    let error: unknown;
    const waits: number[] = [];
    try {
      let settled = false;
      void adapter
        .receive(1, new AbortController().signal)
        .catch((e: unknown) => {
          error = e;
        })
        .finally(() => {
          settled = true;
        });
      // One timer is the call's own deadline (requestTimeoutMs, 10 s), pending throughout; a
      // second one is the SDK's wait between tries, and only that one is run.
      while (!settled) {
        await new Promise((resolve) => setImmediate(resolve));
        if (vi.getTimerCount() < 2) continue;
        const before = Date.now();
        await vi.advanceTimersToNextTimerAsync();
        waits.push(Date.now() - before);
      }
    } finally {
      vi.useRealTimers();
    }
    expect(error).toBeInstanceOf(AdapterError);
    expect((error as AdapterError).message).toMatch(/ECONNREFUSED/);
    // 3 tries, so 2 waits, each at most maxRetryDelayInMs (2 s); the SDK's default policy waits
    // 0, 4 and 12 s between 4 tries.
    expect(waits).toHaveLength(2);
    expect(Math.max(...waits)).toBeLessThanOrEqual(2000);
  });
});

describe('storageQueueSourceFromCli', () => {
  it('azure-storage-queue:NAME takes the connection string from AZURE_STORAGE_CONNECTION_STRING', async () => {
    const queue = await newQueue();
    await queue.sendMessage(createTestEnvelope('daily.data.steps.created').raw);
    vi.stubEnv('AZURE_STORAGE_CONNECTION_STRING', azurite.connectionString);
    try {
      const source = storageQueueSourceFromCli(`azure-storage-queue:${queue.name}`, {
        logger: createLogger({ level: 'silent' }),
      });
      expect(source.name).toBe(`azure-storage-queue:${queue.name}`);
      expect(source.deadLetterQueueName).toBe(`${queue.name}-poison`);
      const run = await start(queue, vi.fn(), { source });
      await vi.waitFor(() => expect(run.reports).toHaveLength(1), WAIT);
      expect(run.reports[0]?.outcome.kind).toBe('ack');
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it('a queue URL with a SAS (Read, Process, Update) consumes, retries and acks', async () => {
    const queue = await newQueue();
    await queue.sendMessage(createTestEnvelope('daily.data.steps.created').raw);
    const sasUrl = queue.generateSasUrl({
      permissions: QueueSASPermissions.parse('rup'),
      expiresOn: new Date(Date.now() + 3600_000),
    });
    const source = storageQueueSourceFromCli(sasUrl, { logger: createLogger({ level: 'silent' }) });
    const handler = vi.fn().mockRejectedValueOnce(new Error('once')).mockResolvedValue(undefined);
    const run = await start(queue, handler, { source });
    await vi.waitFor(() => expect(run.reports).toHaveLength(2), WAIT);
    expect(run.reports.map((r) => r.outcome.kind)).toEqual(['retry', 'ack']);
    expect(await countOf(queue)).toBe(0);
  });

  it('without Update permission a retry cannot be applied, and the error says which permission', async () => {
    const queue = await newQueue();
    await queue.sendMessage(createTestEnvelope('daily.data.steps.created').raw);
    const sasUrl = queue.generateSasUrl({
      permissions: QueueSASPermissions.parse('rp'),
      expiresOn: new Date(Date.now() + 3600_000),
    });
    const adapter = storageQueueSourceFromCli(sasUrl, { logger: createLogger({ level: 'silent' }) });
    const [message] = (await adapter.receive(1, new AbortController().signal)) ?? [];
    const retry = { kind: 'retry', code: 'HANDLER_FAILED', reason: 'x', delayMs: 0 } as const;
    await expect(adapter.settle(message!, retry)).rejects.toThrow(
      /403 AuthorizationPermissionMismatch.*needs Process and Update/,
    );
  });

  it('isStorageQueueSpec tells Storage Queue sources from the others', () => {
    expect(isStorageQueueSpec('azure-storage-queue:orders')).toBe(true);
    expect(isStorageQueueSpec('https://acct.queue.core.windows.net/orders?sv=x')).toBe(true);
    expect(isStorageQueueSpec('https://acct.queue.core.chinacloudapi.cn/orders')).toBe(true);
    expect(isStorageQueueSpec('http://127.0.0.1:8080/events')).toBe(false);
    expect(isStorageQueueSpec('https://sqs.eu-west-1.amazonaws.com/1/orders')).toBe(false);
    expect(isStorageQueueSpec('file:events.jsonl')).toBe(false);
  });

  it('rejects unusable specs with a ConfigError, and never needs the network to build one', () => {
    vi.stubEnv('AZURE_STORAGE_CONNECTION_STRING', '');
    try {
      expect(() => storageQueueSourceFromCli('azure-storage-queue:orders')).toThrow(
        /AZURE_STORAGE_CONNECTION_STRING/,
      );
    } finally {
      vi.unstubAllEnvs();
    }
    expect(() => storageQueueSourceFromCli('azure-storage-queue:')).toThrow(ConfigError);
    expect(() => storageQueueSourceFromCli('azure-storage-queue:Bad_Name')).toThrow(
      /not a valid Storage queue name/,
    );
    expect(() => storageQueueSourceFromCli('http://acct.queue.core.windows.net/orders?sig=x')).toThrow(
      /https/,
    );
    expect(() => storageQueueSourceFromCli('sqs://x')).toThrow(ConfigError);
    // Without a SAS: DefaultAzureCredential, imported only when the first call connects.
    const source = storageQueueSourceFromCli('https://acct.queue.core.windows.net/orders');
    expect(source.name).toBe('azure-storage-queue:orders');
    expect(source.heartbeatIntervalMs).toBe(10_000);
    expect(source.maxBatchSize).toBe(32);
  });

  it('validates options at construction', () => {
    const queueClient = service.getQueueClient('orders');
    expect(() => createStorageQueueAdapter({ queueClient, numberOfMessages: 33 })).toThrow(ConfigError);
    expect(() =>
      createStorageQueueAdapter({ queueClient, visibilityTimeoutSeconds: 10, heartbeatIntervalSeconds: 10 }),
    ).toThrow(/shorter than visibilityTimeoutSeconds/);
    expect(() => createStorageQueueAdapter({ queueClient: service.getQueueClient('a'.repeat(60)) })).toThrow(
      /poison queue name/,
    );
  });
});
