import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import tls from 'node:tls';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { WebSocket } from 'ws';
import {
  createEventHubsAdapter,
  type EventHubsAdapterOptions,
  type EventHubsMessage,
} from '../adapters/event-hubs/index.js';
import { eventHubsTargetFromCli } from '../adapters/event-hubs/sender.js';
import {
  clientOptionsFromEnv,
  webSocketClass,
  webSocketsFromEnv,
} from '../adapters/event-hubs/web-socket.js';
import { type Consumer, createConsumer } from '../src/consumer/consumer.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { ConfigError } from '../src/core/errors.js';
import { silentLogger } from '../src/core/logger.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { expectReceived, runCli, runReplay, startApp, startRun } from './support/cli.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import type { TestHub } from './support/event-hubs-server.js';
import { tempDir } from './support/harness.js';
import { HAS_OPENSSL, selfSignedLocalhostCert } from './support/tls-cert.js';

/**
 * AMQP over WebSockets (`clientOptions.webSocketOptions`, or `webSockets` / `EVENTHUBS_WEBSOCKETS`),
 * what a partner behind a proxy that lets only 443 through uses: the consumer's client and the
 * poison hub's producer both connect that way, and so do the CLI's `run`, `replay` and `--to`.
 * The SDK dials only `wss://`, so the broker's WebSocket listener speaks HTTPS with a self-signed
 * certificate, which the client trusts through `webSocketConstructorOptions` (passed to `ws`), and
 * a CLI child through `NODE_EXTRA_CA_CERTS`. A client that is not over WebSockets cannot reach
 * that listener at all (it would speak AMQP over TLS to an HTTPS server).
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
  let certPath: string;
  let clientOptions: NonNullable<EventHubsAdapterOptions['clientOptions']>;
  let dir: ReturnType<typeof tempDir>;
  let hub: TestHub;
  const running = new Set<Consumer<EventHubsMessage>>();

  beforeAll(async () => {
    certDir = tempDir('phe-eventhubs-ws-cert-');
    const made = selfSignedLocalhostCert(certDir.path);
    cert = made.cert;
    certPath = made.certPath;
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

  it("webSockets: true keeps a WebSocket class of the caller's own (clientOptions.webSocketOptions.webSocket)", async () => {
    const poisonHub = await broker.createHub(1);
    const event = createTestEnvelope('daily.data.steps.created');
    await hub.publish('0', event.raw);
    let made = 0;
    class CountingWebSocket extends WebSocket {
      constructor(...args: ConstructorParameters<typeof WebSocket>) {
        super(...args);
        made++;
      }
    }
    await startConsumer(
      () => {
        throw new Error('poison');
      },
      {
        webSockets: true,
        deadLetterQueue: poisonHub.name,
        clientOptions: {
          webSocketOptions: { webSocket: CountingWebSocket, webSocketConstructorOptions: { ca: cert } },
        },
      },
    );

    await vi.waitFor(async () => expect(await poisonHub.events('0')).toHaveLength(1), WAIT);
    // One connection for the consumer, one for the poison hub's producer: both the caller's class.
    expect(made).toBeGreaterThanOrEqual(2);
    expect(broker.consumerLinks().filter((link) => link.hub === hub.name)).toEqual([
      expect.objectContaining({ webSocket: true }),
    ]);
  });

  /** What a CLI child needs to reach `hubName` on the broker's WebSocket listener. */
  function cliEnvFor(hubName: string): NodeJS.ProcessEnv {
    return {
      EVENTHUBS_CONNECTION_STRING: broker.webSocketConnectionString(hubName),
      EVENTHUBS_CHECKPOINT_STORE: `sqlite:${join(dir.path, 'checkpoints.db')}`,
      EVENTHUBS_WEBSOCKETS: 'true',
      NODE_EXTRA_CA_CERTS: certPath,
    };
  }

  it('partner-events run with EVENTHUBS_WEBSOCKETS=true consumes over WebSocket and copies a dead event to the poison hub over WebSocket', async () => {
    const poisonHub = await broker.createHub(1);
    const fine = createTestEnvelope('daily.data.steps.created');
    const forged = createTestEnvelope('daily.data.steps.created', { secret: 'not-the-signing-secret' });
    await hub.publish('0', forged.raw);
    await hub.publish('0', fine.raw);
    const app = await startApp();
    try {
      const worker = await startRun(
        [
          '--source',
          `azure-event-hubs:${hub.name}`,
          '--forward',
          app.url,
          '--dedupe',
          'memory',
          '--dead-letter',
          join(dir.path, 'dead.jsonl'),
        ],
        {
          env: {
            ...cliEnvFor(hub.name),
            EVENTHUBS_DEAD_LETTER_QUEUE: poisonHub.name,
            // The forged signature is dead on its first failure (a signature mismatch is retried).
            PARTNER_EVENTS_RETRY_MAX_ATTEMPTS: '1',
          },
          killAfterMs: 60_000,
        },
      );
      try {
        await expectReceived(app, [fine], 30_000);
        await vi.waitFor(async () => expect(await poisonHub.events('0')).toHaveLength(1), {
          ...WAIT,
          timeout: 30_000,
        });
      } catch (error) {
        const { stdout, stderr } = await worker.stop();
        throw new Error(`${(error as Error).message}\nthe worker's output:\n${stdout}${stderr}`, {
          cause: error,
        });
      }
      const stopped = await worker.stop();
      expect(stopped.code, `${stopped.stdout}${stopped.stderr}`).toBe(0);
      const copy = (await poisonHub.events('0'))[0];
      expect(Buffer.from(copy?.body ?? []).toString('utf8')).toBe(forged.raw);
      const consumers = broker.consumerLinks().filter((link) => link.hub === hub.name);
      expect(consumers.length).toBeGreaterThan(0);
      for (const link of consumers) expect(link.webSocket).toBe(true);
      const producers = broker.producerLinks().filter((link) => link.address === poisonHub.name);
      expect(producers.length).toBeGreaterThan(0);
      for (const link of producers) expect(link.webSocket).toBe(true);
    } finally {
      await app.close();
    }
  }, 90_000);

  it('replay azure-event-hubs:POISON --to azure-event-hubs:HUB with EVENTHUBS_WEBSOCKETS=true reads and sends over WebSocket', async () => {
    const poisonHub = await broker.createHub(1);
    const dead = [createTestEnvelope('daily.data.steps.created'), createTestEnvelope('coach.nudge.created')];
    for (const e of dead)
      await poisonHub.publish('0', e.raw, { 'partner-events-dead-code': 'HANDLER_FAILED' });

    const replay = await runReplay(
      `azure-event-hubs:${poisonHub.name}`,
      [
        '--to',
        `azure-event-hubs:${hub.name}`,
        '--consumer-group',
        'replay',
        '--dead-letter',
        join(dir.path, 'replay-failed.jsonl'),
      ],
      { env: cliEnvFor(hub.name), killAfterMs: 90_000 },
    );

    expect(replay.code, replay.stderr).toBe(0);
    expect(replay.summary).toMatchObject({ total: 2, injected: 2 });
    const sent = (await hub.events('0')).map((e) => Buffer.from(e.body).toString('utf8'));
    expect(sent.sort()).toEqual(dead.map((e) => e.raw).sort());
    const readers = broker.consumerLinks().filter((link) => link.hub === poisonHub.name);
    expect(readers.length).toBeGreaterThan(0);
    for (const link of readers) expect(link.webSocket).toBe(true);
    const senders = broker.producerLinks().filter((link) => link.address === hub.name);
    expect(senders.length).toBeGreaterThan(0);
    for (const link of senders) expect(link.webSocket).toBe(true);
  }, 90_000);

  it("partner-events run with the config's eventHubs.webSockets on a Node without WebSocket nor ws: exit 2 naming npm install ws, no stack", async () => {
    // A Node 20 without `ws` installed: the child's global WebSocket removed, `ws` not found.
    const preload = join(dir.path, 'no-websocket.cjs');
    writeFileSync(
      preload,
      `const Module = require('node:module');
Object.defineProperty(globalThis, 'WebSocket', { value: undefined, configurable: true, writable: true });
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === 'ws') throw Object.assign(new Error("Cannot find module 'ws'"), { code: 'MODULE_NOT_FOUND' });
  return resolve.call(this, request, ...rest);
};
`,
    );
    const result = await runCli(
      [
        'run',
        '--source',
        `azure-event-hubs:${hub.name}`,
        '--forward',
        'http://127.0.0.1:9/events',
        '--dedupe',
        'memory',
      ],
      {
        env: {
          ...cliEnvFor(hub.name),
          // The config option (here as its variable) wins over EVENTHUBS_WEBSOCKETS.
          PARTNER_EVENTS_EVENT_HUBS_WEB_SOCKETS: 'true',
          EVENTHUBS_WEBSOCKETS: 'false',
          NODE_OPTIONS: `--require ${preload}`,
        },
        killAfterMs: 30_000,
      },
    );

    expect(result.code, `${result.stdout}${result.stderr}`).toBe(2);
    expect(result.stderr).toContain(
      'partner-events run: [CONFIG_INVALID] AMQP over WebSockets needs a WebSocket class',
    );
    expect(result.stderr).toContain('npm install ws');
    expect(result.stderr).not.toMatch(/\n\s+at /);
    expect(broker.consumerLinks().filter((link) => link.hub === hub.name)).toEqual([]);
  }, 60_000);
});

