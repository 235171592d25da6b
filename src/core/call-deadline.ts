/**
 * The abort signal of one call to a service: it aborts when `timeoutMs` passes (reason: a
 * `TimeoutError` DOMException, as `AbortSignal.timeout` gives) or when `outer` aborts (with its
 * reason), whichever comes first. `end()` once the call settled clears the timer and the listener.
 *
 * Not `AbortSignal.any([outer, AbortSignal.timeout(ms)])`: on Node 20 each `any` leaves an entry
 * in the long-lived outer signal (a receive loop's) that nothing removes until it aborts, about
 * 70 bytes per call for the life of the worker (nodejs/node#55351; Node 22 and 24 clean them
 * up). And the timeout's timer stayed pending for the whole `timeoutMs` after a quick call: with
 * one call per message, thousands of live timers. This costs a controller, a timer and a
 * listener, all gone at `end()` (docs/performance-log.md has the figures).
 */
export class CallDeadline {
  readonly #controller = new AbortController();
  readonly #outer: AbortSignal | undefined;
  readonly #timer: NodeJS.Timeout;
  readonly #onOuterAbort: (() => void) | undefined;

  constructor(timeoutMs: number, outer?: AbortSignal) {
    const controller = this.#controller;
    this.#timer = setTimeout(() => controller.abort(timeoutReason()), timeoutMs);
    // Like AbortSignal.timeout's: a call still waiting does not keep the process alive.
    this.#timer.unref();
    this.#outer = outer;
    if (outer?.aborted) {
      controller.abort(outer.reason);
    } else if (outer) {
      this.#onOuterAbort = () => controller.abort(outer.reason);
      outer.addEventListener('abort', this.#onOuterAbort, { once: true });
    }
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** The call settled: nothing is left behind, whether or not the signal aborted. */
  end(): void {
    clearTimeout(this.#timer);
    if (this.#onOuterAbort) this.#outer?.removeEventListener('abort', this.#onOuterAbort);
  }
}

function timeoutReason(): DOMException {
  return new DOMException('The operation was aborted due to timeout', 'TimeoutError');
}
