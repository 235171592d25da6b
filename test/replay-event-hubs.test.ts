/**
 * `replay azure-event-hubs:HUB` against the test Event Hubs broker: the replay contract
 * (test/support/replay-contract.ts) on a poison hub the worker fills itself, a main hub
 * replayed over a time window with events before and after it, and a poison hub read over TLS
 * with a namespace and a managed identity's token (no SAS key). A hub is read, never consumed.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MessagingError } from '@azure/event-hubs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { eventHubsSourceFromCli } from '../adapters/event-hubs/environment.js';
import { createEventHubsAdapter, type EventHubsMessage } from '../adapters/event-hubs/index.js';
import {
  isPermanentReadError,
  MAX_READ_ERRORS_IN_A_ROW,
  ReadErrors,
} from '../adapters/event-hubs/read-failure.js';
import { eventHubsReplayReader } from '../adapters/event-hubs/replay-reader.js';
import { eventHubsTargetFromCli } from '../adapters/event-hubs/sender.js';
import { createConsumer, type SettledReport } from '../src/consumer/consumer.js';
import { createTestEnvelope, TEST_SIGNING_SECRET, type TestEnvelope } from '../src/consumer/testing.js';
import { AdapterError, ConfigError } from '../src/core/errors.js';
import { silentLogger } from '../src/core/logger.js';
import type { ReplayMessage, ReplayReaderContext } from '../src/core/replay-reader.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import { runCli, runReplay, startApp, startServer } from './support/cli.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import type { TestHub } from './support/event-hubs-server.js';
import { tempDir } from './support/harness.js';
import { deadRecord, jsonLines, writeJsonl } from './support/records.js';
import { fillWithFailingWorker, replayContract } from './support/replay-contract.js';
import { HAS_OPENSSL, selfSignedLocalhostCert } from './support/tls-cert.js';

let broker: EventHubsBroker;

beforeAll(async () => {
  broker = await EventHubsBroker.start();
});
afterAll(async () => {
  await broker?.stop();
});

async function allEvents(hub: TestHub): Promise<number> {
  let n = 0;
  for (const id of hub.partitionIds) n += (await hub.events(id)).length;
  return n;
}

replayContract('Event Hubs poison hub', {
  declares: {
    reading: 'log',
    // The adapter records the code with each copy it sends to the poison hub.
    recordedCodes: [
      'ENVELOPE_MISMATCH',
      'HANDLER_FAILED',
      'HANDLER_FAILED',
      'HANDLER_FAILED',
      'SIGNATURE_MISMATCH',
    ],
  },
  async setup(context) {
    const main = await broker.createHub(2);
    const poison = await broker.createHub(1);
    // Each failed event ends on the poison hub (the mismatch at once).
    await fillWithFailingWorker<EventHubsMessage>(context, {
      source: createEventHubsAdapter({
        connectionString: main.connectionString,
        checkpointStore: join(context.dir, 'checkpoints.db'),
        deadLetterQueue: poison.name,
        logger: silentLogger(),
      }),
      retry: { maxAttempts: 2, baseDelayMs: 10, maxDelayMs: 20 },
      send: (e, i) => main.publish(String(i % 2), e.raw),
      sideChannel: async () => (await poison.events('0')).length,
    });
    return {
      spec: `azure-event-hubs:${poison.name}`,
      env: { EVENTHUBS_CONNECTION_STRING: main.connectionString },
      args: ['--consumer-group', 'replay'],
      auditNames: poison.name,
      available: () => allEvents(poison),
      stored: () => allEvents(poison),
    };
  },
  async fresh(envelopes) {
    const hub = await broker.createHub(2);
    for (const [i, e] of envelopes.entries()) await hub.publish(String(i % 2), e.raw);
    return {
      spec: `azure-event-hubs:${hub.name}`,
      env: { EVENTHUBS_CONNECTION_STRING: hub.connectionString },
      args: ['--consumer-group', 'replay'],
      auditNames: hub.name,
      available: () => allEvents(hub),
      stored: () => allEvents(hub),
    };
  },
});

describe('replay a main hub over a time window', () => {
  let dir: ReturnType<typeof tempDir>;

  beforeAll(() => {
    dir = tempDir('phe-replay-eh-');
  });
  afterAll(() => {
    dir?.cleanup();
  });

  it('reads only the events the hub accepted between --since and --until, on every partition', async () => {
    const hub = await broker.createHub(2);
    const before = [
      createTestEnvelope('daily.data.steps.created'),
      createTestEnvelope('daily.data.steps.created'),
    ];
    const inside = [
      createTestEnvelope('daily.data.steps.created'),
      createTestEnvelope('coach.nudge.created'),
    ];
    const after = [createTestEnvelope('daily.data.steps.created')];
    const publishAll = async (events: TestEnvelope[]) => {
      for (const [i, e] of events.entries()) await hub.publish(String(i % 2), e.raw);
    };
    /** Enqueue times are in ms: wait for the clock to pass the last one, so the window's edge is clean. */
    const edge = async () => {
      const last = Math.max(
        ...(
          await Promise.all(
            hub.partitionIds.map(async (id) => (await hub.events(id)).map((e) => e.enqueuedTime)),
          )
        ).flat(),
      );
      await vi.waitFor(() => expect(Date.now()).toBeGreaterThan(last + 1), { interval: 1 });
      return new Date(last + 1).toISOString();
    };
    await publishAll(before);
    const since = await edge();
    await publishAll(inside);
    const until = await edge();
    await publishAll(after);
    const app = await startApp();
    try {
      const env = { EVENTHUBS_CONNECTION_STRING: hub.connectionString };
      const args = [
        'replay',
        `azure-event-hubs:${hub.name}`,
        '--dedupe',
        `sqlite:${join(dir.path, 'dedupe.db')}`,
        '--consumer-group',
        'replay',
      ];
      const window = [
        '--since',
        since,
        '--until',
        until,
        '--dead-letter',
        join(dir.path, 'window.jsonl'),
        '--json',
      ];
      const result = await runCli([...args, '--forward', app.url, ...window], { env, killAfterMs: 90_000 });
      expect(result.code, result.stderr).toBe(0);
      expect(jsonLines(result.stdout).at(-1)).toMatchObject({ total: 2, forwarded: 2 });
      expect(app.eventIds().sort()).toEqual(inside.map((e) => e.eventId).sort());
      // The rewind again: all done now, so skipped without --force.
      const again = await runCli([...args, '--forward', app.url, ...window], { env, killAfterMs: 90_000 });
      expect(jsonLines(again.stdout).at(-1)).toMatchObject({ total: 2, forwarded: 0, duplicates: 2 });
      expect(app.received).toHaveLength(2);
      expect(await allEvents(hub)).toBe(5);
    } finally {
      await app.close();
    }
  }, 90_000);
});

