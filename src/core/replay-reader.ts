/**
 * What `replay` reads from: a JSONL file, or a broker's side channel (an SQS dead-letter queue, a
 * Storage Queue `-poison` queue, an Event Hubs hub). Each transport that can be replayed from
 * gives a `ReplayReader` (its `adapters/<name>/replay-reader.ts`); brokers describe their channel
 * in a few calls (`SideChannel`) and `createSideChannelReader` turns it into a reader with the
 * rules every broker shares: each message is handed out once per run, retried in memory, deleted
 * only once done, released (visible again) when it failed or was left out, and the run ends when
 * nothing new arrives for the settle period.
 */
import type { Logger } from 'pino';
import { errorMessage } from './errors.js';
import type { Outcome } from './outcome.js';
import type { RawMessage, SourceAdapter } from './source-adapter.js';
import { Waker } from './waker.js';

/** One message read for a replay. */
export interface ReplayMessage extends RawMessage {
  /** 1-based order in which this run read it (a file's line number). */
  readonly position: number;
  /** A file's line number; absent for broker messages. */
  readonly line?: number;
  /** The code the side channel says the event was dead-lettered with, when it says one. */
  readonly recordedCode?: string;
}

/**
 * A source the replay engine drives. Settling maps onto the side channel: `ack` (forwarded,
 * injected, or already done) deletes a queue message; `dead` (still failing, rejected) leaves it
 * there, visible again; `retry` is retried by the reader itself. A hub is never changed.
 */
export interface ReplayReader<M extends ReplayMessage = ReplayMessage> extends SourceAdapter<M> {
  /** `file`, `queue` (drained) or `hub` (read, never consumed). */
  readonly kind: 'file' | 'queue' | 'hub';
  /** How many messages the run will read, when known (for the progress line's ETA). */
  total(): Promise<number | undefined>;
  /** A message the filters leave out: untouched, and visible again at once. */
  skip(message: M): Promise<void>;
  /** A message only looked at (dry run): kept hidden until `close`, then visible again, unchanged. */
  hold(message: M): Promise<void>;
  /**
   * Set once `max` (`--max`) ended the read while unread messages remain, or may remain (read it
   * after `close`); undefined when the read ended otherwise, or the reader knows nothing was left.
   */
  readonly stoppedAtMax?: MaxStop | undefined;
  /**
   * Set when the read ended because the source could not be read on (a hub that refuses the
   * reader): what was read before is replayed, the rest is not, and the run fails with this.
   */
  readonly failure?: Error | undefined;
}

/** What a reader knows when `--max` ended its read. */
export interface MaxStop {
  /**
   * `remain`: the reader saw unread messages when it stopped (a file's next record, a queue's
   * message beyond N, a hub's events before the end it read to); `may-remain`: it cannot tell.
   */
  readonly unread: 'remain' | 'may-remain';
  /** A hub: where the read stopped, so that a later run can start there. */
  readonly resume?: HubResume | undefined;
}

/** Where a hub's read stopped at `--max`. */
export interface HubResume {
  /** Each partition read from: the sequence number of the last event read. */
  readonly sequenceNumbers: Readonly<Record<string, number>>;
  /**
   * A later run given this as `--since` (ms) reads every event this one did not (and perhaps a
   * few it did: duplicates then); undefined when it must read from the oldest retained event.
   */
  readonly since: number | undefined;
}

/** What a replay reader is opened with (from `replay`'s flags). */
export interface ReplayReaderContext {
  readonly logger: Logger;
  /** Queues: the run ends once nothing new was received for this long. */
  readonly settleMs: number;
  /** Read at most this many messages (`--max`). */
  readonly max: number | undefined;
  /** Queues: how long a message this run holds stays hidden; renewed while it is held. */
  readonly visibilityTimeoutSeconds: number;
  /** Hubs: read events the hub accepted at or after this time (ms); default the oldest retained. */
  readonly since: number | undefined;
  /** Hubs: up to this time (ms); default the end of each partition when the run started. */
  readonly until: number | undefined;
  /** Hubs: the consumer group to read with (never the worker's checkpoints). */
  readonly consumerGroup: string;
}

/** A broker message before the reader numbers it. */
export type SideChannelMessage = Omit<ReplayMessage, 'position'>;

