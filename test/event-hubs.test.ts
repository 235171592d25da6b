import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type CheckpointStore, EventHubProducerClient } from '@azure/event-hubs';
import { BlobCheckpointStore } from '@azure/eventhubs-checkpointstore-blob';
import { ContainerClient } from '@azure/storage-blob';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
// The class itself (its prototype is spied on below); the public entry exports it as a type.
import { EventHubsAdapter } from '../adapters/event-hubs/adapter.js';
import {
  createEventHubsAdapter,
  type EventHubsAdapterOptions,
  type EventHubsMessage,
  envelopeText,
  eventHubsSourceFromCli,
  POISON_PROPERTIES,
  SqliteCheckpointStore,
} from '../adapters/event-hubs/index.js';
import { PartitionLane } from '../adapters/event-hubs/partition-lane.js';
import { PoisonHub } from '../adapters/event-hubs/poison-hub.js';
import { type Consumer, createConsumer, type SettledReport } from '../src/consumer/consumer.js';
import type { HandlerContext } from '../src/consumer/router.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { ConfigError } from '../src/core/errors.js';
import { createLogger, silentLogger } from '../src/core/logger.js';
import { COPY_REASON_MAX_CHARS, reasonForCopy } from '../src/core/outcome.js';
import { Keyring } from '../src/core/secrets.js';
import { verifyMessage } from '../src/core/verify.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { Azurite } from './support/azurite.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import type { EventHubsTestServer, TestHub } from './support/event-hubs-server.js';
import { tempDir } from './support/harness.js';
import { expectNothingLeftOn } from './support/signals.js';
import { recordSpans } from './support/spans.js';

type Handler = (event: { event_id: string }, context: HandlerContext) => unknown;

interface Worker {
  readonly adapter: EventHubsAdapter;
  readonly consumer: Consumer<EventHubsMessage>;
  readonly reports: SettledReport<EventHubsMessage>[];
  stop(): Promise<void>;
}

/**
 * The server: our in-process AMQP broker, or with PARTNER_EVENTS_TEST_EVENTHUBS=emulator the
 * official Event Hubs emulator in Docker (see docs/adapters/event-hubs.md).
 */
const SERVER = process.env.PARTNER_EVENTS_TEST_EVENTHUBS ?? 'broker';
if (SERVER !== 'broker' && SERVER !== 'emulator') {
  throw new Error(`PARTNER_EVENTS_TEST_EVENTHUBS="${SERVER}": expected broker or emulator`);
}
/** What the adapter logs each time the poison hub refuses a copy. */
const COPY_FAILED = 'copy to the poison hub failed: the partition waits until it succeeds';
/** The emulator knows only hubs declared at its start (partition count → how many): one per test. */
const EMULATOR_HUBS = { 1: 2, 2: 7, 4: 1 };
const WAIT = { timeout: SERVER === 'emulator' ? 30_000 : 10_000, interval: 20 };

let server: EventHubsTestServer;
/** The test's own hub (fresh and empty). */
let hub: TestHub;
let dir: ReturnType<typeof tempDir>;
const running = new Set<Worker>();

beforeAll(async () => {
  server =
    SERVER === 'emulator'
      ? await (await import('./support/event-hubs-emulator.js')).EventHubsEmulator.start({
          hubs: EMULATOR_HUBS,
        })
      : await EventHubsBroker.start();
}, 600_000);

afterAll(async () => {
  await server?.stop();
});

beforeEach(() => {
  dir = tempDir('phe-eventhubs-');
});

afterEach(async () => {
  await Promise.all([...running].map((w) => w.stop()));
  dir.cleanup();
  vi.restoreAllMocks();
});