describe('the Event Hubs replay reader', () => {
  it("keeps each event's trace context (traceparent, or Diagnostic-Id), so replay spans link to the producer", async () => {
    const hub = await broker.createHub(1);
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const diagnosticId = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await hub.publish('0', createTestEnvelope('daily.data.steps.created').raw, {
      traceparent,
      tracestate: 'vendor=1',
    });
    await hub.publish('0', createTestEnvelope('daily.data.steps.created').raw, {
      'Diagnostic-Id': diagnosticId,
    });
    await hub.publish('0', createTestEnvelope('daily.data.steps.created').raw);
    const reader = await eventHubsReplayReader(
      `azure-event-hubs:${hub.name}`,
      {
        logger: silentLogger(),
        settleMs: 1000,
        max: undefined,
        visibilityTimeoutSeconds: 30,
        since: undefined,
        until: undefined,
        consumerGroup: 'replay',
      },
      { EVENTHUBS_CONNECTION_STRING: hub.connectionString },
    );
    try {
      const read: ReplayMessage[] = [];
      const signal = new AbortController().signal;
      for (;;) {
        const batch = await reader.receive(10, signal);
        if (batch === null) break;
        read.push(...batch);
        // Settled, so the reader can end (a hub's messages are only read: an ack changes nothing).
        for (const message of batch) await reader.settle(message, { kind: 'ack', result: 'handled' });
      }
      expect(read.map((m) => m.traceContext)).toEqual([
        { traceparent, tracestate: 'vendor=1' },
        { traceparent: diagnosticId, tracestate: undefined },
        undefined,
      ]);
    } finally {
      await reader.close();
    }
  }, 60_000);
});

