/**
 * What the kit's own abort-aware code reads of a signal (and what undici reads of one: any object
 * with `addEventListener`). A real `AbortSignal` has all of it.
 */
export interface AbortSignalLike {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { readonly once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/**
 * An abort signal for the kit's own plumbing (visibility heartbeats, the forwarder's POST): the
 * part of `AbortSignal` that `AbortSignalLike` names, and `abort`. Node 20 takes 4–6 µs to make
 * an `AbortSignal` (Node 22 and 24 well under 1 µs); made for every message, that was 8 µs of CPU
 * per event there (docs/performance-log.md). Handlers still get a real one, made when they ask.
 *
 * As on an `AbortSignal`: each listener runs once, at the abort, in the order added; a listener
 * added twice runs once; one added after the abort never runs; one that throws does not stop the
 * others and is reported as an uncaught exception, as `EventTarget` reports it.
 */
export class AbortNotice implements AbortSignalLike {
  #aborted = false;
  #reason: unknown = undefined;
  #listeners: (() => void)[] = [];

  get aborted(): boolean {
    return this.#aborted;
  }

  get reason(): unknown {
    return this.#reason;
  }

  abort(reason: unknown): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#reason = reason;
    const listeners = this.#listeners;
    this.#listeners = [];
    for (const listener of listeners) {
      try {
        listener();
      } catch (error) {
        process.nextTick(() => {
          throw error;
        });
      }
    }
  }

  addEventListener(_type: 'abort', listener: () => void): void {
    if (this.#aborted || this.#listeners.includes(listener)) return;
    this.#listeners.push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const at = this.#listeners.indexOf(listener);
    if (at !== -1) this.#listeners.splice(at, 1);
  }
}
