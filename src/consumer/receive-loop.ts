import type { Logger } from 'pino';
import { type BackoffOptions, backoff } from '../core/backoff.js';
import { errorMessage } from '../core/errors.js';
import type { RawMessage, SourceAdapter } from '../core/source-adapter.js';

/** After a failed receive: 0.5 s, doubling to 30 s (exact: one poller per source, nothing to spread). */
const RECEIVE_BACKOFF: BackoffOptions = { baseMs: 500, maxMs: 30_000, jitter: 'none' };

export interface ReceiveLoopOptions<M extends RawMessage> {
  readonly source: SourceAdapter<M>;
  /** Messages in flight at most. */
  readonly concurrency: number;
  readonly logger: Logger;
  /**
   * Handles the messages of one receive to their end (settled), calling `settled` once per
   * message as it is: its slot is free again then. Must not throw.
   */
  readonly handle: (batch: readonly M[], settled: () => void) => void;
}

/**
 * Polling and slots: receives from a source while there is free capacity, never more than
 * `concurrency` messages in flight, and hands each message to `handle`. Several receives run at
 * once only when one batch cannot fill the free slots and the source allows it.
 */
export class ReceiveLoop<M extends RawMessage> {
  readonly #options: ReceiveLoopOptions<M>;
  #inFlight = 0;
  /** Slots promised to `receive` calls still pending (their `max`). */
  #reserved = 0;
  /** Pollers waiting for a free slot. */
  #slotWaiters: (() => void)[] = [];
  #idle: (() => void) | undefined;
  readonly #abort = new AbortController();
  /** Start times of the pending `receive` calls. */
  readonly #receiving = new Set<{ readonly since: number }>();
  #exhausted = false;
  #lastReceiveAt: number | undefined;
  #lastReceiveError: string | undefined;

  constructor(options: ReceiveLoopOptions<M>) {
    this.#options = options;
  }

  get inFlight(): number {
    return this.#inFlight;
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

  /** One poller: receives into the free slots (minus those promised to other pending receives). */
  async #poll(): Promise<void> {
    const { source, concurrency } = this.#options;
    const signal = this.#abort.signal;
    let failures = 0;
    while (!signal.aborted && !this.#exhausted) {
      const free = concurrency - this.#inFlight - this.#reserved;
      if (free <= 0) {
        await new Promise<void>((resolve) => this.#slotWaiters.push(resolve));
        continue;
      }
      const max = Math.min(free, source.maxBatchSize);
      const pending = { since: Date.now() };
      this.#reserved += max;
      this.#receiving.add(pending);
      let batch: readonly M[] | null = [];
      let failure: { readonly error: unknown } | undefined;
      try {
        batch = await source.receive(max, signal);
      } catch (error) {
        failure = { error };
      }
      this.#reserved -= max;
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

  #dispatch(batch: readonly M[]): void {
    this.#inFlight += batch.length;
    this.#options.handle(batch, this.#settled);
  }

  readonly #settled = (): void => {
    this.#inFlight--;
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
