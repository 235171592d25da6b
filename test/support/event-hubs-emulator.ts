/**
 * The official Azure Event Hubs emulator in Docker (testcontainers), for the Event Hubs suite when
 * PARTNER_EVENTS_TEST_EVENTHUBS=emulator. It needs Azurite for its blob and metadata (table)
 * storage: both run on a network of their own, and only the emulator's AMQP port is published.
 * The emulator knows only the hubs declared in its Config.json at start-up, so `start()` declares a
 * pool of fresh hubs and `createHub()` hands each out once.
 *
 * Facts from the emulator's docs and installer repository (github.com/Azure/azure-event-hubs-emulator-installer):
 * config schema and path, BLOB_SERVER / METADATA_SERVER / ACCEPT_EULA, the readiness log line,
 * the development connection string, and the quotas below.
 */

import { isIPv4 } from 'node:net';
import type { Readable } from 'node:stream';
import {
  type EventData,
  EventHubConsumerClient,
  EventHubProducerClient,
  earliestEventPosition,
  type ReceivedEventData,
} from '@azure/event-hubs';
import {
  GenericContainer,
  getContainerRuntimeClient,
  Network,
  type StartedNetwork,
  type StartedTestContainer,
  Wait,
} from 'testcontainers';
import type { EventHubsTestServer, HubEvent, TestHub } from './event-hubs-server.js';

/** The emulator's usage quotas (docs: overview-emulator, "Managing Quotas and Configuration"). */
export const EMULATOR_QUOTAS = {
  /** Event hubs in its single namespace (Config-schema.json: Entities maxItems 10). */
  hubs: 10,
  /** Partitions per event hub. */
  partitions: 32,
  /** Consumer groups per event hub: the pool declares one, `inspect`, besides the built-in `$Default`. */
  consumerGroups: 20,
} as const;

/** Read by `events()`: the consumers under test own `$Default` (owner-level receivers). */
export const INSPECT_CONSUMER_GROUP = 'inspect';

const DEFAULT_EMULATOR_IMAGE = 'mcr.microsoft.com/azure-messaging/eventhubs-emulator:latest';
const DEFAULT_AZURITE_IMAGE = 'mcr.microsoft.com/azure-storage/azurite:latest';
/** The one namespace the emulator accepts (Config-schema.json enum). */
const NAMESPACE = 'emulatorNs1';
const CONFIG_PATH = '/Eventhubs_Emulator/ConfigFiles/Config.json';
const AMQP_PORT = 5672;
const AZURITE_ALIAS = 'azurite';
const READY_LINE = 'Emulator Service is Successfully Up!';
/** The emulator's key for the development connection string: documented, not a secret. */
const SAS_KEY_NAME = 'RootManageSharedAccessKey';
const SAS_KEY = 'SAS_KEY_VALUE';
const EMULATOR_START_TIMEOUT_MS = 120_000;
const AZURITE_START_TIMEOUT_MS = 60_000;
const READ_TIMEOUT_MS = 30_000;
/** How much of the emulator's output a start-up failure quotes. */
const LOG_TAIL_CHARS = 4_000;

export interface EventHubsEmulatorOptions {
  /** Partition count → how many hubs of that size, e.g. `{ 2: 3, 4: 1 }`. */
  readonly hubs: Readonly<Record<number, number>>;
}

/** One hub of the pool, e.g. `{ name: 'p2-1', partitions: 2 }`. */
export interface PoolHub {
  readonly name: string;
  readonly partitions: number;
}

/** The emulator's Config.json (schema: EventHub-Emulator/Schema/Config-schema.json). */
export interface EmulatorConfig {
  readonly UserConfig: {
    readonly NamespaceConfig: readonly {
      readonly Type: 'EventHub';
      readonly Name: string;
      readonly Entities: readonly {
        readonly Name: string;
        /** A string in the schema. */
        readonly PartitionCount: string;
        readonly ConsumerGroups: readonly { readonly Name: string }[];
      }[];
    }[];
    readonly LoggingConfig: { readonly Type: 'File' | 'Console' };
  };
}

