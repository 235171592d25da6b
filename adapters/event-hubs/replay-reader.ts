import {
  type EventHubClientOptions,
  EventHubConsumerClient,
  type EventPosition,
  earliestEventPosition,
  type PartitionProperties,
  type ReceivedEventData,
  type Subscription,
} from '@azure/event-hubs';
import { CallDeadline } from '../../src/core/call-deadline.js';
import { AdapterError, ConfigError, errorMessage } from '../../src/core/errors.js';
import { redact } from '../../src/core/redact.js';
import {
  createSideChannelReader,
  type MaxStop,
  type ReplayReader,
  type ReplayReaderContext,
  type SideChannel,
  type SideChannelMessage,
} from '../../src/core/replay-reader.js';
import { Waker } from '../../src/core/waker.js';
import { envelopeText } from './body.js';
import { withoutEntityPath } from './clients.js';
import { closeGuarded } from './close-guard.js';
import { clientFor, type EventHubsAuth, eventHubsAuthFromEnv } from './credentials.js';
import { CLI_SCHEME } from './names.js';
import { HUB_NAME } from './options.js';
import { POISON_PROPERTIES } from './poison-hub.js';
import { ReadErrors } from './read-failure.js';
import { traceContextOf } from './trace-context.js';
import { clientOptionsFromEnv } from './web-socket.js';

/** Events read ahead per run, at most, before the partitions' reads wait for the replay. */
const READ_AHEAD = 200;

/**
 * `replay azure-event-hubs:HUB`: reads the hub (a poison hub, or a main hub over a time window),
 * never consumes it. Every partition is read on its own (no load balancing, no checkpoints) with
 * `context.consumerGroup`, from `since` (enqueued time) or the oldest event retained, to `until`
 * or the partition's last event when the run started. The code comes from the poison copy's
 * `partner-events-dead-code` property. It signs in as `run --source` does (credentials.ts), over
 * WebSockets with `EVENTHUBS_WEBSOCKETS=true`.
 */
export async function eventHubsReplayReader(
  spec: string,
  context: ReplayReaderContext,
  env: NodeJS.ProcessEnv = process.env,
): Promise<ReplayReader> {
  const hub = spec.slice(CLI_SCHEME.length);
  if (!spec.startsWith(CLI_SCHEME) || !HUB_NAME.test(hub)) {
    throw new ConfigError(`replay ${redact(spec)}: expected ${CLI_SCHEME}HUB_NAME`);
  }
  const auth = eventHubsAuthFromEnv(env, `replay ${redact(spec)}`);
  if (context.consumerGroup === '$Default') {
    context.logger.warn(
      { event_hub: hub, consumer_group: '$Default' },
      'reading with the consumer group $Default: if the worker uses it too, give replay a group of its own (--consumer-group)',
    );
  }
  const client = openReplayClient(auth, clientOptionsFromEnv(env), context.consumerGroup, hub);
  const channel = new HubChannel(client, `event-hubs:${hub}`, context);
  try {
    await channel.start();
  } catch (error) {
    await client.close();
    throw new AdapterError(`cannot read ${channel.name}: ${errorMessage(error)}`, { cause: error });
  }
  return createSideChannelReader(channel, context);
}

function openReplayClient(
  auth: EventHubsAuth,
  options: EventHubClientOptions,
  consumerGroup: string,
  hub: string,
): EventHubConsumerClient {
  return clientFor(auth, {
    namespace: (namespace, credential) =>
      new EventHubConsumerClient(consumerGroup, namespace, hub, credential, options),
    // The connection string may name the worker's hub (EntityPath): SOURCE names the one to read.
    connectionString: (connectionString) =>
      new EventHubConsumerClient(consumerGroup, withoutEntityPath(connectionString), hub, options),
  });
}

/** Where one partition's read starts and ends. */
interface PartitionRange {
  readonly partitionId: string;
  readonly start: EventPosition;
  /** The last event when the run started: the read ends there. */
  readonly lastSequenceNumber: number;
  /** Events in the range, when known (no `since`). */
  readonly count: number | undefined;
}

