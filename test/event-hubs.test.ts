import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type CheckpointStore, EventHubProducerClient } from '@azure/event-hubs';
import { BlobCheckpointStore } from '@azure/eventhubs-checkpointstore-blob';
import { ContainerClient } from '@azure/storage-blob';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  createEventHubsAdapter,
  type EventHubsAdapter,
  type EventHubsAdapterOptions,
  type EventHubsMessage,
  envelopeText,
  eventHubsSourceFromCli,
  SqliteCheckpointStore,
} from '../adapters/event-hubs/index.js';
import { SqliteDedupeStore } from '../src/dedupe/sqlite.js';
import { ConfigError } from '../src/errors.js';
import { silentLogger } from '../src/logger.js';
import type { HandlerContext } from '../src/router.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/testing.js';
import { type Consumer, createConsumer, type SettledReport } from '../src/worker.js';
import { Azurite } from './support/azurite.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import { tempDir } from './support/harness.js';

type Handler = (event: { event_id: string }, context: HandlerContext) => unknown;

interface Worker {
  readonly adapter: EventHubsAdapter;
  readonly consumer: Consumer<EventHubsMessage>;
  readonly reports: SettledReport<EventHubsMessage>[];
  stop(): Promise<void>;
}

const WAIT = { timeout: 10_000, interval: 20 };

let broker: EventHubsBroker;
let dir: ReturnType<typeof tempDir>;
const running = new Set<Worker>();

beforeEach(async () => {
  broker = await EventHubsBroker.start({ partitions: 2 });
  dir = tempDir('phe-eventhubs-');
});

afterEach(async () => {
  await Promise.all([...running].map((w) => w.stop()));
  await broker.stop();
  dir.cleanup();
});

/** A consumer over the Event Hubs adapter with fast retries, files in the temp dir and no logs. */
async function startWorker(
  handler: Handler,
  options: Partial<EventHubsAdapterOptions> & { dedupePath?: string; shutdownTimeoutMs?: number } = {},
): Promise<Worker> {
  const { dedupePath, shutdownTimeoutMs, ...adapterOptions } = options;
  const adapter = createEventHubsAdapter({
    connectionString: broker.connectionString(),
    checkpointStore: join(dir.path, 'checkpoints.db'),
    checkpointIntervalMs: 100,
    logger: silentLogger(),
    ...adapterOptions,
  });
  const reports: SettledReport<EventHubsMessage>[] = [];
  const consumer = createConsumer<EventHubsMessage>({
    source: adapter,
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    dedupe: new SqliteDedupeStore({ path: dedupePath ?? join(dir.path, 'dedupe.db') }),
    deadLetter: join(dir.path, 'dead.jsonl'),
    logger: silentLogger(),
    retry: { maxAttempts: 3, baseDelayMs: 10, maxDelayMs: 40 },
    ...(shutdownTimeoutMs === undefined ? {} : { shutdownTimeoutMs }),
    onSettled: (report) => reports.push(report),
  });
  consumer.on('*', handler as never);
  await consumer.start();
  const worker: Worker = {
    adapter,
    consumer,
    reports,
    async stop() {
      running.delete(worker);
      await consumer.stop();
    },
  };
  running.add(worker);
  return worker;
}

/** Publishes a signed event as raw UTF-8 bytes (what .NET/Python/Java publishers send). */
function publish(partitionId: string): string {
  const event = createTestEnvelope('daily.data.steps.created');
  broker.publish(partitionId, event.raw);
  return event.eventId;
}

function handledIds(reports: readonly SettledReport<EventHubsMessage>[]): string[] {
  return reports
    .filter((r) => r.outcome.kind === 'ack' && r.outcome.result === 'handled')
    .map((r) => r.eventId ?? '');
}

async function checkpoints(adapter: EventHubsAdapter, path = join(dir.path, 'checkpoints.db')) {
  const store = new SqliteCheckpointStore({ path });
  try {
    const list = await store.listCheckpoints(
      adapter.fullyQualifiedNamespace,
      adapter.eventHubName,
      '$Default',
    );
    return Object.fromEntries(list.map((c) => [c.partitionId, c.sequenceNumber]));
  } finally {
    store.close();
  }
}