/** The few broker calls a side channel needs; each broker's replay-reader.ts implements them. */
export interface SideChannel<M extends SideChannelMessage = SideChannelMessage> {
  readonly name: string;
  /** `queue`: hidden while held, deleted when done. `hub`: read only (the other calls do nothing). */
  readonly kind: 'queue' | 'hub';
  /**
   * Up to `max` messages, waiting a short while for them; `[]` when none came, `null` when none
   * ever will (a hub read to its end). A queue may return messages this run has seen before.
   */
  fetch(max: number, signal: AbortSignal): Promise<readonly M[] | null>;
  /** The message is done: delete it from the queue. */
  remove(message: M): Promise<void>;
  /** Visible again now, unchanged. */
  release(message: M): Promise<void>;
  /** Keep these hidden for another visibility timeout. */
  renew(messages: readonly M[]): Promise<void>;
  total(): Promise<number | undefined>;
  /**
   * Once `--max` ended the read, after the run let go of its messages and before `close`: what
   * is left unread (`none` only when the channel knows). Without it, messages may remain.
   */
  leftAfterMax?(): Promise<MaxStop | 'none'>;
  /**
   * Set once the channel cannot be read on; `fetch` then ends the read (`null`) instead of
   * failing each call, which the replay's consumer would retry for ever.
   */
  readonly failure?: Error | undefined;
  close(): Promise<void>;
}

/** What the shared rules read of the context. */
export type SideChannelContext = Pick<
  ReplayReaderContext,
  'logger' | 'settleMs' | 'max' | 'visibilityTimeoutSeconds'
>;

type Numbered<M extends SideChannelMessage> = M & { readonly position: number };

/** A side channel as a replay reader (see the module comment for the rules). */
export function createSideChannelReader<M extends SideChannelMessage>(
  channel: SideChannel<M>,
  context: SideChannelContext,
): ReplayReader<Numbered<M>> {
  return new SideChannelReader(channel, context);
}

class SideChannelReader<M extends SideChannelMessage> implements ReplayReader<Numbered<M>> {
  readonly name: string;
  readonly kind: 'queue' | 'hub';
  readonly maxBatchSize = 10;
  readonly #channel: SideChannel<M>;
  readonly #context: SideChannelContext;
  /** Ids handed out this run: a queue message seen again is parked, not handled twice. */
  readonly #seen = new Set<string>();
  readonly #inFlight = new Map<string, Numbered<M>>();
  readonly #delayed = new Map<string, { message: Numbered<M>; timer: NodeJS.Timeout }>();
  /** Hidden until close: held by a dry run, or seen again after this run released it. */
  readonly #parked = new Map<string, M>();
  readonly #ready: Numbered<M>[] = [];
  readonly #waker = new Waker();
  readonly #renewTimer: NodeJS.Timeout | undefined;
  #read = 0;
  /** `--max` messages were read. */
  #reachedMax = false;
  /** A receive held new messages beyond `--max`: they remain unread (released at once). */
  #sawBeyondMax = false;
  #stoppedAtMax: MaxStop | undefined;
  #exhausted = false;
  #lastNewAt = Date.now();

  constructor(channel: SideChannel<M>, context: SideChannelContext) {
    this.#channel = channel;
    this.#context = context;
    this.name = channel.name;
    this.kind = channel.kind;
    if (channel.kind === 'queue') {
      const everyMs = Math.max(250, (context.visibilityTimeoutSeconds * 1000) / 3);
      this.#renewTimer = setInterval(() => void this.#renew(), everyMs);
      this.#renewTimer.unref();
    }
  }

  get stoppedAtMax(): MaxStop | undefined {
    return this.#stoppedAtMax;
  }

  get failure(): Error | undefined {
    return this.#channel.failure;
  }

