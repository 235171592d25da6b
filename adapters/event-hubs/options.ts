import type {
  CheckpointStore,
  EventHubConsumerClientOptions,
  EventHubProducerClient,
  EventPosition,
  TokenCredential,
} from '@azure/event-hubs';
import type { Logger } from 'pino';
import { z } from 'zod';

/** What the CLI accepts as an event hub name (letters, digits, `.`, `_`, `-`; no leading symbol). */
export const HUB_NAME = /^[A-Za-z0-9][\w.-]*$/;

// The shape apart from the schema, so that the published types keep each option's JSDoc.
const eventHubsOptionsShape = {
  /**
   * Also send each dead event to this hub (after its dead-letter record is written): a hub in the
   * same namespace, reached with the same credentials. The copy keeps the body byte for byte and
   * adds `partner-events-*` application properties (code, reason, source partition, sequence
   * number, …). The partition moves past a dead event only once its copy is accepted.
   * Default: none (the dead-letter file only).
   */
  deadLetterQueue: z.string().regex(HUB_NAME, 'must be an event hub name').optional(),
  /**
   * Where a partition without a checkpoint starts. Default `'earliest'`: the retained backlog is
   * handled (dedupe drops what was already handled); `'latest'` skips everything sent before the
   * first start.
   */
  startPosition: z.enum(['earliest', 'latest']).default('earliest'),
  /**
   * Events fetched from a partition at a time; the SDK fetches the next batch only once these are
   * all settled, so memory stays at about this many events per owned partition. Default 50.
   */
  partitionBatchSize: z.number().int().positive().default(50),
  /** The SDK's wait to fill a partition batch before handing over what it has, in s. Default 1. */
  maxWaitTimeInSeconds: z.number().positive().default(1),
  /** Write a partition's checkpoint after this many settled events… Default 100. */
  checkpointEvery: z.number().int().positive().default(100),
  /** …and every this many ms while some are unwritten. Default 5000. On close, always. */
  checkpointIntervalMs: z.number().int().positive().default(5000),
  /**
   * AMQP over WebSockets (`wss://<namespace>:443/$servicebus/websocket`) instead of AMQP on 5671,
   * for the consumer and the poison hub alike: for a host whose firewall or proxy lets only 443
   * through. The WebSocket class is Node's own (Node 22 and later), else the `ws` package's (an
   * optional peer dependency); `clientOptions.webSocketOptions.webSocket`, when given, wins.
   * Default: false (in the CLI, `EVENTHUBS_WEBSOCKETS`).
   */
  webSockets: z.boolean().optional(),
};

/**
 * The Event Hubs adapter's options that a config file may hold (the sidecar's `eventHubs`
 * section, `PARTNER_EVENTS_EVENT_HUBS_*`), each default documented here only.
 */
export const eventHubsOptionsSchema: z.ZodObject<typeof eventHubsOptionsShape, z.core.$strict> =
  z.strictObject(eventHubsOptionsShape);

// The adapter's own options: those the sidecar sets elsewhere (`consumerGroup`) or not at all.
const eventHubsAdapterOnlyShape = {
  /** Give each independent application its own consumer group. Default `$Default`. */
  consumerGroup: z.string().min(1).default('$Default'),
  /** Most messages one `receive` returns (at most one per partition). Default 100. */
  maxBatchSize: z.number().int().positive().default(100),
};

/** Everything `createEventHubsAdapter` checks: the file's options and the adapter's own. */
export const eventHubsAdapterSchema: z.ZodObject<
  typeof eventHubsOptionsShape & typeof eventHubsAdapterOnlyShape,
  z.core.$strict
> = z.strictObject({ ...eventHubsOptionsShape, ...eventHubsAdapterOnlyShape });

/** What `createEventHubsAdapter` takes: the schemas' options, plus what a config file cannot hold. */
export type EventHubsAdapterOptions = Omit<
  z.input<typeof eventHubsAdapterSchema>,
  'startPosition' | 'deadLetterQueue'
> & {
  /**
   * A namespace or hub connection string (`Endpoint=sb://…;SharedAccessKeyName=…;SharedAccessKey=…`
   * with or without `EntityPath`). Either this, or `fullyQualifiedNamespace` with `credential`.
   */
  readonly connectionString?: string;
  /** `<namespace>.servicebus.windows.net`, with `credential` (e.g. `DefaultAzureCredential`). */
  readonly fullyQualifiedNamespace?: string;
  readonly credential?: TokenCredential;
  /** The hub. Default: the connection string's `EntityPath`; required otherwise. */
  readonly eventHubName?: string;
  /**
   * Where checkpoints and partition ownership live: a `CheckpointStore` (e.g. `BlobCheckpointStore`
   * from `@azure/eventhubs-checkpointstore-blob` for several instances), or the path of a SQLite
   * file. Default: SQLite at `./partner-events-checkpoints.db` (one instance).
   */
  readonly checkpointStore?: CheckpointStore | string;
  /** `'earliest'` or `'latest'` as in `eventHubsOptionsSchema` (which has the default), or an `EventPosition`. */
  readonly startPosition?: 'earliest' | 'latest' | EventPosition;
  /** A hub name as in `eventHubsOptionsSchema`, or a producer client of your own. */
  readonly deadLetterQueue?: string | EventHubProducerClient;
  /**
   * How instances sharing a checkpoint store split the partitions. Defaults (the SDK's): every
   * 10 000 ms, an owner's claim expires after 60 000 ms without renewal; strategy `balanced` (one
   * partition per cycle, least churn when many instances start together), except with the
   * SQLite store, where it is `greedy` (a single instance takes every partition at once).
   */
  readonly loadBalancing?: {
    readonly strategy?: 'balanced' | 'greedy';
    readonly updateIntervalMs?: number;
    readonly partitionOwnershipExpirationIntervalMs?: number;
  };
  /**
   * Passed to `EventHubConsumerClient` (retry, web sockets, `identifier` = owner id, …). The poison
   * hub's producer that `deadLetterQueue` opens gets them too, without `loadBalancingOptions` and `identifier`.
   */
  readonly clientOptions?: EventHubConsumerClientOptions;
  /** For logs and dead-letter records. Default `azure-event-hubs:<hub>`. */
  readonly name?: string;
  /** Default: pino at `LOG_LEVEL`. */
  readonly logger?: Logger;
};

/** The options the schemas hold, read out of the adapter's options (the rest is not theirs to check). */
export function schemaOptionsOf(options: EventHubsAdapterOptions): z.input<typeof eventHubsAdapterSchema> {
  const keys = Object.keys(eventHubsAdapterSchema.shape) as (keyof typeof eventHubsAdapterSchema.shape)[];
  const picked: Record<string, unknown> = {};
  for (const key of keys) {
    const value = options[key];
    // An EventPosition or a producer client is the library's wider form of a schema option.
    if (value !== undefined && typeof value !== 'object') picked[key] = value;
  }
  return picked;
}