describe('Event Hubs adapter against the real SDK', () => {
  it('delivers signed events from every partition through createConsumer and checkpoints them', async () => {
    // Partition 0 through the SDK producer (a string body: the JS SDK JSON-quotes it on the wire),
    // partition 1 as raw bytes.
    const producer = new EventHubProducerClient(broker.connectionString());
    const viaSdk = [
      createTestEnvelope('daily.data.heart_rate.created'),
      createTestEnvelope('coach.nudge.created'),
    ];
    await producer.sendBatch(
      viaSdk.map((e) => ({ body: e.raw })),
      { partitionId: '0' },
    );
    await producer.close();
    const raw = [publish('1'), publish('1')];

    const seen: { id: string; messageId: string; enqueuedAt: number | undefined }[] = [];
    const worker = await startWorker((event, ctx) => {
      seen.push({ id: event.event_id, messageId: ctx.messageId, enqueuedAt: ctx.enqueuedAt });
    });
    await vi.waitFor(() => expect(seen).toHaveLength(4), WAIT);

    expect(seen.map((s) => s.id).sort()).toEqual([...viaSdk.map((e) => e.eventId), ...raw].sort());
    expect(seen.map((s) => s.messageId).sort()).toEqual(['0:0', '0:1', '1:0', '1:1']);
    const stored = broker.events('1')[0];
    expect(seen.find((s) => s.messageId === '1:0')?.enqueuedAt).toBe(stored?.enqueuedTime);
    expect(worker.reports.every((r) => r.outcome.kind === 'ack')).toBe(true);
    expect(worker.adapter.partitions).toEqual(['0', '1']);

    await worker.stop();
    expect(await checkpoints(worker.adapter)).toEqual({ 0: 1, 1: 1 });
  });

  it('keeps order within a partition while other partitions proceed', async () => {
    const [first, second] = [publish('0'), publish('0')];
    const other = publish('1');
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const started: string[] = [];
    const finished: string[] = [];
    await startWorker(async (event) => {
      started.push(event.event_id);
      if (event.event_id === first) await gate;
      finished.push(event.event_id);
    });

    await vi.waitFor(() => expect(finished).toContain(other), WAIT);
    expect(started).toContain(first);
    // The slow first event holds its partition: the second has not started.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(started).not.toContain(second);

    release();
    await vi.waitFor(() => expect(finished).toContain(second), WAIT);
    expect(finished.indexOf(first)).toBeLessThan(finished.indexOf(second));
    expect(started.indexOf(second)).toBeGreaterThan(started.indexOf(first));
  });

  it('retries in place, dead-letters after N attempts, then the partition moves on', async () => {
    const poison = publish('0');
    const afterPoison = publish('0');
    const flaky = publish('1');
    const afterFlaky = publish('1');
    const calls: string[] = [];
    let flakyFailures = 0;
    const worker = await startWorker((event, ctx) => {
      calls.push(`${event.event_id}#${ctx.attempt}`);
      if (event.event_id === poison) throw new Error('poison');
      if (event.event_id === flaky && flakyFailures++ === 0) throw new Error('transient');
    });

    await vi.waitFor(
      () => expect(handledIds(worker.reports)).toEqual(expect.arrayContaining([afterPoison, afterFlaky])),
      WAIT,
    );
    const partition0 = calls.filter((c) => c.startsWith(poison) || c.startsWith(afterPoison));
    expect(partition0).toEqual([`${poison}#1`, `${poison}#2`, `${poison}#3`, `${afterPoison}#1`]);
    const partition1 = calls.filter((c) => c.startsWith(flaky) || c.startsWith(afterFlaky));
    expect(partition1).toEqual([`${flaky}#1`, `${flaky}#2`, `${afterFlaky}#1`]);

    const dead = readFileSync(join(dir.path, 'dead.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({
      code: 'HANDLER_FAILED',
      attempts: 3,
      event_id: poison,
      message_id: '0:0',
      metadata: { partition_id: '0', sequence_number: 0, consumer_group: '$Default' },
    });
    await worker.stop();
    expect(await checkpoints(worker.adapter)).toEqual({ 0: 1, 1: 1 });
  });

  it('on stop finishes in-flight events and checkpoints only what was settled', async () => {
    const [a, b] = [publish('0'), publish('0')];
    publish('0');
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const handled: string[] = [];
    let bStarted = false;
    const worker = await startWorker(async (event) => {
      if (event.event_id === b) {
        bStarted = true;
        await gate;
      }
      handled.push(event.event_id);
    });
    // Stop only once b is in its handler: an event still buffered at stop is rightly never started.
    await vi.waitFor(() => expect(bStarted).toBe(true), WAIT);
    expect(handled).toEqual([a]);
    const stopping = worker.stop();
    setTimeout(release, 50);
    await stopping;
    expect(handled).toEqual([a, b]); // b finished; the third was buffered and never started
    expect(await checkpoints(worker.adapter)).toEqual({ 0: 1 });
  });

  it('resumes from the checkpoint after a restart; dedupe catches what a lost checkpoint replays', async () => {
    const first = [publish('0'), publish('0'), publish('0'), publish('0')];
    const handled: string[] = [];
    const handler: Handler = (event) => {
      handled.push(event.event_id);
    };
    const one = await startWorker(handler);
    await vi.waitFor(() => expect(handled).toHaveLength(4), WAIT);
    await one.stop();
    expect(await checkpoints(one.adapter)).toEqual({ 0: 3 });

    const later = [publish('0'), publish('0')];
    const two = await startWorker(handler);
    await vi.waitFor(() => expect(handled).toHaveLength(6), WAIT);
    // Nothing before the checkpoint was even received again.
    expect(two.reports.map((r) => r.message.id)).toEqual(['0:4', '0:5']);
    await two.stop();

    // A crash that lost the last checkpoint writes: the checkpoint is back at sequence number 1.
    const store = new SqliteCheckpointStore({ path: join(dir.path, 'checkpoints.db') });
    const rewound = broker.events('0')[1];
    await store.updateCheckpoint({
      fullyQualifiedNamespace: two.adapter.fullyQualifiedNamespace,
      eventHubName: 'hub',
      consumerGroup: '$Default',
      partitionId: '0',
      sequenceNumber: 1,
      offset: rewound?.offset ?? '',
    });
    store.close();
    const three = await startWorker(handler);
    await vi.waitFor(() => expect(three.reports).toHaveLength(4), WAIT);
    expect(three.reports.map((r) => [r.message.id, r.outcome])).toEqual(
      ['0:2', '0:3', '0:4', '0:5'].map((id) => [id, { kind: 'ack', result: 'duplicate' }]),
    );
    expect(handled).toEqual([...first, ...later]);
  });
});

