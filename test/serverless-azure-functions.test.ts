/**
 * The Azure Functions wrappers (partner-health-events/azure-functions) with `@azure/functions`'s
 * own InvocationContext and the trigger metadata the host passes, backed by real brokers for
 * what the host would do: Azurite for the Storage Queue trigger (receive, delete on return, let
 * visibility return a throw, move to `-poison` after maxDequeueCount), the test Event Hubs broker
 * for the Event Hubs trigger (a partition's batch in, checkpoint after return whatever happened).
 */
import { join } from 'node:path';
import { EventHubProducerClient } from '@azure/event-hubs';
import { InvocationContext } from '@azure/functions';
import { type QueueClient, QueueServiceClient } from '@azure/storage-queue';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConsumerOptions, createConsumer } from '../src/consumer/consumer.js';
import { createTestEnvelope, forgedEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { silentLogger } from '../src/core/logger.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import {
  EphemeralDedupeError,
  eventHubHandler,
  type FunctionHandler,
  type FunctionMessage,
  storageQueueHandler,
} from '../src/serverless/azure-functions.js';
import { Azurite } from './support/azurite.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import type { TestHub } from './support/event-hubs-server.js';
import { tempDir } from './support/harness.js';
import { readJsonl } from './support/records.js';

const dir = tempDir('phe-functions-');
const SECRETS = [{ id: 'current', secret: TEST_SIGNING_SECRET }];
let seq = 0;

function testConsumer(options: Partial<ConsumerOptions<FunctionMessage>> = {}) {
  const deadLetterPath = join(dir.path, `dead-${++seq}.jsonl`);
  const consumer = createConsumer<FunctionMessage>({
    secrets: SECRETS,
    dedupe: createMemoryDedupe(),
    deadLetter: deadLetterPath,
    logger: silentLogger(),
    ...options,
  });
  return { consumer, deadLetterPath };
}

afterAll(() => dir.cleanup());