  total(): Promise<number | undefined> {
    return this.#channel.total().then((n) => {
      const max = this.#context.max;
      return n === undefined || max === undefined ? n : Math.min(n, max);
    });
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly Numbered<M>[] | null> {
    if (this.#ready.length > 0) return this.#handOut(this.#ready.splice(0, max));
    if (!this.#exhausted && !signal.aborted) {
      const fresh = await this.#fetchNew(max, signal);
      if (fresh.length > 0) return this.#handOut(fresh);
      if (!this.#exhausted) return [];
    }
    if (this.#inFlight.size === 0 && this.#delayed.size === 0 && this.#ready.length === 0) return null;
    // Only messages being handled or waiting for a retry remain: wait for one of them.
    await this.#waker.wait(signal);
    return [];
  }

  async settle(message: Numbered<M>, outcome: Outcome): Promise<void> {
    this.#inFlight.delete(message.id);
    try {
      if (outcome.kind === 'retry') {
        const timer = setTimeout(() => {
          this.#delayed.delete(message.id);
          this.#ready.push({ ...message, attempt: message.attempt + 1 });
          this.#waker.wake();
        }, outcome.delayMs);
        this.#delayed.set(message.id, { message, timer });
      } else if (outcome.kind === 'ack') {
        await this.#channel.remove(message);
      } else {
        await this.#channel.release(message);
      }
    } finally {
      this.#waker.wake();
    }
  }

  async skip(message: Numbered<M>): Promise<void> {
    this.#inFlight.delete(message.id);
    try {
      await this.#channel.release(message);
    } finally {
      this.#waker.wake();
    }
  }

  async hold(message: Numbered<M>): Promise<void> {
    this.#inFlight.delete(message.id);
    this.#parked.set(message.id, message);
    this.#waker.wake();
  }

  /** Stops renewing, then makes every message it still holds visible again. */
  async close(): Promise<void> {
    clearInterval(this.#renewTimer);
    const held: M[] = [...this.#parked.values(), ...this.#inFlight.values(), ...this.#ready];
    for (const { message, timer } of this.#delayed.values()) {
      clearTimeout(timer);
      held.push(message);
    }
    this.#parked.clear();
    this.#inFlight.clear();
    this.#delayed.clear();
    this.#ready.length = 0;
    await Promise.all(held.map((message) => this.#releaseQuietly(message)));
    this.#waker.wake();
    if (this.#reachedMax) this.#stoppedAtMax = await this.#leftAfterMax();
    await this.#channel.close();
  }

  /** What `--max` left unread: seen beyond it, else what the channel says, else perhaps some. */
  async #leftAfterMax(): Promise<MaxStop | undefined> {
    if (this.#sawBeyondMax) return { unread: 'remain' };
    try {
      const left = (await this.#channel.leftAfterMax?.()) ?? { unread: 'may-remain' };
      return left === 'none' ? undefined : left;
    } catch (error) {
      this.#context.logger.warn(
        { source: this.name, err: errorMessage(error) },
        'could not tell whether messages remain after --max',
      );
      return { unread: 'may-remain' };
    }
  }

  /**
   * New messages from the channel; ends the read at `--max`, at the channel's end, or when quiet.
   * A queue's receive that can reach `--max` asks for one message more, to learn whether any
   * remain beyond it; that one is released at once, unread.
   */
  async #fetchNew(max: number, signal: AbortSignal): Promise<Numbered<M>[]> {
    const allowed = this.#context.max === undefined ? max : this.#context.max - this.#read;
    const left = Math.min(max, allowed);
    if (left <= 0) {
      this.#exhausted = true;
      return [];
    }
    const toMax = this.#context.max !== undefined && allowed <= max;
    const batch = await this.#channel.fetch(toMax && this.kind === 'queue' ? left + 1 : left, signal);
    if (batch === null) {
      this.#exhausted = true;
      return [];
    }
    const fresh: Numbered<M>[] = [];
    for (const message of batch) {
      if (this.#seen.has(message.id) || fresh.length >= left || signal.aborted) {
        if (toMax && fresh.length >= left && !this.#seen.has(message.id)) this.#sawBeyondMax = true;
        await this.#parkOrRelease(message);
        continue;
      }
      this.#seen.add(message.id);
      fresh.push({ ...message, attempt: 1, position: ++this.#read });
    }
    if (toMax && fresh.length === left) this.#reachedMax = true;
    if (fresh.length > 0) this.#lastNewAt = Date.now();
    else if (this.kind === 'queue' && Date.now() - this.#lastNewAt >= this.#context.settleMs) {
      this.#exhausted = true;
    }
    return fresh;
  }

  /** Seen before: parked until close (so a released message does not come round again and again). */
  async #parkOrRelease(message: M): Promise<void> {
    if (this.#seen.has(message.id)) this.#parked.set(message.id, message);
    else await this.#releaseQuietly(message);
  }

  #handOut(messages: Numbered<M>[]): Numbered<M>[] {
    for (const message of messages) this.#inFlight.set(message.id, message);
    return messages;
  }

  async #renew(): Promise<void> {
    const held: M[] = [...this.#parked.values(), ...this.#inFlight.values(), ...this.#ready];
    for (const { message } of this.#delayed.values()) held.push(message);
    if (held.length === 0) return;
    try {
      await this.#channel.renew(held);
    } catch (error) {
      this.#context.logger.warn(
        { source: this.name, err: errorMessage(error) },
        'could not keep held messages hidden: another reader may get them',
      );
    }
  }

  async #releaseQuietly(message: M): Promise<void> {
    try {
      await this.#channel.release(message);
    } catch (error) {
      // It becomes visible anyway when its visibility timeout ends.
      this.#context.logger.warn(
        { source: this.name, message_id: message.id, err: errorMessage(error) },
        'could not release a message: it is visible again after its visibility timeout',
      );
    }
  }
}
