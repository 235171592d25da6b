import { join } from 'node:path';
import tls from 'node:tls';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { WebSocket } from 'ws';
import {
  createEventHubsAdapter,
  type EventHubsAdapterOptions,
  type EventHubsMessage,
} from '../adapters/event-hubs/index.js';
import { type Consumer, createConsumer } from '../src/consumer/consumer.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { silentLogger } from '../src/core/logger.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import type { TestHub } from './support/event-hubs-server.js';
import { tempDir } from './support/harness.js';
import { HAS_OPENSSL, selfSignedLocalhostCert } from './support/tls-cert.js';

/**
 * AMQP over WebSockets (`clientOptions.webSocketOptions`), what a partner behind a proxy that lets
 * only 443 through uses: the consumer's client and the poison hub's producer both connect that way.
 * The SDK dials only `wss://`, so the broker's WebSocket listener speaks HTTPS with a self-signed
 * certificate, which the client trusts through `webSocketConstructorOptions` (passed to `ws`).
 */
const WAIT = { timeout: 10_000, interval: 20 };

/** Node's own WebSocket client (undici's, global from Node 22): none on Node 20. */
const NODE_WEBSOCKET: typeof globalThis.WebSocket | undefined = globalThis.WebSocket;
/** Node's process-wide CA list (from Node 24.5, backported to 22; not in @types/node 20). */
const caDefaults = tls as {
  getCACertificates?: (type: 'default') => string[];
  setDefaultCACertificates?: (certs: readonly string[]) => void;
};

describe.skipIf(!HAS_OPENSSL)('Event Hubs adapter over AMQP WebSockets', () => {
  let certDir: ReturnType<typeof tempDir>;
  let broker: EventHubsBroker;
  let cert: string;
  let clientOptions: NonNullable<EventHubsAdapterOptions['clientOptions']>;
  let dir: ReturnType<typeof tempDir>;
  let hub: TestHub;
  const running = new Set<Consumer<EventHubsMessage>>();

  beforeAll(async () => {
    certDir = tempDir('phe-eventhubs-ws-cert-');
    const made = selfSignedLocalhostCert(certDir.path);
    cert = made.cert;
    broker = await EventHubsBroker.start({ webSocket: { key: made.key, cert } });
    clientOptions = { webSocketOptions: { webSocket: WebSocket, webSocketConstructorOptions: { ca: cert } } };
  });

  afterAll(async () => {
    await broker?.stop();
    certDir?.cleanup();
  });

  beforeEach(async () => {
    dir = tempDir('phe-eventhubs-ws-');
    hub = await broker.createHub(1);
  });

  afterEach(async () => {
    await Promise.all([...running].map((consumer) => consumer.stop()));
    running.clear();
    dir.cleanup();
  });

  /** A consumer reading `hub` through the broker's WebSocket listener, with fast retries. */
  async function startConsumer(
    handler: (event: { event_id: string }) => void,
    options: Partial<EventHubsAdapterOptions> = {},
  ): Promise<void> {
    const consumer = createConsumer<EventHubsMessage>({
      source: createEventHubsAdapter({
        connectionString: broker.webSocketConnectionString(hub.name),
        checkpointStore: join(dir.path, 'checkpoints.db'),
        clientOptions,
        logger: silentLogger(),
        ...options,
      }),
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      dedupe: createSqliteDedupe({ path: join(dir.path, 'dedupe.db') }),
      deadLetter: join(dir.path, 'dead.jsonl'),
      logger: silentLogger(),
      retry: { maxAttempts: 2, baseDelayMs: 10, maxDelayMs: 20 },
    });
    consumer.on('*', handler as never);
    await consumer.start();
    running.add(consumer);
  }

  it('receives and handles events with the consumer client connected over WebSocket', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    await hub.publish('0', event.raw);
    const handled: string[] = [];
    await startConsumer((e) => {
      handled.push(e.event_id);
    });

    await vi.waitFor(() => expect(handled).toEqual([event.eventId]), WAIT);
    const links = broker.consumers().filter((link) => link.hub === hub.name);
    expect(links).toEqual([expect.objectContaining({ partitionId: '0', webSocket: true })]);
  });

  it('copies a dead event to the poison hub with the producer connected over WebSocket too', async () => {
    const poisonHub = await broker.createHub(1);
    const event = createTestEnvelope('daily.data.steps.created');
    await hub.publish('0', event.raw);
    await startConsumer(
      () => {
        throw new Error('poison');
      },
      { deadLetterQueue: poisonHub.name },
    );

    await vi.waitFor(async () => expect(await poisonHub.events('0')).toHaveLength(1), WAIT);
    const copy = (await poisonHub.events('0'))[0];
    expect(Buffer.from(copy?.body ?? []).toString('utf8')).toBe(event.raw);
    const producers = broker.producerLinks().filter((link) => link.address === poisonHub.name);
    expect(producers.length).toBeGreaterThan(0);
    for (const link of producers) expect(link.webSocket).toBe(true);
  });

  // What docs/adapters/event-hubs.md tells partners on Node 22 and later: no `ws` needed.
  it.skipIf(!NODE_WEBSOCKET || !caDefaults.setDefaultCACertificates)(
    "Node's own WebSocket works as webSocketOptions.webSocket, for the consumer and the poison hub's producer",
    async () => {
      // It takes no TLS options: the test's certificate is trusted process-wide meanwhile.
      const defaults = caDefaults.getCACertificates?.('default') ?? [];
      caDefaults.setDefaultCACertificates?.([...defaults, cert]);
      try {
        const poisonHub = await broker.createHub(1);
        const dead = createTestEnvelope('daily.data.steps.created');
        const fine = createTestEnvelope('daily.data.steps.created');
        await hub.publish('0', dead.raw);
        await hub.publish('0', fine.raw);
        const handled: string[] = [];
        await startConsumer(
          (e) => {
            if (e.event_id === dead.eventId) throw new Error('poison');
            handled.push(e.event_id);
          },
          {
            deadLetterQueue: poisonHub.name,
            // (Skipped above when absent.)
            clientOptions: { webSocketOptions: { webSocket: NODE_WEBSOCKET as typeof globalThis.WebSocket } },
          },
        );

        await vi.waitFor(() => expect(handled).toEqual([fine.eventId]), WAIT);
        expect(await poisonHub.events('0')).toHaveLength(1);
        const consumers = broker.consumers().filter((link) => link.hub === hub.name);
        expect(consumers).toEqual([expect.objectContaining({ webSocket: true })]);
        const producers = broker.producerLinks().filter((link) => link.address === poisonHub.name);
        expect(producers.length).toBeGreaterThan(0);
        for (const link of producers) expect(link.webSocket).toBe(true);
      } finally {
        caDefaults.setDefaultCACertificates?.(defaults);
      }
    },
  );
});
