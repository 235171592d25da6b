import {
  type CheckpointStore,
  type CloseReason,
  type EventHubConsumerClient,
  type EventPosition,
  earliestEventPosition,
  latestEventPosition,
  type PartitionContext,
  parseEventHubConnectionString,
  type ReceivedEventData,
  type Subscription,
} from '@azure/event-hubs';
import type { Logger } from 'pino';
import { parseAdapterOptions } from '../../src/core/adapter-options.js';
import { AdapterError, ConfigError, errorMessage } from '../../src/core/errors.js';
import { createLogger } from '../../src/core/logger.js';
import type { Outcome } from '../../src/core/outcome.js';
import type { RawMessage, SourceAdapter } from '../../src/core/source-adapter.js';
import { Waker } from '../../src/core/waker.js';
import { envelopeText } from './body.js';
import { openConsumerClient, openPoisonHub } from './clients.js';
import { closeGuarded } from './close-guard.js';
import { type EventHubsAdapterOptions, eventHubsAdapterSchema, schemaOptionsOf } from './options.js';
import { PartitionLane } from './partition-lane.js';
import type { PoisonHub } from './poison-hub.js';
import { SqliteCheckpointStore } from './sqlite-checkpoint-store.js';
import { traceContextOf } from './trace-context.js';

/** One event of one partition. `id` is `<partitionId>:<sequenceNumber>`. */
export interface EventHubsMessage extends RawMessage {
  readonly partitionId: string;
  readonly sequenceNumber: number;
  readonly offset: string;
}

export const DEFAULT_CHECKPOINT_PATH = 'partner-events-checkpoints.db';

interface Resolved {
  readonly eventHubName: string;
  readonly consumerGroup: string;
  readonly startPosition: EventPosition;
  readonly partitionBatchSize: number;
  readonly maxWaitTimeInSeconds: number;
  readonly checkpointEvery: number;
  readonly checkpointIntervalMs: number;
}

/**
 * Azure Event Hubs as a source. The SDK pushes batches per partition (`subscribe`); this adapter
 * buffers them and hands them out through `receive`, at most one in-flight event per partition
 * (order within a partition, partitions in parallel). Settling maps onto the log:
 * - ack / dead: the partition moves on; the event becomes the partition's checkpoint (written
 *   every `checkpointEvery` events or `checkpointIntervalMs`, and on close);
 * - retry: retry in place: the same event again after `delayMs`, attempt + 1, before anything
 *   later in its partition; the pipeline turns it into dead after `retry.maxAttempts`.
 *
 * long: the SDK's push callbacks (events, close, error), the partition lanes they fill, the
 * checkpoint flushing and the health they report share one state; the clients (clients.ts), a
 * partition's order and retries (partition-lane.ts), the poison hub and the checkpoint store
 * live beside it.
 */
export class EventHubsAdapter implements SourceAdapter<EventHubsMessage> {
  readonly name: string;
  readonly maxBatchSize: number;
  readonly consumerGroup: string;
  readonly eventHubName: string;
  readonly #options: Resolved;
  readonly #logger: Logger;
  readonly #client: EventHubConsumerClient;
  readonly #ownStore: SqliteCheckpointStore | undefined;
  readonly #lanes = new Map<PartitionContext, PartitionLane<EventHubsMessage>>();
  readonly #laneOf = new WeakMap<EventHubsMessage, PartitionLane<EventHubsMessage>>();
  readonly #eventOf = new WeakMap<EventHubsMessage, ReceivedEventData>();
  readonly #poison: PoisonHub | undefined;
  /** Copies to the poison hub still being sent; aborted by `close`. */
  readonly #poisonSends = new Set<Promise<void>>();
  readonly #closing = new AbortController();
  /** How often a persisting error is reported again: the SDK's load-balancing cycle. */
  readonly #errorRepeatMs: number;
  readonly #waker = new Waker();
  #subscription: Subscription | undefined;
  #flushTimer: NodeJS.Timeout | undefined;
  /** When the SDK last reported a connection, link or store error, and when it last delivered. */
  #lastErrorAt = 0;
  #lastHealthyAt = 0;
  /** An owned partition the SDK has not called back for this long is not being read. */
  readonly #silentAfterMs: number;
  #turn = 0;
  #closed = false;

