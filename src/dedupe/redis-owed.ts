import { backoff } from '../core/backoff.js';
import { ABANDONED_CLAIM_MEMORY_MS } from './types.js';

/** At most this many calls are owed at once; past it the oldest is dropped. */
export const MAX_OWED_CALLS = 10_000;

/** Retried with backoff from 100 ms to 2 s, as the client reconnects. */
const RETRY_EVERY_MS = { baseMs: 100, maxMs: 2000, jitter: 'none' } as const;

/** What ioredis says when it refuses a call without sending it (there is no offline queue). */
const NOT_SENT = ["Stream isn't writeable", "Cluster isn't ready"];

/**
 * Whether a call that failed may have run on the server all the same. Without an answer
 * (the command timed out, or the connection closed while it was in flight) it may have run, or
 * may still run: Redis runs what it has received however long it takes, and a timeout only stops
 * the wait. It did not run when Redis answered with an error or the client never sent it.
 */
export function mayHaveRun(error: unknown): boolean {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  if (!(cause instanceof Error)) return true;
  if (cause.name === 'ReplyError') return false;
  return !NOT_SENT.some((start) => cause.message.startsWith(start));
}

interface Owed {
  readonly send: () => Promise<unknown>;
  readonly until: number;
  sending: Promise<unknown> | undefined;
}

/**
 * Calls the store owes Redis: the undoing of a claim that failed but may have run (else its
 * lease, held by nobody, would run out and count as an abandoned claim), and a release that
 * failed (else the lease of a failure the worker reported would count so). Each is checked
 * against its claim's token in Redis, so sending it twice, or after another worker took the
 * event over, changes nothing. Each is sent at once (on the connection of the call it follows,
 * so Redis runs it after that call), again as soon as Redis is reachable (`retryNow`), and
 * meanwhile with backoff, until Redis answers it, for as long as the keys it acts on live (a day).
 */
export class OwedCalls {
  readonly #owed = new Map<string, Owed>();
  readonly #onFull: () => void;
  readonly #now: () => number;
  #timer: NodeJS.Timeout | undefined;
  #attempt = 0;
  #warned = false;
  #closed = false;

  constructor(onFull: () => void, now: () => number = Date.now) {
    this.#onFull = onFull;
    this.#now = now;
  }

  /** Calls not answered yet. */
  get size(): number {
    return this.#owed.size;
  }

  /** Owes `send` for the claim of `token` (one call per token: a later one replaces it). */
  add(token: string, send: () => Promise<unknown>): void {
    if (this.#closed) return;
    if (this.#owed.size >= MAX_OWED_CALLS) this.#dropOldest();
    const owed: Owed = { send, until: this.#now() + ABANDONED_CLAIM_MEMORY_MS, sending: undefined };
    this.#owed.delete(token);
    this.#owed.set(token, owed);
    this.#send(token, owed);
  }

  /** Redis is reachable again: every owed call now, not at its next backoff. */
  retryNow(): void {
    for (const [token, owed] of this.#owed) this.#send(token, owed);
  }

  /** One last try of each (the store closes); resolves once each has been answered or failed. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    const last = [...this.#owed.values()].map((owed) => owed.sending ?? owed.send());
    this.#owed.clear();
    await Promise.allSettled(last);
  }

  #send(token: string, owed: Owed): void {
    if (owed.sending || this.#closed) return;
    if (this.#now() > owed.until) {
      this.#owed.delete(token); // its keys have expired: nothing left to correct
      return;
    }
    owed.sending = owed.send().then(
      () => {
        if (this.#owed.get(token) === owed) this.#owed.delete(token);
        this.#attempt = 0;
        if (this.#owed.size === 0) this.#warned = false;
      },
      () => {
        owed.sending = undefined;
        this.#schedule();
      },
    );
  }

  #schedule(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = setTimeout(
      () => {
        this.#timer = undefined;
        this.retryNow();
      },
      backoff(++this.#attempt, RETRY_EVERY_MS),
    );
    this.#timer.unref();
  }

  #dropOldest(): void {
    const oldest = this.#owed.keys().next();
    if (!oldest.done) this.#owed.delete(oldest.value);
    if (this.#warned) return;
    this.#warned = true;
    this.#onFull();
  }
}