/** The pool's hubs in a stable order (smallest first), checked against the emulator's quotas. */
export function poolHubs(hubs: Readonly<Record<number, number>>): PoolHub[] {
  const sizes = Object.entries(hubs)
    .map(([partitions, count]) => ({ partitions: Number(partitions), count }))
    .sort((a, b) => a.partitions - b.partitions);
  const pool: PoolHub[] = [];
  for (const { partitions, count } of sizes) {
    if (!Number.isInteger(partitions) || partitions < 1 || partitions > EMULATOR_QUOTAS.partitions) {
      throw new Error(
        `EventHubsEmulator: hubs of ${partitions} partitions are impossible: the emulator allows 1 to ${EMULATOR_QUOTAS.partitions} partitions per hub`,
      );
    }
    if (!Number.isInteger(count) || count < 0) {
      throw new Error(`EventHubsEmulator: hubs[${partitions}] must be a whole number of hubs, not ${count}`);
    }
    for (let i = 1; i <= count; i++) pool.push({ name: `p${partitions}-${i}`, partitions });
  }
  if (pool.length === 0) throw new Error('EventHubsEmulator: the pool declares no hub');
  if (pool.length > EMULATOR_QUOTAS.hubs) {
    throw new Error(
      `EventHubsEmulator: the pool declares ${pool.length} hubs, but the emulator allows at most ${EMULATOR_QUOTAS.hubs} (one namespace): share hubs between tests or run fewer`,
    );
  }
  return pool;
}

/** The Config.json declaring the pool: each hub gets `inspect` besides the implicit `$Default`. */
export function emulatorConfig(hubs: Readonly<Record<number, number>>): EmulatorConfig {
  return {
    UserConfig: {
      NamespaceConfig: [
        {
          Type: 'EventHub',
          Name: NAMESPACE,
          Entities: poolHubs(hubs).map(({ name, partitions }) => ({
            Name: name,
            PartitionCount: String(partitions),
            // `$Default` exists anyway and the schema forbids declaring it.
            ConsumerGroups: [{ Name: INSPECT_CONSUMER_GROUP }],
          })),
        },
      ],
      LoggingConfig: { Type: 'File' },
    },
  };
}

/**
 * The address to put in connection strings for testcontainers' host: tests may only talk to
 * loopback, so `localhost` becomes 127.0.0.1 (Docker publishes on all interfaces) and anything
 * else (a remote DOCKER_HOST, TESTCONTAINERS_HOST_OVERRIDE) is refused.
 */
export function loopbackHost(host: string): string {
  if (host === 'localhost') return '127.0.0.1';
  if (isIPv4(host) && host.startsWith('127.')) return host;
  if (host === '::1' || host === '[::1]') return '[::1]';
  throw new Error(
    `EventHubsEmulator: the Docker engine publishes ports on ${host}, not on loopback; the tests only talk to 127.0.0.1 or ::1: use a local Docker engine`,
  );
}

/** Sends one event to a partition, the body as raw bytes in a single AMQP data section. */
export async function publishBytes(
  producer: EventHubProducerClient,
  partitionId: string,
  body: string | Uint8Array,
  applicationProperties?: Record<string, unknown>,
): Promise<void> {
  // The SDK JSON-encodes anything but a Buffer/Uint8Array (a string would gain quotes); rhea
  // writes binaries with Buffer methods, so copy into a Buffer rather than pass a bare Uint8Array.
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.from(body);
  const event: EventData = { body: bytes };
  if (applicationProperties) event.properties = applicationProperties;
  // A batch of one, not `sendBatch([event])`: the array form adds an empty application-properties
  // map to events that have none, which other publishers do not send.
  const batch = await producer.createBatch({ partitionId });
  if (!batch.tryAdd(event)) {
    throw new Error(
      `an event of ${bytes.length} bytes exceeds the hub's maximum (${batch.maxSizeInBytes} bytes)`,
    );
  }
  await producer.sendBatch(batch);
}

/**
 * Every event of a partition, oldest first: from the earliest position up to the partition's last
 * enqueued sequence number when called (later events are left out). Bodies stay bytes.
 */