describe('a hub the replay cannot read', () => {
  let dir: ReturnType<typeof tempDir>;

  beforeAll(() => {
    dir = tempDir('phe-replay-eh-refused-');
  });
  afterAll(() => {
    dir?.cleanup();
  });

  it('a worker reading with $Default, the replay too: it ends at once, exit 1, saying why and what to change', async () => {
    const hub = await broker.createHub(2);
    for (const id of hub.partitionIds)
      await hub.publish(id, createTestEnvelope('daily.data.steps.created').raw);
    // The worker's readers attach with an owner level: Event Hubs then refuses a plain reader
    // (the replay's) of the same consumer group, and the SDK would try again every 10 s for ever.
    const worker = createConsumer<EventHubsMessage>({
      source: createEventHubsAdapter({
        connectionString: hub.connectionString,
        checkpointStore: join(dir.path, 'checkpoints.db'),
        logger: silentLogger(),
      }),
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      dedupe: createMemoryDedupe(),
      deadLetter: join(dir.path, 'worker-dead.jsonl'),
      logger: silentLogger(),
    });
    worker.on('*', () => {});
    await worker.start();
    const app = await startApp();
    try {
      await vi.waitFor(
        () => {
          const held = broker.consumers().filter((c) => c.hub === hub.name && c.ownerLevel !== undefined);
          expect(held).toHaveLength(2);
        },
        { timeout: 20_000, interval: 50 },
      );
      const env = { EVENTHUBS_CONNECTION_STRING: hub.connectionString };
      const flags = ['--dead-letter', join(dir.path, 'replay-failed.jsonl')];
      const started = Date.now();
      // No --consumer-group: $Default, the worker's.
      const replay = await runReplay(`azure-event-hubs:${hub.name}`, ['--forward', app.url, ...flags], {
        env,
        killAfterMs: 60_000,
      });
      expect(replay.code, replay.stderr).toBe(1);
      expect(Date.now() - started).toBeLessThan(30_000);
      expect(replay.summary, `${replay.stdout}\n${replay.stderr}`).toMatchObject({
        total: 0,
        forwarded: 0,
        failed: 0,
      });
      const why = String(replay.summary?.read_failed);
      expect(why).toMatch(
        new RegExp(
          `^cannot read event-hubs:${hub.name} \\(consumer group \\$Default, partition [01]\\): ReceiverDisconnectedError: `,
        ),
      );
      expect(why).toContain('give the replay a consumer group of its own (--consumer-group NAME)');
      expect(app.received).toHaveLength(0);
      // The dry run reads the same way: it ends too, and says so in its text.
      const dry = await runCli(
        ['replay', `azure-event-hubs:${hub.name}`, '--dry-run', '--dedupe', 'memory', ...flags],
        {
          env,
          killAfterMs: 60_000,
        },
      );
      expect(dry.code, dry.stderr).toBe(1);
      expect(dry.stdout).toContain(
        `reading stopped early, the rest was not read: cannot read event-hubs:${hub.name}`,
      );
    } finally {
      await app.close();
      await worker.stop();
    }
  }, 120_000);

  it('reader errors: a permanent one ends the read at once, retryable ones at the third in a row with no read between', () => {
    const place = { source: 'event-hubs:orders', consumerGroup: 'replay', partitionId: '3' };
    const sdkError = (code: string, retryable: boolean) =>
      Object.assign(new MessagingError(`${code} from the service`), { code, retryable });
    const missing = sdkError('MessagingEntityNotFoundError', false);
    expect(isPermanentReadError(missing)).toBe(true);
    const ended = new ReadErrors().failed(missing, place);
    expect(ended).toBeInstanceOf(AdapterError);
    expect(ended?.code).toBe('ADAPTER_ERROR');
    expect(ended?.cause).toBe(missing);
    expect(ended?.message).toBe(
      'cannot read event-hubs:orders (consumer group replay, partition 3): MessagingEntityNotFoundError: ' +
        "MessagingEntityNotFoundError from the service. Check the hub's name, and that consumer group replay exists on it (--consumer-group NAME)",
    );

    const busy = sdkError('ServerBusyError', true);
    expect(isPermanentReadError(busy)).toBe(false);
    expect(isPermanentReadError(new Error('no retryable field'))).toBe(false);
    const errors = new ReadErrors();
    for (let i = 1; i < MAX_READ_ERRORS_IN_A_ROW; i++) expect(errors.failed(busy, place)).toBeUndefined();
    // A read between two errors starts the count again; another partition's errors are its own.
    errors.read('3');
    for (let i = 1; i < MAX_READ_ERRORS_IN_A_ROW; i++) expect(errors.failed(busy, place)).toBeUndefined();
    expect(errors.failed(busy, { ...place, partitionId: '4' })).toBeUndefined();
    expect(errors.failed(busy, place)?.message).toBe(
      `cannot read event-hubs:orders (consumer group replay, partition 3): ${MAX_READ_ERRORS_IN_A_ROW} errors in a row, the last ServerBusyError: ServerBusyError from the service`,
    );
  });
});