/** A buffered event, with where the hub keeps it. */
interface HubEvent {
  readonly message: SideChannelMessage;
  readonly partitionId: string;
  readonly sequenceNumber: number;
  /** When this hub accepted it (ms); a poison copy's `enqueuedAt` is the main hub's. */
  readonly enqueuedOn: number;
}

class HubChannel implements SideChannel {
  readonly kind = 'hub';
  readonly name: string;
  readonly #client: EventHubConsumerClient;
  readonly #context: ReplayReaderContext;
  readonly #buffer: HubEvent[] = [];
  /** The last event handed out of each partition. */
  readonly #reached = new Map<string, HubEvent>();
  readonly #arrived = new Waker();
  readonly #drained = new Waker();
  readonly #subscriptions: Subscription[] = [];
  readonly #open = new Set<string>();
  readonly #stopped = new AbortController();
  readonly #readErrors = new ReadErrors();
  #ranges: PartitionRange[] = [];
  #failure: AdapterError | undefined;

  constructor(client: EventHubConsumerClient, name: string, context: ReplayReaderContext) {
    this.#client = client;
    this.name = name;
    this.#context = context;
  }

  /** Reads each partition's end as it is now, then subscribes to the partitions with events to read. */
  async start(): Promise<void> {
    const ids = await this.#client.getPartitionIds();
    const ranges = await Promise.all(
      ids.map(async (id) => this.#rangeOf(await this.#client.getPartitionProperties(id))),
    );
    this.#ranges = ranges.filter((r): r is PartitionRange => r !== undefined);
    for (const range of this.#ranges) this.#subscribe(range);
  }

  /** Set once a partition cannot be read (`#onError`): the read ended there, and the run fails. */
  get failure(): AdapterError | undefined {
    return this.#failure;
  }

  async fetch(max: number, signal: AbortSignal): Promise<readonly SideChannelMessage[] | null> {
    if (this.#buffer.length === 0) {
      if (this.#open.size === 0) return null;
      const wait = new CallDeadline(1000, signal);
      try {
        await this.#arrived.wait(wait.signal);
      } finally {
        wait.end();
      }
    }
    const batch = this.#buffer.splice(0, max);
    for (const event of batch) this.#reached.set(event.partitionId, event);
    this.#drained.wake();
    return batch.map((event) => event.message);
  }

  /**
   * Where `--max` stopped the read: the last sequence number read of each partition, and the
   * earliest enqueue time a later run must read from. A partition's events before the end read
   * to remain when some are buffered, or when it is still open and that end was its last event
   * at start; with `--until` an open partition may hold none.
   */
  async leftAfterMax(): Promise<MaxStop | 'none'> {
    const unread = this.#ranges.filter(
      (r) => this.#open.has(r.partitionId) || this.#buffer.some((e) => e.partitionId === r.partitionId),
    );
    if (unread.length === 0) return 'none';
    const surely = this.#buffer.length > 0 || this.#context.until === undefined;
    const starts = unread.map((range) => {
      const next = this.#buffer.find((e) => e.partitionId === range.partitionId);
      return (next ?? this.#reached.get(range.partitionId))?.enqueuedOn ?? this.#context.since;
    });
    const sequenceNumbers: Record<string, number> = {};
    for (const [id, event] of this.#reached) sequenceNumbers[id] = event.sequenceNumber;
    const since = starts.includes(undefined) ? undefined : Math.min(...(starts as number[]));
    return { unread: surely ? 'remain' : 'may-remain', resume: { sequenceNumbers, since } };
  }

  // A hub is read, never changed.
  async remove(): Promise<void> {}
  async release(): Promise<void> {}
  async renew(): Promise<void> {}

  async total(): Promise<number | undefined> {
    let sum = 0;
    for (const range of this.#ranges) {
      if (range.count === undefined) return undefined;
      sum += range.count;
    }
    return sum;
  }

  async close(): Promise<void> {
    this.#stopped.abort();
    this.#drained.wake();
    await closeGuarded(this.#context.logger, async () => {
      await Promise.all(this.#subscriptions.map((s) => s.close()));
      await this.#client.close();
    });
  }

  #rangeOf(p: PartitionProperties): PartitionRange | undefined {
    const { since, until } = this.#context;
    if (p.isEmpty) return undefined;
    if (since !== undefined && p.lastEnqueuedOnUtc.getTime() < since) return undefined;
    const start: EventPosition =
      since === undefined ? earliestEventPosition : { enqueuedOn: new Date(since - 1) };
    const count =
      since === undefined && until === undefined
        ? p.lastEnqueuedSequenceNumber - p.beginningSequenceNumber + 1
        : undefined;
    return { partitionId: p.partitionId, start, lastSequenceNumber: p.lastEnqueuedSequenceNumber, count };
  }

  #subscribe(range: PartitionRange): void {
    this.#open.add(range.partitionId);
    const subscription = this.#client.subscribe(
      range.partitionId,
      {
        processEvents: (events) => this.#onEvents(range, events),
        processError: async (error) => this.#onError(range.partitionId, error),
      },
      { startPosition: range.start, maxBatchSize: 50, maxWaitTimeInSeconds: 1, skipParsingBodyAsJson: true },
    );
    this.#subscriptions.push(subscription);
  }

  /** Buffers the partition's events up to the end of its range; waits while the buffer is full. */
  async #onEvents(range: PartitionRange, events: ReceivedEventData[]): Promise<void> {
    // Called, even with no events: the partition is being read.
    this.#readErrors.read(range.partitionId);
    if (!this.#open.has(range.partitionId)) return;
    const until = this.#context.until;
    for (const event of events) {
      if (until !== undefined && event.enqueuedTimeUtc.getTime() > until) {
        this.#end(range.partitionId);
        return;
      }
      this.#buffer.push({
        message: hubMessage(event, range.partitionId),
        partitionId: range.partitionId,
        sequenceNumber: event.sequenceNumber,
        enqueuedOn: event.enqueuedTimeUtc.getTime(),
      });
      if (event.sequenceNumber >= range.lastSequenceNumber) {
        this.#end(range.partitionId);
        return;
      }
    }
    this.#arrived.wake();
    while (this.#buffer.length >= READ_AHEAD && !this.#stopped.signal.aborted) {
      await this.#drained.wait(this.#stopped.signal);
    }
  }

  /**
   * A partition's reader failed. The SDK retries by itself, for ever: a replay must end. So an
   * error retrying cannot fix (the SDK says so), or the same partition's third in a row with
   * nothing read between them, ends the whole read: what is buffered is still handed out, then
   * `fetch` says the end and the run fails with `failure`.
   */
  #onError(partitionId: string, error: Error): void {
    if (this.#failure !== undefined || this.#stopped.signal.aborted) return;
    const place = { source: this.name, consumerGroup: this.#context.consumerGroup, partitionId };
    this.#failure = this.#readErrors.failed(error, place);
    if (this.#failure === undefined) {
      this.#context.logger.warn(
        {
          source: this.name,
          partition_id: partitionId,
          err: errorMessage(error),
          errors_in_a_row: this.#readErrors.inARow(partitionId),
        },
        'reading the hub failed: the SDK retries',
      );
      return;
    }
    this.#open.clear();
    this.#arrived.wake();
  }

  #end(partitionId: string): void {
    this.#open.delete(partitionId);
    this.#arrived.wake();
  }
}

function hubMessage(event: ReceivedEventData, partitionId: string): SideChannelMessage {
  const properties = event.properties ?? {};
  const code = properties[POISON_PROPERTIES.code];
  const original = Date.parse(String(properties[POISON_PROPERTIES.enqueuedTime] ?? ''));
  return {
    id: `${partitionId}:${event.sequenceNumber}`,
    body: envelopeText(event.body),
    attempt: 1,
    // A poison copy's age is measured from when the main hub accepted the event.
    enqueuedAt: Number.isNaN(original) ? event.enqueuedTimeUtc.getTime() : original,
    metadata: {
      partition_id: partitionId,
      sequence_number: event.sequenceNumber,
      enqueued_time: event.enqueuedTimeUtc.toISOString(),
    },
    ...(typeof code === 'string' ? { recordedCode: code } : {}),
    ...traceContextOf(properties),
  };
}
