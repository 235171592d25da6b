import type { Logger } from 'pino';
import type { AbortSignalLike } from '../core/abort-notice.js';
import { ABORT_CODES, type AbortCause, type Facts, isAbortCause } from '../core/outcome.js';
import type { RawMessage } from '../core/source-adapter.js';
import type { DeliveryTrace, HandlerSpan } from '../core/tracing.js';
import type { VerifiedMessage } from '../core/verify.js';
import type { DedupeStore } from '../dedupe/types.js';
import { handlerContext } from './handler-context.js';
import { HandlerRun } from './handler-run.js';
import { LeaseKeeper } from './lease-keeper.js';
import type { Handler, HandlerContext } from './router.js';

const HANDLED: Facts = { kind: 'handled' };

/**
 * Runs an event's handlers in registration order under a deadline and a kept dedupe lease (one
 * LeaseKeeper timer for all runs), and reports how they ended: handled, threw, or aborted with
 * its cause (timeout, lease lost, the consumer's signal, the shutdown deadline).
 */
export class HandlerRunner {
  readonly #timing: { readonly handlerTimeoutMs: number; readonly leaseMs: number };
  readonly #logger: Logger;
  readonly #keeper: LeaseKeeper;
  #aborted = false;

  constructor(
    timing: { readonly handlerTimeoutMs: number; readonly leaseMs: number },
    dedupe: DedupeStore,
    logger: Logger,
  ) {
    this.#timing = timing;
    this.#logger = logger;
    this.#keeper = new LeaseKeeper({
      leaseMs: timing.leaseMs,
      handlerTimeoutMs: timing.handlerTimeoutMs,
      extend: (run) => dedupe.extend(run.eventId, run.token, timing.leaseMs),
    });
  }

  /**
   * Runs the handlers and reports how they ended. Synchronous while every handler returns
   * synchronously (no promise, no timer: a handler that does its work in place costs nothing
   * more); from the first handler that returns a promise on, the run continues asynchronously,
   * watched by the deadline and the kept lease.
   */
  run(
    handlers: readonly Handler<never>[],
    event: unknown,
    verified: VerifiedMessage,
    message: RawMessage,
    token: string,
    external: AbortSignalLike | undefined,
    trace?: DeliveryTrace,
  ): Facts | Promise<Facts> {
    if (this.#aborted || external?.aborted) return { kind: 'handler-aborted', cause: causeOf(external) };
    const run = new HandlerRun(verified.eventId, token, Date.now(), this.#timing);
    const onExternal = external && (() => run.abort(causeOf(external)));
    if (onExternal) external?.addEventListener('abort', onExternal, { once: true });
    const context = handlerContext(verified, message, run, this.#logger);
    for (let i = 0; i < handlers.length; i++) {
      const handler = handlers[i] as Handler<never>;
      const span = trace?.handler(i, handler.name);
      let result: unknown;
      try {
        result = callHandler(handler, event, context, span);
      } catch (error) {
        this.#done(run, external, onExternal);
        return threw(run, span, error);
      }
      if (isPromiseLike(result)) {
        const calls: HandlerCalls = { handlers, event, context, trace, run, external, onExternal };
        return this.#continue(calls, i, result, span);
      }
      const cause = run.abortCause;
      if (cause) {
        span?.end(ABORT_CODES[cause]);
        this.#done(run, external, onExternal);
        return { kind: 'handler-aborted', cause };
      }
      span?.end();
    }
    this.#done(run, external, onExternal);
    return HANDLED;
  }

  /** The rest of a run whose handler `index` returned `pending`. */
  async #continue(
    calls: HandlerCalls,
    index: number,
    pending: PromiseLike<unknown>,
    firstSpan: HandlerSpan | undefined,
  ): Promise<Facts> {
    const { run } = calls;
    let span = firstSpan;
    let result: unknown = pending;
    try {
      for (let i = index; ; ) {
        if (isPromiseLike(result)) {
          // Watched (deadline, lease extension) only while something is pending.
          this.#keeper.start(run);
          await run.wait(result);
          // Timed out or lease lost while the handler's promise was pending: it may still be
          // running. (At a shutdown the process is about to end: the claim is released at once.)
          const cause = run.abortCause;
          if (cause && cause !== 'shutdown') return { kind: 'handler-aborted', cause, running: result };
        }
        if (run.abortCause) return { kind: 'handler-aborted', cause: run.abortCause };
        span?.end();
        if (++i === calls.handlers.length) return HANDLED;
        span = calls.trace?.handler(i, (calls.handlers[i] as Handler<never>).name);
        result = callHandler(calls.handlers[i] as Handler<never>, calls.event, calls.context, span);
      }
    } catch (error) {
      return threw(run, span, error);
    } finally {
      span?.end(run.abortCause && ABORT_CODES[run.abortCause]);
      this.#done(run, calls.external, calls.onExternal);
    }
  }

  #done(run: HandlerRun, external: AbortSignalLike | undefined, onExternal: (() => void) | undefined): void {
    this.#keeper.finish(run);
    if (onExternal) external?.removeEventListener('abort', onExternal);
  }

  /** Aborts every running handler and any later run (the consumer's shutdown deadline passed). */
  abortAll(): void {
    this.#aborted = true;
    this.#keeper.abortAll('shutdown');
  }
}

/** A run that went asynchronous: its handlers and what each is called with. */
interface HandlerCalls {
  readonly handlers: readonly Handler<never>[];
  readonly event: unknown;
  readonly context: HandlerContext;
  readonly trace: DeliveryTrace | undefined;
  readonly run: HandlerRun;
  readonly external: AbortSignalLike | undefined;
  readonly onExternal: (() => void) | undefined;
}

/** Calls a handler with the event and its context, inside its span when there is one. */
function callHandler(
  handler: Handler<never>,
  event: unknown,
  context: HandlerContext,
  span: HandlerSpan | undefined,
): unknown {
  return span ? span.call(handler, event as never, context) : handler(event as never, context);
}

/** A handler threw (or rejected): an abort that caused it says more than the error. */
function threw(run: HandlerRun, span: HandlerSpan | undefined, error: unknown): Facts {
  const cause = run.abortCause;
  span?.end(cause ? ABORT_CODES[cause] : error);
  return cause ? { kind: 'handler-aborted', cause } : { kind: 'handler-threw', error };
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

/** Why an external signal aborted: the typed cause it carries, a shutdown otherwise. */
function causeOf(external: AbortSignalLike | undefined): AbortCause {
  const reason: unknown = external?.reason;
  return isAbortCause(reason) ? reason : 'shutdown';
}
