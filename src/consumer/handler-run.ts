import { AbortNotice, type AbortSignalLike } from '../core/abort-notice.js';
import { ABORT_CODES, type AbortCause } from '../core/outcome.js';

/**
 * One execution of an event's handlers: its deadline, its dedupe lease, and an AbortSignal that
 * is created only when a handler asks for it (on Node 20 an AbortSignal costs 4–6 µs; most
 * handlers never look at theirs). The kit's own handlers read `notice` instead, which costs
 * nothing like it (src/core/abort-notice.ts).
 */
export class HandlerRun {
  readonly eventId: string;
  readonly token: string;
  readonly deadline: number;
  nextExtendAt: number;
  leaseUntil: number;
  #abortCause: AbortCause | undefined;
  #controller: AbortController | undefined;
  #notice: AbortNotice | undefined;
  #wake: (() => void) | undefined;

  /** Started at `now` (ms), under the consumer's handler timeout and lease. */
  constructor(
    eventId: string,
    token: string,
    now: number,
    timing: { readonly handlerTimeoutMs: number; readonly leaseMs: number },
  ) {
    this.eventId = eventId;
    this.token = token;
    this.deadline = now + timing.handlerTimeoutMs;
    this.leaseUntil = now + timing.leaseMs;
    this.nextExtendAt = now + timing.leaseMs / 3;
  }

  /** Why the run was cut short, once it was. */
  get abortCause(): AbortCause | undefined {
    return this.#abortCause;
  }

  /** A real AbortSignal for the handlers, made on first use; it follows `notice`. */
  get signal(): AbortSignal {
    if (!this.#controller) {
      const controller = new AbortController();
      const notice = this.notice;
      if (notice.aborted) controller.abort(notice.reason);
      else notice.addEventListener('abort', () => controller.abort(notice.reason));
      this.#controller = controller;
    }
    return this.#controller.signal;
  }

  /** Aborts when the run does, for the kit's own code (the forwarder's POST): no AbortSignal made. */
  get notice(): AbortSignalLike {
    if (!this.#notice) {
      this.#notice = new AbortNotice();
      if (this.#abortCause) this.#notice.abort(abortReason(this.#abortCause));
    }
    return this.#notice;
  }

  abort(cause: AbortCause): void {
    if (this.#abortCause) return;
    this.#abortCause = cause;
    this.#notice?.abort(abortReason(cause));
    this.#wake?.();
  }

  /** Resolves when `pending` settles (rejecting with its error) or when the run is aborted. */
  wait(pending: PromiseLike<unknown>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#wake = resolve;
      pending.then(() => resolve(), reject);
    });
  }
}

function abortReason(cause: AbortCause): Error {
  const error = new Error(`handler aborted: ${ABORT_CODES[cause]}`);
  error.name = 'AbortError';
  return error;
}