/** A section of a page of docs/: from its heading to the next heading of its level or above. */
function docsSection(page: string, heading: string): string {
  const text = readFileSync(new URL(`../docs/${page}`, import.meta.url), 'utf8');
  const start = text.indexOf(`${heading}\n`);
  if (start === -1) return '';
  const level = heading.split(' ')[0] as string;
  const next = text.slice(start + heading.length).search(new RegExp(`\\n#{1,${level.length}} `));
  return next === -1 ? text.slice(start) : text.slice(start, start + heading.length + next);
}

describe('the way back from a poison hub that docs/adapters/event-hubs.md gives', () => {
  let dir: ReturnType<typeof tempDir>;

  beforeAll(() => {
    dir = tempDir('phe-replay-eh-way-back-');
  });
  afterAll(() => {
    dir?.cleanup();
  });

  it('replays a copy signed long before it died, which a worker reading the poison hub rejects as TIMESTAMP_TOO_OLD', async () => {
    const section = docsSection('adapters/event-hubs.md', '### A poison hub (optional)');
    const command = /^\s*partner-events (replay azure-event-hubs:orders-poison .*)$/m.exec(section)?.[1];
    expect(command, "the poison hub's section gives the replay command for its way back").toBeDefined();
    // What the worker copies after ten attempts of backoff: signed 12 minutes ago, accepted by the
    // main hub 11:58 ago, on the poison hub now.
    const poison = await broker.createHub(1);
    const now = Math.floor(Date.now() / 1000);
    const dead = createTestEnvelope('daily.data.steps.created', { signedAt: now - 720 });
    await poison.publish('0', dead.raw, {
      'partner-events-dead-code': 'HANDLER_FAILED',
      'partner-events-enqueued-time': new Date((now - 718) * 1000).toISOString(),
    });
    const env = { EVENTHUBS_CONNECTION_STRING: poison.connectionString };
    const app = await startApp();
    try {
      const args = (command as string).split(/\s+/).map((arg) => {
        if (arg === 'azure-event-hubs:orders-poison') return `azure-event-hubs:${poison.name}`;
        if (arg.startsWith('http://127.0.0.1:8080/')) return app.url;
        return arg.startsWith('sqlite:') ? `sqlite:${join(dir.path, 'dedupe.db')}` : arg;
      });
      const failed = join(dir.path, 'replay-failed.jsonl');
      const result = await runCli([...args, '--dead-letter', failed, '--json'], { env, killAfterMs: 60_000 });
      expect(result.code, result.stderr).toBe(0);
      expect(jsonLines(result.stdout).at(-1)).toMatchObject({ total: 1, forwarded: 1 });
      expect(app.eventIds()).toEqual([dead.eventId]);
    } finally {
      await app.close();
    }
    // What the page warns against: a worker judges the copy's age by the poison hub's enqueue time.
    const settled: SettledReport<EventHubsMessage>[] = [];
    const worker = createConsumer<EventHubsMessage>({
      source: createEventHubsAdapter({
        connectionString: poison.connectionString,
        checkpointStore: join(dir.path, 'checkpoints.db'),
        logger: silentLogger(),
      }),
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      dedupe: createMemoryDedupe(),
      deadLetter: join(dir.path, 'worker-dead.jsonl'),
      logger: silentLogger(),
      onSettled: (report) => settled.push(report),
    });
    worker.on('*', () => {});
    await worker.start();
    try {
      await vi.waitFor(() => expect(settled).toHaveLength(1), { timeout: 20_000, interval: 50 });
      expect(settled[0]?.outcome).toMatchObject({ kind: 'dead', code: 'TIMESTAMP_TOO_OLD' });
    } finally {
      await worker.stop();
    }
  }, 90_000);
});