describe('two instances with the Blob checkpoint store (Azurite)', () => {
  let azurite: Azurite;
  beforeEach(async () => {
    azurite = await Azurite.start('blob');
  });
  afterEach(async () => {
    await Promise.all([...running].map((w) => w.stop()));
    await azurite.stop();
  });

  it('share the partitions and handle each event once', async () => {
    await broker.stop();
    broker = await EventHubsBroker.start({ partitions: 4 });
    const container = new ContainerClient(azurite.connectionString, 'checkpoints');
    await container.create();
    const blobStore = (): CheckpointStore => new BlobCheckpointStore(container);
    const counts = new Map<string, number>();
    const handler: Handler = (event) => {
      counts.set(event.event_id, (counts.get(event.event_id) ?? 0) + 1);
    };
    const options = {
      loadBalancing: { updateIntervalMs: 200, partitionOwnershipExpirationIntervalMs: 5000 },
      dedupePath: join(dir.path, 'shared-dedupe.db'), // two processes sharing one SQLite file
    };
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push(publish(String(i % 4)));

    const a = await startWorker(handler, {
      ...options,
      checkpointStore: blobStore(),
      clientOptions: { identifier: 'a' },
    });
    await vi.waitFor(() => expect(a.adapter.partitions).toHaveLength(4), WAIT);
    const b = await startWorker(handler, {
      ...options,
      checkpointStore: blobStore(),
      clientOptions: { identifier: 'b' },
    });
    await vi.waitFor(() => {
      expect(a.adapter.partitions).toHaveLength(2);
      expect(b.adapter.partitions).toHaveLength(2);
    }, WAIT);
    expect([...a.adapter.partitions, ...b.adapter.partitions].sort()).toEqual(['0', '1', '2', '3']);

    for (let i = 0; i < 20; i++) ids.push(publish(String(i % 4)));
    await vi.waitFor(() => expect(counts.size).toBe(40), WAIT);
    await Promise.all([a.stop(), b.stop()]); // drains: a late second run would show up in counts
    expect([...counts.keys()].sort()).toEqual([...ids].sort());
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
    expect(handledIds(b.reports).length).toBeGreaterThan(0);
    const stored = await new BlobCheckpointStore(container).listCheckpoints(
      a.adapter.fullyQualifiedNamespace,
      'hub',
      '$Default',
    );
    expect(Object.fromEntries(stored.map((c) => [c.partitionId, c.sequenceNumber]))).toEqual({
      0: 9,
      1: 9,
      2: 9,
      3: 9,
    });
  });
});