/** A consumer over the Event Hubs adapter with fast retries, files in the temp dir and no logs. */
async function startWorker(
  handler: Handler,
  options: Partial<EventHubsAdapterOptions> & { dedupePath?: string; shutdownTimeoutMs?: number } = {},
): Promise<Worker> {
  const { dedupePath, shutdownTimeoutMs, ...adapterOptions } = options;
  const adapter = createEventHubsAdapter({
    connectionString: hub.connectionString,
    checkpointStore: join(dir.path, 'checkpoints.db'),
    checkpointIntervalMs: 100,
    logger: process.env.DBG ? createLogger({ level: 'debug' }) : silentLogger(),
    ...adapterOptions,
  });
  const reports: SettledReport<EventHubsMessage>[] = [];
  const consumer = createConsumer<EventHubsMessage>({
    source: adapter,
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    dedupe: createSqliteDedupe({ path: dedupePath ?? join(dir.path, 'dedupe.db') }),
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
async function publish(partitionId: string): Promise<string> {
  const event = createTestEnvelope('daily.data.steps.created');
  await hub.publish(partitionId, event.raw);
  return event.eventId;
}

/**
 * Message ids (`<partition>:<sequence number>`) as they pass through every adapter from now on:
 * `buffered` once the SDK hands them to a partition's lane, `handedOut` once a receive gives them
 * to the consumer. Between the two an event waits for its turn in the partition.
 */
function watchLanes(): { buffered: string[]; handedOut: string[] } {
  const buffered: string[] = [];
  const handedOut: string[] = [];
  const push = PartitionLane.prototype.push;
  vi.spyOn(PartitionLane.prototype, 'push').mockImplementation(function (
    this: PartitionLane<object>,
    events,
  ) {
    for (const e of events) buffered.push(`${this.partitionId}:${e.sequenceNumber}`);
    push.call(this, events);
  });
  const receive = EventHubsAdapter.prototype.receive;
  vi.spyOn(EventHubsAdapter.prototype, 'receive').mockImplementation(async function (
    this: EventHubsAdapter,
    max,
    signal,
  ) {
    const batch = await receive.call(this, max, signal);
    for (const m of batch ?? []) handedOut.push(m.id);
    return batch;
  });
  return { buffered, handedOut };
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
  beforeEach(async () => {
    hub = await server.createHub(2);
  });

  it('delivers signed events from every partition through createConsumer and checkpoints them', async () => {
    // Partition 0 through the SDK producer (a string body: the JS SDK JSON-quotes it on the wire),
    // partition 1 as raw bytes.
    const producer = new EventHubProducerClient(hub.connectionString);
    const viaSdk = [
      createTestEnvelope('daily.data.heart_rate.created'),
      createTestEnvelope('coach.nudge.created'),
    ];
    await producer.sendBatch(
      viaSdk.map((e) => ({ body: e.raw })),
      { partitionId: '0' },
    );
    await producer.close();
    const raw = [await publish('1'), await publish('1')];

    const seen: { id: string; messageId: string; enqueuedAt: number | undefined }[] = [];
    const worker = await startWorker((event, ctx) => {
      seen.push({ id: event.event_id, messageId: ctx.messageId, enqueuedAt: ctx.enqueuedAt });
    });
    await vi.waitFor(() => expect(seen).toHaveLength(4), WAIT);

    expect(seen.map((s) => s.id).sort()).toEqual([...viaSdk.map((e) => e.eventId), ...raw].sort());
    expect(seen.map((s) => s.messageId).sort()).toEqual(['0:0', '0:1', '1:0', '1:1']);
    const stored = (await hub.events('1'))[0];
    expect(seen.find((s) => s.messageId === '1:0')?.enqueuedAt).toBe(stored?.enqueuedTime);
    expect(worker.reports.every((r) => r.outcome.kind === 'ack')).toBe(true);
    expect(worker.adapter.partitions).toEqual(['0', '1']);

    await worker.stop();
    expect(await checkpoints(worker.adapter)).toEqual({ 0: 1, 1: 1 });
  });

  it('keeps order within a partition while other partitions proceed', async () => {
    const lanes = watchLanes();
    const [first, second] = [await publish('0'), await publish('0')];
    const other = await publish('1');
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
    // The second event is buffered behind the slow first one (the SDK handed both over)…
    await vi.waitFor(() => expect(lanes.buffered).toContain('0:1'), WAIT);
    // …while partition 1 goes on: an event published now is handed out and handled, by receives
    // that looked at partition 0 too (they visit every partition while slots are free).
    const later = await publish('1');
    await vi.waitFor(() => expect(finished).toContain(later), WAIT);
    expect(lanes.handedOut).not.toContain('0:1');
    expect(started).not.toContain(second);

    release();
    await vi.waitFor(() => expect(finished).toContain(second), WAIT);
    expect(finished.indexOf(first)).toBeLessThan(finished.indexOf(second));
    expect(started.indexOf(second)).toBeGreaterThan(started.indexOf(first));
  });

  it('retries in place, dead-letters after N attempts, then the partition moves on', async () => {
    const poison = await publish('0');
    const afterPoison = await publish('0');
    const flaky = await publish('1');
    const afterFlaky = await publish('1');
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

  it('copies a dead event to the poison hub byte for byte, with why and where it died', async () => {
    const poisonHub = await server.createHub(1);
    const event = createTestEnvelope('daily.data.steps.created');
    await hub.publish('0', event.raw, { tenant: 'acme' });
    const after = await publish('0');
    const worker = await startWorker(
      (e) => {
        if (e.event_id === event.eventId) throw new Error('poison');
      },
      { deadLetterQueue: poisonHub.name },
    );
    expect(worker.adapter.deadLetterQueueName).toBe(poisonHub.name);
    await vi.waitFor(() => expect(handledIds(worker.reports)).toEqual([after]), WAIT);

    const copies = await poisonHub.events('0');
    expect(copies).toHaveLength(1);
    expect(Buffer.from(copies[0]?.body ?? []).toString('utf8')).toBe(event.raw);
    expect(copies[0]?.applicationProperties).toMatchObject({
      tenant: 'acme', // the publisher's own properties are kept
      [POISON_PROPERTIES.code]: 'HANDLER_FAILED',
      [POISON_PROPERTIES.attempts]: 3,
      [POISON_PROPERTIES.eventHub]: hub.name,
      [POISON_PROPERTIES.consumerGroup]: '$Default',
      [POISON_PROPERTIES.partitionId]: '0',
      [POISON_PROPERTIES.sequenceNumber]: 0,
    });
    // The copy is the signed envelope itself: it still verifies (e.g. to replay from the poison hub).
    const keyring = new Keyring([{ id: 'current', secret: TEST_SIGNING_SECRET }]);
    expect(verifyMessage(Buffer.from(copies[0]?.body ?? []), { keyring }).eventId).toBe(event.eventId);
    const dead = readFileSync(join(dir.path, 'dead.jsonl'), 'utf8').trim().split('\n');
    expect(dead).toHaveLength(1); // the dead-letter file is still written (first)
    await worker.stop();
    expect(await checkpoints(worker.adapter)).toEqual({ 0: 1 });
  });

  it('leaves nothing on the closing signal that every poison copy is sent under', async () => {
    // The adapter's closing signal lives as long as the adapter; each copy hands it to the SDK.
    const signals = new Set<AbortSignal>();
    const send = PoisonHub.prototype.send;
    vi.spyOn(PoisonHub.prototype, 'send').mockImplementation(function (this: PoisonHub, event, info, signal) {
      signals.add(signal);
      return send.call(this, event, info, signal);
    });
    const poisonHub = await server.createHub(1);
    const dead = new Set<string>();
    for (let i = 0; i < 6; i++) dead.add(await publish('0'));
    const after = await publish('0');
    const worker = await startWorker(
      (e) => {
        if (dead.has(e.event_id)) throw new Error('poison');
      },
      { deadLetterQueue: poisonHub.name },
    );
    await vi.waitFor(() => expect(handledIds(worker.reports)).toEqual([after]), WAIT);
    expect(await poisonHub.events('0')).toHaveLength(dead.size);
    expect(signals.size).toBe(1);
    const [closing] = signals;
    expect(closing?.aborted).toBe(false);
    expectNothingLeftOn(closing as AbortSignal);
    await worker.stop();
  });

  // Our broker sees each connection's open properties; the emulator's hubs are counted out per test.
  it.skipIf(SERVER !== 'broker')(
    "writes poison copies with the consumer's clientOptions (a proxy's web sockets, retries, user agent)",
    async () => {
      const broker = server as EventHubsBroker;
      const poisonHub = await server.createHub(1);
      const event = createTestEnvelope('daily.data.steps.created');
      await hub.publish('0', event.raw);
      const userAgent = 'partner-behind-proxy/1.0';
      await startWorker(
        () => {
          throw new Error('poison');
        },
        { deadLetterQueue: poisonHub.name, clientOptions: { userAgent } },
      );
      await vi.waitFor(async () => expect(await poisonHub.events('0')).toHaveLength(1), WAIT);
      // The SDK appends the client's userAgent to its own in the AMQP connection's properties.
      const poisonProducers = broker.producerLinks().filter((link) => link.address === poisonHub.name);
      expect(poisonProducers.length).toBeGreaterThan(0);
      for (const link of poisonProducers) expect(link.userAgent).toMatch(/,partner-behind-proxy\/1\.0$/);
    },
  );

  it('holds the partition while the poison hub refuses the copy; a stop leaves the event for next time', async () => {
    const lanes = watchLanes();
    const poison = await publish('0');
    const after = await publish('0');
    const other = await publish('1');
    const failing = (e: { event_id: string }) => {
      if (e.event_id === poison) throw new Error('poison');
    };
    const logs: { msg: string }[] = [];
    const logger = createLogger(
      { level: 'warn' },
      { write: (line: string) => void logs.push(JSON.parse(line)) },
    );
    const one = await startWorker(failing, { deadLetterQueue: 'no-such-hub', logger });
    await vi.waitFor(() => expect(handledIds(one.reports)).toEqual([other]), WAIT);
    await vi.waitFor(() => expect(one.reports.some((r) => r.outcome.kind === 'dead')).toBe(true), WAIT);
    await vi.waitFor(() => expect(logs.map((l) => l.msg)).toContain(COPY_FAILED), WAIT);
    // The event after the dead one is buffered, yet not handed out while partition 1 goes on
    // (an event published now is handed out and handled: the partitions were looked at since).
    expect(lanes.buffered).toContain('0:1');
    const later = await publish('1');
    await vi.waitFor(() => expect(handledIds(one.reports)).toContain(later), WAIT);
    expect(lanes.handedOut).not.toContain('0:1'); // the partition waits for the copy
    expect(handledIds(one.reports)).toEqual([other, later]);
    // The copy never succeeds (the hub does not exist): the stop returns without it.
    await one.stop();
    expect(await checkpoints(one.adapter)).toEqual({ 1: 1 }); // nothing of partition 0 settled

    const poisonHub = await server.createHub(1);
    const two = await startWorker(failing, { deadLetterQueue: poisonHub.name });
    await vi.waitFor(() => expect(handledIds(two.reports)).toEqual([after]), WAIT);
    expect(await poisonHub.events('0')).toHaveLength(1);
    await two.stop();
    expect(await checkpoints(two.adapter)).toEqual({ 0: 1, 1: 1 });
  });

  it('on stop finishes in-flight events and checkpoints only what was settled', async () => {
    const [a, b] = [await publish('0'), await publish('0')];
    await publish('0');
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
    const first = [await publish('0'), await publish('0'), await publish('0'), await publish('0')];
    const handled: string[] = [];
    const handler: Handler = (event) => {
      handled.push(event.event_id);
    };
    const one = await startWorker(handler);
    await vi.waitFor(() => expect(handled).toHaveLength(4), WAIT);
    await one.stop();
    expect(await checkpoints(one.adapter)).toEqual({ 0: 3 });

    const later = [await publish('0'), await publish('0')];
    const two = await startWorker(handler);
    await vi.waitFor(() => expect(handled).toHaveLength(6), WAIT);
    // A message is reported once settled, after its handler: wait for the second report too.
    await vi.waitFor(() => expect(two.reports).toHaveLength(2), WAIT);
    // Nothing before the checkpoint was even received again.
    expect(two.reports.map((r) => r.message.id)).toEqual(['0:4', '0:5']);
    await two.stop();

    // A crash that lost the last checkpoint writes: the checkpoint is back at sequence number 1.
    const store = new SqliteCheckpointStore({ path: join(dir.path, 'checkpoints.db') });
    const rewound = (await hub.events('0'))[1];
    await store.updateCheckpoint({
      fullyQualifiedNamespace: two.adapter.fullyQualifiedNamespace,
      eventHubName: hub.name,
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

describe('trace context through the broker: the delivery span links to what the event carried', () => {
  let recorder: ReturnType<typeof recordSpans>;
  beforeAll(() => {
    recorder = recordSpans();
  });
  afterAll(() => recorder.stop());
  beforeEach(async () => {
    // The emulator's pool holds 10 hubs, its quota, all taken by the tests above.
    if (SERVER === 'broker') hub = await server.createHub(1);
  });

  const TRACEPARENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
  const TRACEPARENT_SPAN = '00f067aa0ba902b7';
  const DIAGNOSTIC_TRACE = '0af7651916cd43dd8448eb211c80319c';
  const DIAGNOSTIC_SPAN = 'b7ad6b7169203331';

  it.skipIf(SERVER === 'emulator')(
    'traceparent / tracestate or Diagnostic-Id application properties; malformed ones are handled without a link',
    async () => {
      const producer = new EventHubProducerClient(hub.connectionString);
      const event = (properties?: Record<string, string>) => ({
        body: createTestEnvelope('daily.data.steps.created').raw,
        ...(properties ? { properties } : {}),
      });
      await producer.sendBatch(
        [
          event({ traceparent: `00-${TRACEPARENT_TRACE}-${TRACEPARENT_SPAN}-01`, tracestate: 'vendor=1' }),
          // What an instrumented Azure SDK producer sets (a W3C traceparent under its older name).
          event({ 'Diagnostic-Id': `00-${DIAGNOSTIC_TRACE}-${DIAGNOSTIC_SPAN}-01` }),
          event({ traceparent: '00-not-a-trace-context-01' }),
          // The hierarchical Request-Id of older .NET producers: not W3C, so no link.
          event({ 'Diagnostic-Id': `|${DIAGNOSTIC_TRACE}.${DIAGNOSTIC_SPAN}.` }),
          event(),
        ],
        { partitionId: '0' },
      );
      await producer.close();
      const worker = await startWorker(() => {});
      await vi.waitFor(() => expect(handledIds(worker.reports)).toHaveLength(5), WAIT);

      const deliveries = new Map(
        recorder
          .spans()
          .filter((span) => span.name.startsWith('process '))
          .map((span) => [span.attributes['messaging.message.id'], span]),
      );
      const links = (id: string) =>
        deliveries.get(id)?.links.map((l) => `${l.context.traceId}/${l.context.spanId}`);
      expect(links('0:0')).toEqual([`${TRACEPARENT_TRACE}/${TRACEPARENT_SPAN}`]);
      expect(deliveries.get('0:0')?.links[0]?.context.traceState?.serialize()).toBe('vendor=1');
      expect(deliveries.get('0:0')?.attributes).toMatchObject({
        'messaging.system': 'azure_eventhubs',
        'messaging.destination.partition.id': '0',
        'partner_events.outcome': 'handled',
      });
      expect(links('0:1')).toEqual([`${DIAGNOSTIC_TRACE}/${DIAGNOSTIC_SPAN}`]);
      expect([links('0:2'), links('0:3'), links('0:4')]).toEqual([[], [], []]);
    },
  );
});

// Our broker with a limit as Event Hubs has one (1 MB), only smaller: the emulator's pool is full.
describe.skipIf(SERVER !== 'broker')('a poison hub that refuses a copy over its size limit', () => {
  /** Fits a normal envelope's copy with a cut reason (~2 KB); not one of a few KB more. */
  const LIMIT = 4096;
  let limited: EventHubsBroker;
  beforeAll(async () => {
    limited = await EventHubsBroker.start({ maxMessageBytes: LIMIT });
  });
  afterAll(async () => {
    await limited?.stop();
  });
  beforeEach(async () => {
    hub = await limited.createHub(1);
  });

  /** The dead-letter file's records. */
  const deadRecords = () =>
    readFileSync(join(dir.path, 'dead.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { raw: string; reason: string });

  it("cuts the handler's reason to 1024 characters on the copy; the dead-letter file keeps it whole", async () => {
    const poisonHub = await limited.createHub(1);
    const dead = await publish('0');
    const after = await publish('0');
    // A handler's message can be any length: here one of about 1 MB, the hub's whole limit.
    const long = `validation failed: ${'detail '.repeat(150_000)}`;
    const worker = await startWorker(
      (e) => {
        if (e.event_id === dead) throw new Error(long);
      },
      { deadLetterQueue: poisonHub.name },
    );
    await vi.waitFor(() => expect(handledIds(worker.reports)).toEqual([after]), WAIT);
    const copies = await poisonHub.events('0');
    expect(copies).toHaveLength(1);
    const reason = String(copies[0]?.applicationProperties?.[POISON_PROPERTIES.reason]);
    expect(reason).toHaveLength(COPY_REASON_MAX_CHARS);
    const whole = deadRecords()[0]?.reason ?? '';
    expect(whole.length).toBeGreaterThan(long.length);
    expect(whole.startsWith(reason)).toBe(true);
    await worker.stop();
    expect(await checkpoints(worker.adapter)).toEqual({ 0: 1 });
  });

  it('a copy refused as too large is said at error level and the partition moves on; the dead-letter file has the event', async () => {
    const poisonHub = await limited.createHub(1);
    // Fits the main hub (published as it is), not the poison hub once the properties are added.
    const big = createTestEnvelope('daily.data.steps.created', { fields: { note: 'x'.repeat(LIMIT) } });
    await hub.publish('0', big.raw);
    const after = await publish('0');
    const logs: { level: number; msg: string; code?: string }[] = [];
    const logger = createLogger(
      { level: 'warn' },
      { write: (line: string) => void logs.push(JSON.parse(line)) },
    );
    const worker = await startWorker(
      (e) => {
        if (e.event_id === big.eventId) throw new Error('poison');
      },
      { deadLetterQueue: poisonHub.name, logger },
    );
    await vi.waitFor(() => expect(handledIds(worker.reports)).toEqual([after]), WAIT);
    expect(await poisonHub.events('0')).toHaveLength(0);
    expect(deadRecords().map((r) => r.raw)).toEqual([big.raw]);
    const refused = logs.filter((l) => l.msg.startsWith('the poison hub refused the copy as too large'));
    expect(refused).toEqual([
      expect.objectContaining({
        level: 50,
        code: 'HANDLER_FAILED',
        err: expect.stringContaining(`limit (${LIMIT} bytes)`),
      }),
    ]);
    // Refused once, never retried: a retry cannot make it fit.
    expect(logs.map((l) => l.msg)).not.toContain(COPY_FAILED);
    await worker.stop();
    expect(await checkpoints(worker.adapter)).toEqual({ 0: 1 });
  });
});

describe('two instances with the Blob checkpoint store (Azurite)', () => {
  let azurite: Azurite;
  beforeEach(async () => {
    azurite = await Azurite.start('blob');
    hub = await server.createHub(4);
  });
  afterEach(async () => {
    await Promise.all([...running].map((w) => w.stop()));
    await azurite.stop();
  });

  it('share the partitions and handle each event once', async () => {
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
    for (let i = 0; i < 20; i++) ids.push(await publish(String(i % 4)));

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

    for (let i = 0; i < 20; i++) ids.push(await publish(String(i % 4)));
    await vi.waitFor(() => expect(counts.size).toBe(40), WAIT);
    await Promise.all([a.stop(), b.stop()]); // drains: a late second run would show up in counts
    expect([...counts.keys()].sort()).toEqual([...ids].sort());
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
    expect(handledIds(b.reports).length).toBeGreaterThan(0);
    const stored = await new BlobCheckpointStore(container).listCheckpoints(
      a.adapter.fullyQualifiedNamespace,
      hub.name,
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

describe('reasonForCopy (the reason a poison copy carries)', () => {
  it('keeps a short reason; cuts a long one to 1024 characters, never inside a surrogate pair', () => {
    expect(reasonForCopy('handler failed')).toBe('handler failed');
    expect(reasonForCopy('a'.repeat(5000))).toBe('a'.repeat(COPY_REASON_MAX_CHARS));
    // An emoji whose two halves would straddle the cut is left out whole.
    const straddling = `${'a'.repeat(COPY_REASON_MAX_CHARS - 1)}😀tail`;
    expect(reasonForCopy(straddling)).toBe('a'.repeat(COPY_REASON_MAX_CHARS - 1));
    expect(reasonForCopy(`${'a'.repeat(COPY_REASON_MAX_CHARS - 2)}😀tail`)).toHaveLength(
      COPY_REASON_MAX_CHARS,
    );
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

  it('copies dead events to EVENTHUBS_DEAD_LETTER_QUEUE, which must not be the hub being read', async () => {
    const env = {
      EVENTHUBS_CONNECTION_STRING: cs,
      EVENTHUBS_CHECKPOINT_STORE: `sqlite:${join(dir.path, 'cp.db')}`,
    };
    const adapter = eventHubsSourceFromCli(
      'azure-event-hubs:orders',
      {},
      { ...env, EVENTHUBS_DEAD_LETTER_QUEUE: 'orders-poison' },
    );
    expect(adapter.deadLetterQueueName).toBe('orders-poison');
    await adapter.close();
    expect(() =>
      eventHubsSourceFromCli(
        'azure-event-hubs:orders',
        {},
        { ...env, EVENTHUBS_DEAD_LETTER_QUEUE: 'orders' },
      ),
    ).toThrow(/is the hub being read/);
    expect(() =>
      eventHubsSourceFromCli(
        'azure-event-hubs:orders',
        {},
        { ...env, EVENTHUBS_DEAD_LETTER_QUEUE: 'bad name' },
      ),
    ).toThrow(ConfigError);
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