describe('where the WebSocket class comes from', () => {
  class NodeOwn {}
  class FromWs {}
  const missing = () => {
    throw Object.assign(new Error("Cannot find module 'ws'"), { code: 'MODULE_NOT_FOUND' });
  };

  it("Node's own global WebSocket first, else the ws package's", () => {
    expect(webSocketClass({ global: () => NodeOwn, require: () => FromWs })).toBe(NodeOwn);
    expect(webSocketClass({ global: () => undefined, require: () => FromWs })).toBe(FromWs);
    // ws 8 exports the class, which has itself as `WebSocket` too.
    expect(webSocketClass({ global: () => undefined, require: () => ({ WebSocket: FromWs }) })).toBe(FromWs);
    expect(webSocketClass()).toBe(NODE_WEBSOCKET ?? WebSocket);
  });

  it('neither: a ConfigError that says what to install', () => {
    const neither = { global: () => undefined, require: missing };
    expect(() => webSocketClass(neither)).toThrow(ConfigError);
    expect(() => webSocketClass(neither)).toThrow(/has no global WebSocket .* npm install ws$/);
    expect(() => clientOptionsFromEnv({ EVENTHUBS_WEBSOCKETS: 'true' }, neither)).toThrow(ConfigError);
    // Not asked for: nothing is looked up.
    expect(clientOptionsFromEnv({}, neither)).toEqual({});
    expect(clientOptionsFromEnv({ EVENTHUBS_WEBSOCKETS: 'false' }, neither)).toEqual({});
  });

  it('EVENTHUBS_WEBSOCKETS is true or false; anything else is a ConfigError', () => {
    expect(webSocketsFromEnv({ EVENTHUBS_WEBSOCKETS: 'true' })).toBe(true);
    expect(webSocketsFromEnv({ EVENTHUBS_WEBSOCKETS: 'TRUE' })).toBe(true);
    expect(webSocketsFromEnv({ EVENTHUBS_WEBSOCKETS: 'false' })).toBe(false);
    expect(webSocketsFromEnv({ EVENTHUBS_WEBSOCKETS: '' })).toBe(false);
    expect(webSocketsFromEnv({})).toBe(false);
    expect(() => webSocketsFromEnv({ EVENTHUBS_WEBSOCKETS: 'yes' })).toThrow(
      new ConfigError('EVENTHUBS_WEBSOCKETS="yes": expected true or false'),
    );
    expect(() =>
      eventHubsTargetFromCli('azure-event-hubs:orders', {
        EVENTHUBS_CONNECTION_STRING: 'Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=v',
        EVENTHUBS_WEBSOCKETS: '1',
      }),
    ).toThrow(ConfigError);
  });
});