export async function readPartition(
  consumer: EventHubConsumerClient,
  partitionId: string,
  timeoutMs = READ_TIMEOUT_MS,
): Promise<HubEvent[]> {
  const properties = await consumer.getPartitionProperties(partitionId);
  if (properties.isEmpty) return [];
  const last = properties.lastEnqueuedSequenceNumber;
  const events: HubEvent[] = [];
  return new Promise<HubEvent[]>((resolve, reject) => {
    let settled = false;
    let lastError: Error | undefined;
    const finish = (error?: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      // Closed before settling, so no receiver link outlives the call.
      subscription.close().then(
        () => (error ? reject(error) : resolve(events)),
        (closeError: unknown) => reject(error ?? closeError),
      );
    };
    const timer = setTimeout(() => {
      const cause = lastError ? `; last error: ${lastError.message}` : '';
      finish(
        new Error(
          `read ${events.length} events of partition ${partitionId} in ${timeoutMs} ms, not up to sequence number ${last}${cause}`,
        ),
      );
    }, timeoutMs);
    const subscription = consumer.subscribe(
      partitionId,
      {
        processEvents: async (batch) => {
          try {
            for (const event of batch) {
              const previous = events.at(-1)?.sequenceNumber ?? -1;
              if (event.sequenceNumber > previous && event.sequenceNumber <= last) {
                events.push(toHubEvent(event));
              }
            }
            if ((events.at(-1)?.sequenceNumber ?? -1) >= last) finish();
          } catch (error) {
            finish(error as Error);
          }
        },
        processError: async (error) => {
          lastError = error;
          // The SDK retries what it can; a non-retryable error (no such hub or group) ends the read.
          if ((error as { retryable?: boolean }).retryable === false) finish(error);
        },
      },
      {
        startPosition: earliestEventPosition,
        skipParsingBodyAsJson: true,
        maxBatchSize: 100,
        maxWaitTimeInSeconds: 1,
      },
    );
  });
}

function toHubEvent(event: ReceivedEventData): HubEvent {
  return {
    sequenceNumber: event.sequenceNumber,
    offset: String(event.offset),
    enqueuedTime: event.enqueuedTimeUtc.getTime(),
    body: dataBytes(event),
    applicationProperties: event.properties,
  };
}

/** The data section's bytes (with `skipParsingBodyAsJson` the SDK hands them over untouched). */
function dataBytes(event: ReceivedEventData): Uint8Array {
  const { body } = event;
  if (body instanceof Uint8Array) return body;
  // Several data sections arrive as a list of binaries.
  if (Array.isArray(body) && body.every((part) => part instanceof Uint8Array)) return Buffer.concat(body);
  const bodyType = event.getRawAmqpMessage().bodyType ?? 'unknown';
  throw new Error(`event ${event.sequenceNumber} has no data section body (AMQP body type: ${bodyType})`);
}

function dockerRequired(error: unknown): Error {
  return new Error(
    'PARTNER_EVENTS_TEST_EVENTHUBS=emulator runs the official Event Hubs emulator in Docker, and no Docker ' +
      `engine is reachable (${(error as Error).message}). Start a Docker engine (or set DOCKER_HOST), or unset ` +
      'PARTNER_EVENTS_TEST_EVENTHUBS to run the Event Hubs suite against the in-process broker.',
    { cause: error },
  );
}

/** Keeps the last characters a container wrote, to quote when it fails to start. */
function logTail(): { consumer: (stream: Readable) => void; text: () => string } {
  let tail = '';
  return {
    consumer: (stream) => {
      stream.on('data', (chunk: Buffer | string) => {
        tail = (tail + String(chunk)).slice(-LOG_TAIL_CHARS);
      });
      // The stream fails when the container goes away; nothing to do about it.
      stream.on('error', () => {});
    },
    text: () => tail,
  };
}

export class EventHubsEmulator implements EventHubsTestServer {
  readonly kind = 'emulator' as const;
  /** e.g. `sb://127.0.0.1:PORT` */
  readonly endpoint: string;
  readonly #network: StartedNetwork;
  readonly #azurite: StartedTestContainer;
  readonly #emulator: StartedTestContainer;
  /** Partition count → names of the hubs not handed out yet. */
  readonly #unused = new Map<number, string[]>();
  readonly #declared = new Map<number, number>();
  readonly #clients: { close(): Promise<void> }[] = [];
  #stopped = false;

  private constructor(
    network: StartedNetwork,
    azurite: StartedTestContainer,
    emulator: StartedTestContainer,
    endpoint: string,
    pool: readonly PoolHub[],
  ) {
    this.#network = network;
    this.#azurite = azurite;
    this.#emulator = emulator;
    this.endpoint = endpoint;
    for (const { name, partitions } of pool) {
      this.#unused.set(partitions, [...(this.#unused.get(partitions) ?? []), name]);
      this.#declared.set(partitions, (this.#declared.get(partitions) ?? 0) + 1);
    }
  }

