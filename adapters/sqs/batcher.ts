import { setTimeout as sleep } from 'node:timers/promises';
import { SQS_MAX_BATCH } from './options.js';
import { asError, backoffMs } from './retry.js';

/** How each entry of one batch call ended: `undefined` = done, else why it failed. */
export type EntryResults = readonly (Error | undefined)[];

export interface BatcherOptions<E> {
  /** How long entries are gathered before a call (a full batch goes at once). */
  readonly delayMs: number;
  /** Attempts per entry, the last one made with `single`. */
  readonly attempts: number;
  /** One batch call for up to 10 entries; throws only when the whole call failed. */
  readonly batch: (entries: readonly E[]) => Promise<EntryResults>;
  /** The same action for one entry on its own; throws on failure. */
  readonly single: (entry: E) => Promise<void>;
  readonly retryable: (error: unknown) => boolean;
  /** Told before an entry is tried again. */
  readonly onRetry?: (error: Error, attempt: number) => void;
}

interface Pending<E> {
  readonly entry: E;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Gathers entries added by concurrent callers (acks, visibility changes) into calls of up to 10,
 * resolving each caller once its own entry succeeded. Entries that failed, in a failed call or
 * in the call's `Failed` list, are tried again after a short backoff, the last time one by one so
 * that one bad entry cannot sink the others; what cannot succeed is rejected at once.
 */
export class Batcher<E> {
  readonly #options: BatcherOptions<E>;
  #queue: Pending<E>[] = [];
  #timer: NodeJS.Timeout | undefined;
  readonly #running = new Set<Promise<void>>();

  constructor(options: BatcherOptions<E>) {
    this.#options = options;
  }

  add(entry: E): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#queue.push({ entry, resolve, reject });
      if (this.#queue.length >= SQS_MAX_BATCH) this.flush();
      else this.#timer ??= setTimeout(() => this.flush(), this.#options.delayMs);
    });
  }

  /** Sends everything waiting now, in calls of up to 10. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    while (this.#queue.length > 0) {
      const group = this.#queue.splice(0, SQS_MAX_BATCH);
      const run = this.#send(group).finally(() => this.#running.delete(run));
      this.#running.add(run);
    }
  }

  /** Sends what is waiting and resolves once every call has ended. */
  async drain(): Promise<void> {
    this.flush();
    while (this.#running.size > 0) await Promise.allSettled([...this.#running]);
  }

  async #send(group: Pending<E>[]): Promise<void> {
    const { attempts, retryable, onRetry } = this.#options;
    let pending = group;
    for (let attempt = 1; pending.length > 0; attempt++) {
      // The last of several attempts goes one by one: a batch that keeps failing as a whole
      // (or one bad entry) then cannot hold back the entries that would succeed alone.
      const failures = await this.#attempt(pending, attempt > 1 && attempt === attempts);
      const again: Pending<E>[] = [];
      pending.forEach((p, i) => {
        const error = failures[i];
        if (error === undefined) p.resolve();
        else if (attempt < attempts && retryable(error)) {
          onRetry?.(error, attempt);
          again.push(p);
        } else p.reject(error);
      });
      pending = again;
      if (pending.length > 0) await sleep(backoffMs(attempt));
    }
  }

  /** One try for every pending entry; never throws. */
  async #attempt(pending: Pending<E>[], oneByOne: boolean): Promise<EntryResults> {
    const { batch, single } = this.#options;
    if (oneByOne) {
      return Promise.all(
        pending.map((p) =>
          single(p.entry).then(
            () => undefined,
            (error: unknown) => asError(error),
          ),
        ),
      );
    }
    try {
      const results = await batch(pending.map((p) => p.entry));
      return pending.map((_, i) => results[i]);
    } catch (error) {
      const failure = asError(error);
      return pending.map(() => failure);
    }
  }
}
