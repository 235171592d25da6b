import type { PartitionContext, ReceivedEventData } from '@azure/event-hubs';
import type { Logger } from 'pino';
import { errorMessage } from '../../src/core/errors.js';

/**
 * One owned partition: the events the SDK pushed and not yet settled, in order. At most one
 * event is in flight at a time (the head), so a partition is handled strictly in order while
 * partitions run side by side. A retry keeps the head in place (attempt + 1, not before its
 * delay); ack and dead move on. Checkpoints are the last settled event, written in batches.
 */
export class PartitionLane<M extends object> {
  readonly partitionId: string;
  readonly #context: PartitionContext;
  readonly #logger: Logger;
  readonly #buffer: ReceivedEventData[] = [];
  #attempt = 1;
  /** The head waits for its retry timer (the timer alone says when it is due). */
  #waiting = false;
  #inFlight: M | undefined;
  #retryTimer: NodeJS.Timeout | undefined;
  #closed = false;
  #drainWaiters: (() => void)[] = [];
  /** The newest settled event not yet written as the checkpoint. */
  #toCheckpoint: ReceivedEventData | undefined;
  #unwritten = 0;
  #writing: Promise<void> | undefined;
  /** Since when the SDK owes us its next `processEvents` call; undefined while we have one. */
  #sdkOwesSince: number | undefined = Date.now();

  constructor(context: PartitionContext, logger: Logger) {
    this.partitionId = context.partitionId;
    this.#context = context;
    this.#logger = logger;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Settled events since the last checkpoint write. */
  get unwritten(): number {
    return this.#unwritten;
  }

  get buffered(): number {
    return this.#buffer.length;
  }

  /** The SDK called `processEvents` (an empty batch too): it is reading this partition. */
  sdkCalled(): void {
    this.#sdkOwesSince = undefined;
  }

  /** We returned from `processEvents`: the SDK's next call is due within its max wait time. */
  sdkReturned(now: number): void {
    this.#sdkOwesSince = now;
  }

  /** How long the SDK's next call is overdue from, 0 while we are handling its last batch. */
  sdkSilentFor(now: number): number {
    return this.#sdkOwesSince === undefined ? 0 : now - this.#sdkOwesSince;
  }

  push(events: readonly ReceivedEventData[]): void {
    if (!this.#closed) this.#buffer.push(...events);
  }

  /**
   * Resolves once every buffered event is settled (or the lane closed). The SDK awaits our
   * `processEvents` before it fetches the next batch: this is the backpressure.
   */
  drained(): Promise<void> {
    if (this.#buffer.length === 0 || this.#closed) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  /** Hands out the head when nothing of this partition is in flight and its retry delay passed. */
  take(toMessage: (event: ReceivedEventData, attempt: number) => M): M | undefined {
    if (this.#closed || this.#inFlight || this.#waiting) return undefined;
    const head = this.#buffer[0];
    if (!head) return undefined;
    this.#inFlight = toMessage(head, this.#attempt);
    return this.#inFlight;
  }

  /** Ack or dead: the head is done; the partition moves on. False if `message` is not ours. */
  complete(message: M): boolean {
    if (message !== this.#inFlight) return false;
    this.#inFlight = undefined;
    const head = this.#buffer.shift();
    this.#attempt = 1;
    if (head && !this.#closed) {
      this.#toCheckpoint = head;
      this.#unwritten++;
    }
    if (this.#buffer.length === 0) this.#resolveDrained();
    return true;
  }

  /** Retry in place: the same event again after `delayMs`; `onReady` fires when it is due. */
  retry(message: M, delayMs: number, onReady: () => void): boolean {
    if (message !== this.#inFlight) return false;
    this.#inFlight = undefined;
    if (this.#closed) return true;
    this.#attempt++;
    // Due when the timer fires, not by the wall clock: timers run on a monotonic clock and may
    // fire a millisecond before Date.now() reaches the due time; a head not takeable then would
    // never be woken again.
    this.#waiting = true;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = setTimeout(() => {
      this.#waiting = false;
      onReady();
    }, delayMs);
    return true;
  }

  /**
   * Writes the newest settled event as the partition's checkpoint (one write at a time; a failed
   * write is kept for the next flush: events after the old checkpoint are merely redelivered).
   */
  async flush(): Promise<void> {
    while (this.#writing) await this.#writing;
    const event = this.#toCheckpoint;
    if (!event) return;
    const count = this.#unwritten;
    this.#toCheckpoint = undefined;
    this.#unwritten = 0;
    this.#writing = this.#context
      .updateCheckpoint(event)
      .then(() => {
        this.#logger.debug(
          { partition_id: this.partitionId, sequence_number: event.sequenceNumber, offset: event.offset },
          'checkpoint written',
        );
      })
      .catch((error: unknown) => {
        this.#toCheckpoint ??= event;
        this.#unwritten += count;
        this.#logger.warn(
          {
            partition_id: this.partitionId,
            sequence_number: event.sequenceNumber,
            err: errorMessage(error),
          },
          'checkpoint write failed: will try again',
        );
      })
      .finally(() => {
        this.#writing = undefined;
      });
    await this.#writing;
  }

  /**
   * The partition is no longer ours (ownership lost, or the subscription closed). Buffered events
   * are dropped (their owner reads them from the checkpoint); an in-flight event may still settle
   * but no longer moves the checkpoint.
   */
  close(): void {
    this.#closed = true;
    this.#buffer.length = 0;
    clearTimeout(this.#retryTimer);
    this.#resolveDrained();
  }

  #resolveDrained(): void {
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