  static async start(options: EventHubsEmulatorOptions): Promise<EventHubsEmulator> {
    // Quota errors come first: they need no Docker.
    const config = emulatorConfig(options.hubs);
    const pool = poolHubs(options.hubs);
    let host: string;
    try {
      // What every StartedTestContainer.getHost() returns: checked before anything starts.
      host = (await getContainerRuntimeClient()).info.containerRuntime.host;
    } catch (error) {
      throw dockerRequired(error);
    }
    const address = loopbackHost(host);
    const started: { stop(): Promise<unknown> }[] = [];
    const emulatorLogs = logTail();
    try {
      const network = await new Network().start();
      started.push(network);
      const azurite = await new GenericContainer(
        process.env.PARTNER_EVENTS_TEST_AZURITE_IMAGE || DEFAULT_AZURITE_IMAGE,
      )
        .withNetwork(network)
        .withNetworkAliases(AZURITE_ALIAS)
        // The image's own CMD, plus: accept any API version the emulator's storage client sends, no telemetry.
        .withCommand([
          'azurite',
          '--blobHost',
          '0.0.0.0',
          '--queueHost',
          '0.0.0.0',
          '--tableHost',
          '0.0.0.0',
          '--location',
          '/data',
          '--skipApiVersionCheck',
          '--disableTelemetry',
        ])
        // Table (the emulator's metadata store) is the last of the three services to listen.
        .withWaitStrategy(Wait.forLogMessage('Azurite Table service is successfully listening'))
        .withStartupTimeout(AZURITE_START_TIMEOUT_MS)
        .start();
      started.push(azurite);
      const emulator = await new GenericContainer(
        process.env.PARTNER_EVENTS_TEST_EVENTHUBS_IMAGE || DEFAULT_EMULATOR_IMAGE,
      )
        .withNetwork(network)
        .withEnvironment({
          BLOB_SERVER: AZURITE_ALIAS,
          METADATA_SERVER: AZURITE_ALIAS,
          // Opting in with PARTNER_EVENTS_TEST_EVENTHUBS=emulator accepts the emulator's EULA.
          ACCEPT_EULA: 'Y',
        })
        .withCopyContentToContainer([{ content: JSON.stringify(config), target: CONFIG_PATH }])
        .withExposedPorts(AMQP_PORT)
        // The image has no shell, so no port probe: the emulator logs this once its hubs are up.
        .withWaitStrategy(Wait.forLogMessage(READY_LINE))
        .withStartupTimeout(EMULATOR_START_TIMEOUT_MS)
        .withLogConsumer(emulatorLogs.consumer)
        .start();
      started.push(emulator);
      const endpoint = `sb://${address}:${emulator.getMappedPort(AMQP_PORT)}`;
      return new EventHubsEmulator(network, azurite, emulator, endpoint, pool);
    } catch (error) {
      for (const resource of started.reverse()) await resource.stop().catch(() => {});
      const output = emulatorLogs.text();
      throw new Error(
        `the Event Hubs emulator did not start: ${(error as Error).message}${output ? `\nits last output:\n${output}` : ''}`,
        { cause: error },
      );
    }
  }

  /** The emulator's documented development connection string, for one hub. */
  connectionString(hub: string): string {
    return `Endpoint=${this.endpoint};SharedAccessKeyName=${SAS_KEY_NAME};SharedAccessKey=${SAS_KEY};UseDevelopmentEmulator=true;EntityPath=${hub}`;
  }

  async createHub(partitions: number): Promise<TestHub> {
    const name = this.#unused.get(partitions)?.shift();
    if (name === undefined) {
      const declared = this.#declared.get(partitions) ?? 0;
      throw new Error(
        `EventHubsEmulator: no unused hub with ${partitions} partitions left (the pool declared ${declared}): ` +
          `raise hubs[${partitions}] in EventHubsEmulator.start() (at most ${EMULATOR_QUOTAS.hubs} hubs in all)`,
      );
    }
    const connectionString = this.connectionString(name);
    const producer = new EventHubProducerClient(connectionString);
    const inspector = new EventHubConsumerClient(INSPECT_CONSUMER_GROUP, connectionString);
    this.#clients.push(producer, inspector);
    // Asked, not assumed: this also proves the hub is declared and reachable before a test uses it.
    const partitionIds = await producer.getPartitionIds();
    return {
      name,
      partitionIds,
      connectionString,
      publish: (partitionId, body, applicationProperties) =>
        publishBytes(producer, partitionId, body, applicationProperties),
      events: (partitionId) => readPartition(inspector, partitionId),
    };
  }

  /** Closes the SDK clients, then removes both containers and the network. Idempotent. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    const failures: unknown[] = [];
    const attempt = async (step: () => Promise<unknown>) => {
      try {
        await step();
      } catch (error) {
        failures.push(error);
      }
    };
    await Promise.all(this.#clients.map((client) => attempt(() => client.close())));
    await attempt(() => this.#emulator.stop());
    await attempt(() => this.#azurite.stop());
    await attempt(() => this.#network.stop());
    if (failures.length > 0) throw failures[0];
  }
}