/** Whatever sign-in of the machine's own could answer before the managed identity: none. */
const NO_OTHER_AZURE_SIGN_IN = {
  AZURE_CLIENT_ID: undefined,
  AZURE_TENANT_ID: undefined,
  AZURE_CLIENT_SECRET: undefined,
  AZURE_CLIENT_CERTIFICATE_PATH: undefined,
  AZURE_FEDERATED_TOKEN_FILE: undefined,
  AZURE_TOKEN_CREDENTIALS: undefined,
};

describe.skipIf(!HAS_OPENSSL)('replay signed in with a namespace and an Azure identity (no SAS key)', () => {
  const accessToken = 'managed-identity-token-for-event-hubs';
  const identityHeader = 'app-service-identity-header';
  let dir: ReturnType<typeof tempDir>;
  let certPath: string;
  let tlsBroker: EventHubsBroker;
  let identity: Awaited<ReturnType<typeof startServer>>;

  beforeAll(async () => {
    dir = tempDir('phe-replay-eh-identity-');
    const cert = selfSignedLocalhostCert(dir.path);
    certPath = cert.certPath;
    // Event Hubs speaks AMQP over TLS only, unless a connection string says UseDevelopmentEmulator.
    tlsBroker = await EventHubsBroker.start({ tls: { key: cert.key, cert: cert.cert } });
    // App Service's managed identity endpoint, as @azure/identity (MSAL's AppService source) calls it.
    identity = await startServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          access_token: accessToken,
          expires_on: String(Math.floor(Date.now() / 1000) + 3600),
          resource: 'https://eventhubs.azure.net',
          token_type: 'Bearer',
        }),
      );
    });
  });
  afterAll(async () => {
    await identity?.close();
    await tlsBroker?.stop();
    dir?.cleanup();
  });

  it('replays a poison hub with EVENTHUBS_FULLY_QUALIFIED_NAMESPACE, signed in with the managed identity token', async () => {
    const poison = await tlsBroker.createHub(2);
    const dead = [
      createTestEnvelope('daily.data.steps.created'),
      createTestEnvelope('coach.nudge.created'),
      createTestEnvelope('daily.data.steps.created'),
    ];
    for (const [i, e] of dead.entries()) {
      await poison.publish(String(i % 2), e.raw, { 'partner-events-dead-code': 'HANDLER_FAILED' });
    }
    const app = await startApp();
    try {
      const result = await runReplay(
        `azure-event-hubs:${poison.name}`,
        [
          '--forward',
          app.url,
          '--consumer-group',
          'replay',
          '--dead-letter',
          join(dir.path, 'replay-failed.jsonl'),
        ],
        {
          env: {
            ...NO_OTHER_AZURE_SIGN_IN,
            EVENTHUBS_CONNECTION_STRING: undefined,
            EVENTHUBS_FULLY_QUALIFIED_NAMESPACE: tlsBroker.namespace,
            IDENTITY_ENDPOINT: `${identity.origin}/token`,
            IDENTITY_HEADER: identityHeader,
            NODE_EXTRA_CA_CERTS: certPath,
          },
          killAfterMs: 90_000,
        },
      );
      expect(result.code, result.stderr).toBe(0);
      expect(result.summary).toMatchObject({ total: 3, forwarded: 3 });
      expect(app.eventIds().sort()).toEqual(dead.map((e) => e.eventId).sort());
      expect(await allEvents(poison)).toBe(3);
      // Signed in with the identity's token for Event Hubs, never with a SAS key.
      expect(identity.received.length).toBeGreaterThan(0);
      const asked = new URL(identity.received[0]?.path ?? '', identity.origin);
      expect(asked.searchParams.get('resource')).toBe('https://eventhubs.azure.net/');
      expect(identity.received[0]?.headers['x-identity-header']).toBe(identityHeader);
      const tokens = tlsBroker.putTokens();
      expect(tokens.length).toBeGreaterThan(0);
      expect(new Set(tokens.map((t) => `${t.type} ${t.token}`))).toEqual(new Set([`jwt ${accessToken}`]));
      expect(tokens.map((t) => t.name)).toContain(`sb://${tlsBroker.namespace}/${poison.name}/$management`);
    } finally {
      await app.close();
    }
  }, 90_000);

  it('replay --to and trigger --to a hub with EVENTHUBS_FULLY_QUALIFIED_NAMESPACE send with the managed identity token', async () => {
    const hub = await tlsBroker.createHub(1);
    const dead = [createTestEnvelope('daily.data.steps.created'), createTestEnvelope('coach.nudge.created')];
    const file = writeJsonl(
      dir.path,
      'to-hub.jsonl',
      dead.map((e) => deadRecord(e.raw)),
    );
    const env = {
      ...NO_OTHER_AZURE_SIGN_IN,
      EVENTHUBS_CONNECTION_STRING: undefined,
      EVENTHUBS_FULLY_QUALIFIED_NAMESPACE: tlsBroker.namespace,
      IDENTITY_ENDPOINT: `${identity.origin}/token`,
      IDENTITY_HEADER: identityHeader,
      NODE_EXTRA_CA_CERTS: certPath,
    };
    const replay = await runReplay(file, ['--to', `azure-event-hubs:${hub.name}`, '--dedupe', 'memory'], {
      env,
      killAfterMs: 90_000,
    });
    expect(replay.code, replay.stderr).toBe(0);
    expect(replay.summary).toMatchObject({ total: 2, injected: 2 });
    const trigger = await runCli(
      ['trigger', 'daily.data.steps.created', '--to', `azure-event-hubs:${hub.name}`],
      {
        env,
        killAfterMs: 90_000,
      },
    );
    expect(trigger.code, trigger.stderr).toBe(0);
    const triggered = trigger.stdout.trim();

    const stored = await hub.events('0');
    const ids = stored.map((e) => JSON.parse(Buffer.from(e.body).toString('utf8')).event_id as string);
    expect(ids.sort()).toEqual([...dead.map((e) => e.eventId), triggered].sort());
    // Sent with the identity's token for this hub, never with a SAS key.
    const tokens = tlsBroker.putTokens().filter((t) => t.name === `sb://${tlsBroker.namespace}/${hub.name}`);
    expect(tokens.length).toBeGreaterThan(0);
    expect(new Set(tokens.map((t) => `${t.type} ${t.token}`))).toEqual(new Set([`jwt ${accessToken}`]));
  }, 90_000);
});