  constructor(options: EventHubsAdapterOptions) {
    const eventHubName = hubName(options);
    const {
      deadLetterQueue: _hub,
      maxBatchSize,
      ...checked
    } = parseAdapterOptions(eventHubsAdapterSchema, schemaOptionsOf(options), 'Event Hubs adapter');
    this.#options = {
      ...checked,
      eventHubName,
      startPosition: startPositionOf(
        typeof options.startPosition === 'object' ? options.startPosition : checked.startPosition,
      ),
    };
    this.eventHubName = eventHubName;
    this.consumerGroup = this.#options.consumerGroup;
    this.name = options.name ?? `azure-event-hubs:${eventHubName}`;
    this.maxBatchSize = maxBatchSize;
    this.#logger = (options.logger ?? createLogger()).child({ source: this.name });

    let store: CheckpointStore;
    if (typeof options.checkpointStore === 'object') {
      store = options.checkpointStore;
    } else {
      this.#ownStore = new SqliteCheckpointStore({
        path: options.checkpointStore ?? DEFAULT_CHECKPOINT_PATH,
      });
      store = this.#ownStore;
    }
    const lb = options.loadBalancing;
    this.#errorRepeatMs = Math.max(lb?.updateIntervalMs ?? 10_000, this.#options.maxWaitTimeInSeconds * 1000);
    this.#silentAfterMs = Math.max(5000, 3 * this.#options.maxWaitTimeInSeconds * 1000);
    try {
      this.#client = openConsumerClient(options, {
        eventHubName,
        consumerGroup: this.consumerGroup,
        store,
        ownerId: this.#ownStore?.ownerId,
      });
      const hub = options.deadLetterQueue;
      this.#poison = hub ? openPoisonHub(options, hub, eventHubName, this.#logger) : undefined;
    } catch (cause) {
      this.#ownStore?.close();
      if (cause instanceof ConfigError) throw cause;
      throw new ConfigError(`cannot create the Event Hubs client for ${this.name}`, { cause });
    }
  }

  /** The dead-letter hub's name, or undefined when dead events only go to the dead-letter file. */
  get deadLetterQueueName(): string | undefined {
    return this.#poison?.name;
  }

  /** As the SDK names it in checkpoints and ownership records. */
  get fullyQualifiedNamespace(): string {
    return this.#client.fullyQualifiedNamespace;
  }

  /**
   * For readiness: false while an owned partition is not being read, or the SDK keeps reporting
   * errors (connection, link, checkpoint store) and has not delivered since.
   * - Once we hand a batch back, the SDK calls again within `maxWaitTimeInSeconds` (an empty
   *   batch when nothing is new); while it is reconnecting it does not. A partition silent for
   *   3 × that (at least 5 s) means the hub is out of reach, well before the SDK gives up.
   * - An error not repeated within three load-balancing cycles is taken as passed (an instance
   *   that owns no partition has no deliveries to show it).
   */
  get connected(): boolean {
    const now = Date.now();
    for (const lane of this.#lanes.values()) {
      if (!lane.closed && lane.sdkSilentFor(now) > this.#silentAfterMs) return false;
    }
    if (this.#lastErrorAt <= this.#lastHealthyAt) return true;
    return now - this.#lastErrorAt > 3 * this.#errorRepeatMs;
  }

  /** Partitions this instance reads right now (for status and tests). */
  get partitions(): string[] {
    return [...this.#lanes.values()].map((lane) => lane.partitionId).sort();
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly EventHubsMessage[] | null> {
    if (this.#closed) return null;
    this.#subscribe();
    for (;;) {
      if (this.#closed) return null; // even with events still buffered: close() is releasing them
      const batch = this.#take(max);
      if (batch.length > 0 || signal.aborted) return batch;
      await this.#waker.wait(signal);
    }
  }

  async settle(message: EventHubsMessage, outcome: Outcome): Promise<void> {
    const lane = this.#laneOf.get(message);
    this.#laneOf.delete(message);
    if (!lane) return;
    if (outcome.kind === 'retry') {
      lane.retry(message, outcome.delayMs, () => this.#waker.wake());
      return;
    }
    const event = this.#eventOf.get(message);
    if (outcome.kind === 'dead' && this.#poison && event) {
      // In the background: the worker's slot is free, while the partition (only it) waits for the copy.
      const info = {
        code: outcome.code,
        reason: outcome.reason,
        attempts: message.attempt,
        eventHub: this.eventHubName,
        consumerGroup: this.consumerGroup,
        partitionId: lane.partitionId,
      };
      const sending = this.#poison.send(event, info, this.#closing.signal).then((sent) => {
        // Not sent means closing: the event stays unsettled and is read again next time.
        if (sent) this.#complete(lane, message);
      });
      this.#poisonSends.add(sending);
      void sending.finally(() => this.#poisonSends.delete(sending));
      return;
    }
    this.#complete(lane, message);
  }

  #complete(lane: PartitionLane<EventHubsMessage>, message: EventHubsMessage): void {
    if (!lane.complete(message)) return;
    if (lane.unwritten >= this.#options.checkpointEvery) void lane.flush();
    this.#waker.wake();
  }

  /**
   * Stops reading: closes the subscription (each partition's checkpoint is written as its reader
   * stops, and ownership is given up for other instances), then the connection. Events settled
   * before `close` are checkpointed; buffered and still-unsettled ones are read again next time.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#flushTimer);
    this.#waker.wake();
    this.#closing.abort();
    await Promise.all(this.#poisonSends);
    await closeGuarded(this.#logger, () => this.#closeClients());
  }

  async #closeClients(): Promise<void> {
    try {
      await this.#subscription?.close();
    } catch (error) {
      this.#logger.warn({ err: errorMessage(error) }, 'closing the Event Hubs subscription failed');
    }
    // Partitions whose reader stopped without telling us.
    const lanes = [...this.#lanes.values()];
    for (const lane of lanes) lane.close();
    await Promise.all(lanes.map((lane) => lane.flush()));
    this.#lanes.clear();
    try {
      await Promise.all([this.#client.close(), this.#poison?.close()]);
    } finally {
      this.#ownStore?.close();
    }
  }

  #subscribe(): void {
    if (this.#subscription) return;
    const o = this.#options;
    try {
      this.#subscription = this.#client.subscribe(
        {
          processInitialize: async (context) => {
            this.#laneFor(context);
            this.#logger.info({ partition_id: context.partitionId }, 'partition claimed');
          },
          processEvents: (events, context) => this.#onEvents(events, context),
          processError: async (error, context) => this.#onError(error, context),
          processClose: (reason, context) => this.#onClose(reason, context),
        },
        {
          startPosition: o.startPosition,
          maxBatchSize: o.partitionBatchSize,
          maxWaitTimeInSeconds: o.maxWaitTimeInSeconds,
          // Keep the data section's bytes: the HMAC is over exactly what was sent (see body.ts).
          skipParsingBodyAsJson: true,
        },
      );
    } catch (cause) {
      throw new AdapterError(`cannot subscribe to ${this.name}`, { cause });
    }
    this.#flushTimer = setInterval(() => {
      for (const lane of this.#lanes.values()) if (lane.unwritten > 0) void lane.flush();
    }, o.checkpointIntervalMs);
    this.#flushTimer.unref();
    this.#logger.info(
      { event_hub: o.eventHubName, consumer_group: o.consumerGroup },
      'subscribed to Event Hubs',
    );
  }

  async #onEvents(events: ReceivedEventData[], context: PartitionContext): Promise<void> {
    this.#lastHealthyAt = Date.now();
    if (this.#closed) return;
    const lane = this.#laneFor(context);
    lane.sdkCalled();
    try {
      if (events.length === 0) return;
      lane.push(events);
      this.#waker.wake();
      await lane.drained();
    } finally {
      lane.sdkReturned(Date.now());
    }
  }

  async #onClose(reason: CloseReason, context: PartitionContext): Promise<void> {
    const lane = this.#lanes.get(context);
    if (!lane) return;
    this.#lanes.delete(context);
    lane.close();
    await lane.flush();
    this.#logger.info({ partition_id: context.partitionId, reason }, 'partition released');
  }

  async #onError(error: Error, context: PartitionContext): Promise<void> {
    const code = (error as { code?: unknown }).code;
    const fields = {
      partition_id: context.partitionId || undefined,
      err: errorMessage(error),
      ...(typeof code === 'string' ? { code } : {}),
    };
    // Another instance attached with the same owner level: load balancing moved the partition.
    if (code === 'ReceiverDisconnectedError') {
      this.#logger.info(fields, 'partition taken over by another instance');
    } else {
      // Connection, link and checkpoint store errors: the SDK reconnects and retries on its own.
      this.#lastErrorAt = Date.now();
      this.#logger.warn(fields, 'Event Hubs error');
    }
  }

  #laneFor(context: PartitionContext): PartitionLane<EventHubsMessage> {
    let lane = this.#lanes.get(context);
    if (!lane) {
      lane = new PartitionLane(context, this.#logger);
      this.#lanes.set(context, lane);
    }
    return lane;
  }

  /** At most one event per partition, starting with a different partition each time (fairness). */
  #take(max: number): EventHubsMessage[] {
    const lanes = [...this.#lanes.values()];
    const batch: EventHubsMessage[] = [];
    for (let i = 0; i < lanes.length && batch.length < max; i++) {
      const lane = lanes[(this.#turn + i) % lanes.length] as PartitionLane<EventHubsMessage>;
      const message = lane.take((event, attempt) => this.#toMessage(lane, event, attempt));
      if (message) {
        this.#laneOf.set(message, lane);
        batch.push(message);
      }
    }
    this.#turn++;
    return batch;
  }

  #toMessage(
    lane: PartitionLane<EventHubsMessage>,
    event: ReceivedEventData,
    attempt: number,
  ): EventHubsMessage {
    const message: EventHubsMessage = {
      id: `${lane.partitionId}:${event.sequenceNumber}`,
      body: envelopeText(event.body),
      attempt,
      enqueuedAt: event.enqueuedTimeUtc.getTime(),
      partitionId: lane.partitionId,
      sequenceNumber: event.sequenceNumber,
      offset: event.offset,
      ...traceContextOf(event.properties),
      metadata: {
        event_hub: this.eventHubName,
        consumer_group: this.consumerGroup,
        partition_id: lane.partitionId,
        sequence_number: event.sequenceNumber,
        offset: event.offset,
      },
    };
    if (this.#poison) this.#eventOf.set(message, event);
    return message;
  }
}

export function createEventHubsAdapter(options: EventHubsAdapterOptions): EventHubsAdapter {
  return new EventHubsAdapter(options);
}

function hubName(options: EventHubsAdapterOptions): string {
  if (options.connectionString) {
    let entityPath: string | undefined;
    try {
      entityPath = parseEventHubConnectionString(options.connectionString).eventHubName;
    } catch (cause) {
      throw new ConfigError('the Event Hubs connection string is not valid', { cause });
    }
    if (options.eventHubName && entityPath && options.eventHubName !== entityPath) {
      throw new ConfigError(
        `eventHubName "${options.eventHubName}" differs from the connection string's EntityPath "${entityPath}"`,
      );
    }
    const name = options.eventHubName ?? entityPath;
    if (!name) throw new ConfigError('eventHubName is required when the connection string has no EntityPath');
    return name;
  }
  if (!options.fullyQualifiedNamespace || !options.credential) {
    throw new ConfigError(
      'Event Hubs needs a connectionString, or a fullyQualifiedNamespace with a credential',
    );
  }
  if (!options.eventHubName) throw new ConfigError('eventHubName is required with a fullyQualifiedNamespace');
  return options.eventHubName;
}

function startPositionOf(position: 'earliest' | 'latest' | EventPosition): EventPosition {
  if (position === 'earliest') return earliestEventPosition;
  if (position === 'latest') return latestEventPosition;
  return position;
}