describe('storageQueueHandler under a Storage Queue host (Azurite)', () => {
  let azurite: Azurite;
  let service: QueueServiceClient;
  const MAX_DEQUEUE = 3;

  beforeAll(async () => {
    azurite = await Azurite.start('queue');
    service = QueueServiceClient.fromConnectionString(azurite.connectionString);
  });
  afterAll(async () => {
    await azurite?.stop();
  });

  async function newQueue(prefix: string): Promise<{ queue: QueueClient; poison: QueueClient }> {
    const name = `${prefix}-${++seq}`;
    const queue = service.getQueueClient(name);
    await queue.create();
    return { queue, poison: service.getQueueClient(`${name}-poison`) };
  }

  /** Sends as a Functions app does: base64 of the UTF-8 text (the host's default messageEncoding). */
  async function sendBase64(queue: QueueClient, text: string): Promise<void> {
    await queue.sendMessage(Buffer.from(text, 'utf8').toString('base64'));
  }

  interface HostTurn {
    readonly returned: number;
    readonly threw: number;
    readonly movedByHost: number;
  }

  /**
   * One poll of the host: each message decoded (JSON handed over parsed, as the host does), the
   * function called with an InvocationContext carrying the trigger metadata; returned → deleted;
   * threw → left to its visibility timeout, or moved to `-poison` by the host on its last dequeue.
   */
  async function hostTurn(
    queue: QueueClient,
    poison: QueueClient,
    handler: FunctionHandler<unknown>,
  ): Promise<HostTurn> {
    const { receivedMessageItems } = await queue.receiveMessages({
      numberOfMessages: 16,
      visibilityTimeout: 1,
    });
    let returned = 0;
    let threw = 0;
    let movedByHost = 0;
    for (const item of receivedMessageItems) {
      const text = Buffer.from(item.messageText, 'base64').toString('utf8');
      let input: unknown = text;
      try {
        input = JSON.parse(text);
      } catch {}
      const context = new InvocationContext({
        invocationId: `inv-${++seq}`,
        functionName: 'partnerEvents',
        triggerMetadata: {
          id: item.messageId,
          popReceipt: item.popReceipt,
          dequeueCount: item.dequeueCount,
          insertionTime: item.insertedOn.toISOString(),
          expirationTime: item.expiresOn.toISOString(),
          nextVisibleTime: item.nextVisibleOn.toISOString(),
        },
        options: { trigger: { type: 'queueTrigger', name: 'queueItem' } },
      });
      try {
        await handler(input, context);
        await queue.deleteMessage(item.messageId, item.popReceipt);
        returned++;
      } catch {
        threw++;
        if (item.dequeueCount >= MAX_DEQUEUE) {
          await poison.createIfNotExists();
          await poison.sendMessage(item.messageText);
          await queue.deleteMessage(item.messageId, item.popReceipt);
          movedByHost++;
        }
      }
    }
    return { returned, threw, movedByHost };
  }

  async function hostUntil(
    queue: QueueClient,
    poison: QueueClient,
    handler: FunctionHandler<unknown>,
    done: () => boolean | Promise<boolean>,
  ): Promise<HostTurn[]> {
    const turns: HostTurn[] = [];
    for (let i = 0; i < 60; i++) {
      if (await done()) return turns;
      const turn = await hostTurn(queue, poison, handler);
      if (turn.returned + turn.threw > 0) turns.push(turn);
      else await new Promise((resolve) => setTimeout(resolve, 200)); // the host's polling interval
    }
    throw new Error(`the host did not get there: ${JSON.stringify(turns)}`);
  }

  async function poisonTexts(poison: QueueClient): Promise<string[]> {
    if (!(await poison.exists())) return [];
    const { peekedMessageItems } = await poison.peekMessages({ numberOfMessages: 32 });
    return peekedMessageItems.map((m) => Buffer.from(m.messageText, 'base64').toString('utf8'));
  }

  it('handles an event with the enqueue time and dequeue count from the trigger metadata; a throw is retried by the host', async () => {
    const { queue, poison } = await newQueue('fn-ok');
    const envelope = createTestEnvelope('daily.data.steps.created');
    const seen: { attempt: number; enqueuedAt: number | undefined }[] = [];
    const { consumer } = testConsumer();
    consumer.on('daily.data.steps.created', (_event, ctx) => {
      seen.push({ attempt: ctx.attempt, enqueuedAt: ctx.enqueuedAt });
      if (ctx.attempt === 1) throw new Error('downstream busy');
    });
    const handler = storageQueueHandler(consumer, {
      allowEphemeralDedupe: true,
      poisonQueue: poison,
      maxDequeueCount: MAX_DEQUEUE,
    });
    const before = Date.now();
    await sendBase64(queue, envelope.raw);
    const turns = await hostUntil(queue, poison, handler, () => seen.length === 2);
    expect(seen.map((s) => s.attempt)).toEqual([1, 2]);
    expect(seen[0]?.enqueuedAt).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 - 1000);
    expect(turns.map((t) => [t.returned, t.threw])).toEqual([
      [0, 1],
      [1, 0],
    ]);
    expect(await poisonTexts(poison)).toEqual([]);
  });

  it('dead-letters a malformed message at once, on its first dequeue: record written, copy on -poison, function returns', async () => {
    const { queue, poison } = await newQueue('fn-dead');
    const malformed = '{"not":"an envelope"}';
    const { consumer, deadLetterPath } = testConsumer();
    const handler = storageQueueHandler(consumer, {
      allowEphemeralDedupe: true,
      poisonQueue: poison,
      maxDequeueCount: MAX_DEQUEUE,
    });
    await sendBase64(queue, malformed);
    const turns = await hostUntil(
      queue,
      poison,
      handler,
      async () => (await poisonTexts(poison)).length === 1,
    );
    expect(turns).toEqual([{ returned: 1, threw: 0, movedByHost: 0 }]);
    expect(await poisonTexts(poison)).toEqual([malformed]);
    expect(readJsonl(deadLetterPath).map((r) => r.code)).toEqual(['MALFORMED_ENVELOPE']);
  });

  it('a forged message is retried, and on the host’s last dequeue dead-lettered by the kit with its reason (not moved by the host)', async () => {
    const { queue, poison } = await newQueue('fn-forged');
    const forged = forgedEnvelope('daily.data.steps.created');
    const { consumer, deadLetterPath } = testConsumer();
    const handler = storageQueueHandler(consumer, {
      allowEphemeralDedupe: true,
      poisonQueue: poison,
      maxDequeueCount: MAX_DEQUEUE,
    });
    await sendBase64(queue, forged.raw);
    const turns = await hostUntil(
      queue,
      poison,
      handler,
      async () => (await poisonTexts(poison)).length === 1,
    );
    expect(turns.map((t) => [t.returned, t.threw, t.movedByHost])).toEqual([
      [0, 1, 0],
      [0, 1, 0],
      [1, 0, 0],
    ]);
    expect(await poisonTexts(poison)).toEqual([forged.raw]);
    const [record] = readJsonl(deadLetterPath);
    expect(record?.code).toBe('SIGNATURE_MISMATCH');
    expect(String(record?.reason)).toContain('maxDequeueCount');
  });

  it('refuses a memory dedupe store unless allowed for tests', () => {
    const { consumer } = testConsumer();
    expect(() => storageQueueHandler(consumer)).toThrow(EphemeralDedupeError);
    expect(() => eventHubHandler(consumer)).toThrow(EphemeralDedupeError);
  });
});