describe('Event Hubs credentials from the environment', () => {
  const context: ReplayReaderContext = {
    logger: silentLogger(),
    settleMs: 1000,
    max: undefined,
    visibilityTimeoutSeconds: 30,
    since: undefined,
    until: undefined,
    consumerGroup: 'replay',
  };

  it('replay without EVENTHUBS_CONNECTION_STRING or EVENTHUBS_FULLY_QUALIFIED_NAMESPACE: the ConfigError run gives', async () => {
    const needs =
      'needs EVENTHUBS_CONNECTION_STRING, or EVENTHUBS_FULLY_QUALIFIED_NAMESPACE with an Azure identity';
    const replay = eventHubsReplayReader('azure-event-hubs:orders-poison', context, {});
    await expect(replay).rejects.toThrow(ConfigError);
    await expect(replay).rejects.toThrow(`replay azure-event-hubs:orders-poison ${needs}`);
    expect(() => eventHubsSourceFromCli('azure-event-hubs:orders', {}, {})).toThrow(
      `--source azure-event-hubs:orders ${needs}`,
    );
    expect(() => eventHubsTargetFromCli('azure-event-hubs:orders', {})).toThrow(
      `--to azure-event-hubs:orders ${needs}`,
    );
    const cli = await runCli(
      ['replay', 'azure-event-hubs:orders-poison', '--dry-run', '--dedupe', 'memory'],
      {
        env: { EVENTHUBS_CONNECTION_STRING: undefined, EVENTHUBS_FULLY_QUALIFIED_NAMESPACE: undefined },
        killAfterMs: 60_000,
      },
    );
    expect(cli.code, cli.stderr).toBe(2);
    expect(cli.stderr).toContain(needs);
  }, 60_000);
});