describe('envelopeText (what the HMAC is checked on)', () => {
  const envelope = createTestEnvelope('daily.data.steps.created').raw;

  it('decodes raw UTF-8 bytes exactly', () => {
    expect(envelopeText(Buffer.from(envelope, 'utf8'))).toBe(envelope);
  });

  it('unquotes a JSON string literal (a JS publisher that sent the envelope as a string)', () => {
    expect(envelopeText(Buffer.from(JSON.stringify(envelope), 'utf8'))).toBe(envelope);
  });

  it('keeps a string value section as is', () => {
    expect(envelopeText(envelope)).toBe(envelope);
  });

  it('re-serialises an object body, keeping the signed inner body string byte for byte', () => {
    const parsed = JSON.parse(envelope) as { body: string };
    const text = envelopeText(parsed);
    expect(typeof text === 'string' && (JSON.parse(text) as { body: string }).body).toBe(parsed.body);
  });

  it('passes invalid UTF-8 on as bytes (the pipeline dead-letters it with the original bytes)', () => {
    const bad = Uint8Array.from([0x7b, 0xff, 0x7d]);
    expect(envelopeText(bad)).toBe(bad);
  });
});

describe('eventHubsSourceFromCli', () => {
  const cs =
    'Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=dev;SharedAccessKey=dev;UseDevelopmentEmulator=true';

  it('builds an adapter for azure-event-hubs:HUB from EVENTHUBS_CONNECTION_STRING', async () => {
    const adapter = eventHubsSourceFromCli(
      'azure-event-hubs:orders',
      { consumerGroup: 'partner', logger: silentLogger() },
      { EVENTHUBS_CONNECTION_STRING: cs, EVENTHUBS_CHECKPOINT_STORE: `sqlite:${join(dir.path, 'cp.db')}` },
    );
    expect(adapter.name).toBe('azure-event-hubs:orders');
    expect(adapter.consumerGroup).toBe('partner');
    await adapter.close();
  });

  it('rejects a bad spec and missing credentials with a ConfigError', () => {
    expect(() =>
      eventHubsSourceFromCli('azure-event-hubs:', {}, { EVENTHUBS_CONNECTION_STRING: cs }),
    ).toThrow(ConfigError);
    expect(() => eventHubsSourceFromCli('azure-event-hubs:orders', {}, {})).toThrow(
      /EVENTHUBS_CONNECTION_STRING/,
    );
    expect(() =>
      eventHubsSourceFromCli(
        'azure-event-hubs:orders',
        {},
        { EVENTHUBS_CONNECTION_STRING: `${cs};EntityPath=other` },
      ),
    ).toThrow(/EntityPath/);
  });
});