describe('eventHubHandler under an Event Hubs host (the test broker)', () => {
  let broker: EventHubsBroker;

  beforeAll(async () => {
    broker = await EventHubsBroker.start();
  });
  afterAll(async () => {
    await broker?.stop();
  });

  /**
   * One invocation as the host makes it for `cardinality: 'many'`: the partition's events from the
   * checkpoint on, as strings (JSON parsed, as the host hands it), with the metadata arrays; then
   * the checkpoint moves past the batch whatever the function did (Azure-Functions#947).
   */
  async function invoke(
    hub: TestHub,
    partitionId: string,
    from: number,
    handler: FunctionHandler<unknown[]>,
  ) {
    const events = (await hub.events(partitionId)).slice(from);
    const inputs = events.map((e) => {
      const text = Buffer.from(e.body).toString('utf8');
      try {
        return JSON.parse(text) as unknown;
      } catch {
        return text;
      }
    });
    const context = new InvocationContext({
      invocationId: `inv-${++seq}`,
      functionName: 'partnerEvents',
      triggerMetadata: {
        partitionContext: { eventHubName: hub.name, consumerGroup: '$Default', partitionId },
        enqueuedTimeUtcArray: events.map((e) => new Date(e.enqueuedTime).toISOString()),
        sequenceNumberArray: events.map((e) => e.sequenceNumber),
        offsetArray: events.map((e) => e.offset),
      },
      options: { trigger: { type: 'eventHubTrigger', name: 'events' } },
    });
    let threw: unknown;
    try {
      await handler(inputs, context);
    } catch (error) {
      threw = error;
    }
    return { checkpoint: from + events.length, threw };
  }

  it('keeps the partition’s order, retries a failing event in place before the next, and never passes an unhandled one as handled', async () => {
    const hub = await broker.createHub(1);
    const poisonHub = await broker.createHub(1);
    const envelopes = [0, 1, 2].map(() => createTestEnvelope('daily.data.steps.created'));
    const hopeless = createTestEnvelope('daily.data.steps.created');
    for (const e of [envelopes[0], hopeless, envelopes[1], envelopes[2]])
      await hub.publish('0', (e as { raw: string }).raw);
    const order: string[] = [];
    const { consumer, deadLetterPath } = testConsumer({
      retry: { maxAttempts: 1000, baseDelayMs: 10, maxDelayMs: 20 },
    });
    let flakyFailures = 0;
    consumer.on('daily.data.steps.created', (event, ctx) => {
      order.push(`${event.event_id}@${ctx.attempt}`);
      if (event.event_id === envelopes[1]?.eventId && flakyFailures++ < 2) throw new Error('flaky');
      if (event.event_id === hopeless.eventId) throw new Error('never works');
    });
    const producer = new EventHubProducerClient(poisonHub.connectionString);
    try {
      const handler = eventHubHandler(consumer, {
        allowEphemeralDedupe: true,
        budgetMs: 3000,
        reserveMs: 200,
        poisonHub: producer,
      });
      const { checkpoint, threw } = await invoke(hub, '0', 0, handler);
      expect(threw).toBeUndefined();
      expect(checkpoint).toBe(4);
      const ids = (id: string | undefined) => order.filter((o) => o.startsWith(`${id}@`));
      expect(ids(envelopes[0]?.eventId)).toEqual([`${envelopes[0]?.eventId}@1`]);
      expect(ids(envelopes[1]?.eventId)).toEqual([1, 2, 3].map((a) => `${envelopes[1]?.eventId}@${a}`));
      // Order: everything of the hopeless one before the next event, the flaky one before the last.
      const firstOf = (id: string | undefined) => order.findIndex((o) => o.startsWith(`${id}@`));
      const lastOf = (id: string | undefined) => order.findLastIndex((o) => o.startsWith(`${id}@`));
      expect(lastOf(hopeless.eventId)).toBeLessThan(firstOf(envelopes[1]?.eventId));
      expect(lastOf(envelopes[1]?.eventId)).toBeLessThan(firstOf(envelopes[2]?.eventId));
      // The hopeless one was dead-lettered before the function returned: record and poison copy.
      const records = readJsonl(deadLetterPath);
      expect(records.map((r) => r.code)).toEqual(['HANDLER_FAILED']);
      expect(String(records[0]?.reason)).toContain('time budget');
      const copies = await poisonHub.events('0');
      expect(copies.map((c) => Buffer.from(c.body).toString('utf8'))).toEqual([hopeless.raw]);
      expect(copies[0]?.applicationProperties?.['partner-events-dead-code']).toBe('HANDLER_FAILED');
    } finally {
      await producer.close();
    }
  });

  it('without a poison hub, what the budget did not reach goes to the dead-letter sink before the function returns', async () => {
    const hub = await broker.createHub(1);
    const slow = createTestEnvelope('daily.data.steps.created');
    const unreached = createTestEnvelope('daily.data.steps.created');
    await hub.publish('0', slow.raw);
    await hub.publish('0', unreached.raw);
    const { consumer, deadLetterPath } = testConsumer();
    const handled: string[] = [];
    consumer.on('daily.data.steps.created', async (event, ctx) => {
      // Runs until the invocation's budget aborts it.
      if (event.event_id === slow.eventId)
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
      else handled.push(event.event_id);
    });
    const handler = eventHubHandler(consumer, { allowEphemeralDedupe: true, budgetMs: 800, reserveMs: 200 });
    const { threw } = await invoke(hub, '0', 0, handler);
    expect(threw).toBeUndefined();
    expect(handled).toEqual([]);
    const records = readJsonl(deadLetterPath);
    expect(records.map((r) => r.event_id ?? r.message_id)).toHaveLength(2);
    expect(records.map((r) => r.code)).toEqual(['SHUTDOWN', 'SHUTDOWN']);
  });
});
