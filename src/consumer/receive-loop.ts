import type { Logger } from 'pino';
import { type BackoffOptions, backoff } from '../core/backoff.js';
import { errorMessage } from '../core/errors.js';
import { messageSize, type RawMessage, type SourceAdapter } from '../core/source-adapter.js';

/** After a failed receive: 0.5 s, doubling to 30 s (exact: one poller per source, nothing to spread). */
const RECEIVE_BACKOFF: BackoffOptions = { baseMs: 500, maxMs: 30_000, jitter: 'none' };

export interface ReceiveLoopOptions<M extends RawMessage> {
  readonly source: SourceAdapter<M>;
  /** Messages in flight at most. */
  readonly concurrency: number;
  /**
   * Size of the messages in flight at most (`messageSize`), 0 for no bound: no receive is asked
   * for more than the room left, at the average size received so far (`#roomBySize`). One
   * message is always let in when nothing is in flight, however large.
   */
  readonly maxInFlightBytes?: number;
  readonly logger: Logger;
  /**
   * Handles the messages of one receive to their end (settled), calling `settled(message)` once
   * per message as it is: its slot (and its bytes) are free again then. Must not throw.
   */
  readonly handle: (batch: readonly M[], settled: (message: M) => void) => void;
}

/**
 * Weight of each received message in the running average size (an exponential moving average):
 * a message 64 receipts old counts 0.37 of the newest, 200 old 0.04, so a change of traffic
 * shows within a few receives while one odd message moves it little.
 */
const AVERAGE_WEIGHT = 1 / 64;

/**
 * Polling and slots: receives from a source while there is free capacity, never more than
 * `concurrency` messages in flight, nor more than `maxInFlightBytes` of them (by the average
 * size, so one receive may overshoot by its last messages), and hands each message to `handle`.
 * Several receives run at once only when one batch cannot fill the free slots and the source
 * allows it.
 */
export class ReceiveLoop<M extends RawMessage> {
  readonly #options: ReceiveLoopOptions<M>;
  #inFlight = 0;
  /** Slots promised to `receive` calls still pending (their `max`). */
  #reserved = 0;
  #inFlightBytes = 0;
  /** Bytes promised to pending receives: their `max` at the average size. */
  #reservedBytes = 0;
  /** Running average size of the messages received (0 before the first). */
  #averageSize = 0;
  /** Pollers waiting for a free slot. */
  #slotWaiters: (() => void)[] = [];
  #idle: (() => void) | undefined;
  readonly #abort = new AbortController();
  /** Start times of the pending `receive` calls. */
  readonly #receiving = new Set<{ readonly since: number }>();
  #exhausted = false;
  #lastReceiveAt: number | undefined;
  #lastReceiveError: string | undefined;
  /**
   * Whether the event loop turned since the last receive began (`#poll` waits for a turn when
   * not). The receive that clears it schedules the one mark that sets it again.
   */
  #turned = true;
  /** The pending mark, cleared once the pollers end (it would keep the consumer reachable a turn). */
  #turnMark: NodeJS.Immediate | undefined;
  readonly #markTurned = (): void => {
    this.#turned = true;
    this.#turnMark = undefined;
  };

  constructor(options: ReceiveLoopOptions<M>) {
    this.#options = options;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  /** Size of the messages in flight (`messageSize`). */
  get inFlightBytes(): number {
    return this.#inFlightBytes;
  }

  /** Last time `receive` returned (ms). */
  get lastReceiveAt(): number | undefined {
    return this.#lastReceiveAt;
  }

  get lastReceiveError(): string | undefined {
    return this.#lastReceiveError;
  }

  /** Since when the oldest pending `receive` has been waiting (ms). */
  get receivingSince(): number | undefined {
    let oldest: number | undefined;
    for (const { since } of this.#receiving) if (oldest === undefined || since < oldest) oldest = since;
    return oldest;
  }

  /** Receives until `stop()` or until the source is exhausted; messages may still be in flight then. */
  async run(): Promise<void> {
    const { source, concurrency } = this.#options;
    const pollers = Math.max(
      1,
      Math.min(source.maxConcurrentReceives ?? 1, Math.ceil(concurrency / source.maxBatchSize)),
    );
    await Promise.all(Array.from({ length: pollers }, () => this.#poll()));
    clearImmediate(this.#turnMark); // the mark a receive left pending: done as it would do it
    this.#markTurned();
  }

  /** Ends receiving: pending receives are aborted, waiting pollers woken. */
  stop(): void {
    this.#abort.abort();
    this.#wakePollers();
  }

  /**
   * Resolves once nothing is in flight. After `timeoutMs`, `onDeadline` is called once (to abort
   * what still runs) and the wait goes on until those messages are settled too.
   */
  async drain(timeoutMs: number, onDeadline: () => void): Promise<void> {
    if (this.#inFlight === 0) return;
    const idle = new Promise<void>((resolve) => {
      this.#idle = resolve;
    });
    const deadline = setTimeout(onDeadline, timeoutMs);
    await idle;
    clearTimeout(deadline);
  }

  /**
   * One poller: receives into the free slots and the room the size bound leaves (minus what is
   * promised to other pending receives).
   */
  async #poll(): Promise<void> {
    const { source, concurrency } = this.#options;
    const signal = this.#abort.signal;
    let failures = 0;
    while (!signal.aborted && !this.#exhausted) {
      const max = Math.min(
        concurrency - this.#inFlight - this.#reserved,
        this.#roomBySize(),
        source.maxBatchSize,
      );
      if (max <= 0) {
        await new Promise<void>((resolve) => this.#slotWaiters.push(resolve));
        continue;
      }
      // A source that answers without I/O (the memory source, posted HTTP requests) would let a
      // busy consumer go from receive to receive without the event loop turning: timers (lease
      // extensions, heartbeats), the ops server and signals would wait for the whole backlog.
      if (!this.#turned) {
        await nextTurn();
        continue; // the room may have changed meanwhile
      }
      this.#turned = false;
      this.#turnMark = setImmediate(this.#markTurned);
      const pending = { since: Date.now() };
      const reservedBytes = max * this.#averageSize;
      this.#reserved += max;
      this.#reservedBytes += reservedBytes;
      this.#receiving.add(pending);
      let batch: readonly M[] | null = [];
      let failure: { readonly error: unknown } | undefined;
      try {
        batch = await source.receive(max, signal);
      } catch (error) {
        failure = { error };
      }
      this.#reserved -= max;
      this.#reservedBytes -= reservedBytes;
      this.#receiving.delete(pending);
      // Slots promised to this receive and left unused are free for the other pollers. (They run
      // after this synchronous stretch, so they see the messages dispatched below.)
      if (batch === null || batch.length < max) this.#wakePollers();
      if (failure) {
        if (signal.aborted) break;
        await this.#receiveFailed(failure.error, ++failures);
        continue;
      }
      this.#lastReceiveAt = Date.now();
      this.#lastReceiveError = undefined;
      failures = 0;
      if (batch === null) {
        this.#options.logger.info({ source: source.name }, 'source exhausted');
        this.#exhausted = true;
        break;
      }
      if (batch.length > 0) this.#dispatch(batch);
    }
  }

  /** Logs a failed receive and waits before the next one (backing off), or until stopped. */
  #receiveFailed(error: unknown, failures: number): Promise<void> {
    this.#lastReceiveError = errorMessage(error);
    const delay = backoff(failures, RECEIVE_BACKOFF);
    this.#options.logger.error(
      { source: this.#options.source.name, err: this.#lastReceiveError, retry_in_ms: delay },
      'receive failed',
    );
    return sleep(delay, this.#abort.signal);
  }

  /**
   * Messages the size bound leaves room for, at the average size: unbounded without a bound;
   * until a message has been seen, one receive at a time (of a full batch: the size is unknown,
   * so the first receive may overshoot the bound as any receive may); then at least one when
   * nothing is in flight or promised.
   */
  #roomBySize(): number {
    const bound = this.#options.maxInFlightBytes ?? 0;
    if (bound <= 0) return Number.POSITIVE_INFINITY;
    if (this.#averageSize === 0) return this.#reserved === 0 ? Number.POSITIVE_INFINITY : 0;
    const used = this.#inFlightBytes + this.#reservedBytes;
    if (used === 0) return Math.max(1, Math.floor(bound / this.#averageSize));
    return Math.floor((bound - used) / this.#averageSize);
  }

  #dispatch(batch: readonly M[]): void {
    this.#inFlight += batch.length;
    const sizeWasUnknown = this.#averageSize === 0;
    let average = this.#averageSize;
    for (const message of batch) {
      const size = messageSize(message);
      this.#inFlightBytes += size;
      average = average === 0 ? size : average + (size - average) * AVERAGE_WEIGHT;
    }
    this.#averageSize = average;
    // The pollers held back until a size was known may receive now.
    if (sizeWasUnknown) this.#wakePollers();
    this.#options.handle(batch, this.#settled);
  }

  readonly #settled = (message: M): void => {
    this.#inFlight--;
    this.#inFlightBytes -= messageSize(message);
    this.#wakePollers();
    if (this.#inFlight === 0) this.#idle?.();
  };

  #wakePollers(): void {
    if (this.#slotWaiters.length === 0) return;
    const waiters = this.#slotWaiters;
    this.#slotWaiters = [];
    for (const wake of waiters) wake();
  }
}

function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
