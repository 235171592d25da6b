import type { Logger } from 'pino';
import { ABORT_CODES, type AbortCause, type Facts, isAbortCause } from '../core/outcome.js';
import type { RawMessage } from '../core/source-adapter.js';
import type { DeliveryTrace, HandlerSpan } from '../core/tracing.js';
import type { VerifiedMessage } from '../core/verify.js';
import type { DedupeStore } from '../dedupe/types.js';
import { handlerContext } from './handler-context.js';
import { HandlerRun } from './handler-run.js';
import { LeaseKeeper } from './lease-keeper.js';
import type { Handler } from './router.js';

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

  async run(
    handlers: readonly Handler<never>[],
    event: unknown,
    verified: VerifiedMessage,
    message: RawMessage,
    token: string,
    external: AbortSignal | undefined,
    trace?: DeliveryTrace,
  ): Promise<Facts> {
    if (this.#aborted || external?.aborted) return { kind: 'handler-aborted', cause: causeOf(external) };
    const run = new HandlerRun(verified.eventId, token, {
      now: Date.now(),
      timeoutMs: this.#timing.handlerTimeoutMs,
      leaseMs: this.#timing.leaseMs,
    });
    const onExternal = () => run.abort(causeOf(external));
    external?.addEventListener('abort', onExternal, { once: true });
    const context = handlerContext(verified, message, run, this.#logger);
    let span: HandlerSpan | undefined;
    try {
      for (let i = 0; i < handlers.length; i++) {
        const handler = handlers[i] as Handler<never>;
        span = trace?.handler(i, handler.name);
        const result = span ? span.call(handler, event as never, context) : handler(event as never, context);
        if (isPromiseLike(result)) {
          // Watched (deadline, lease extension) only while something is pending: a handler that
          // returned synchronously is done, and a timer armed and cleared per event costs CPU.
          this.#keeper.start(run);
          await run.wait(result);
          // Timed out or lease lost while the handler's promise was pending: it may still be
          // running. (At a shutdown the process is about to end: the claim is released at once.)
          const cause = run.abortCause;
          if (cause && cause !== 'shutdown') return { kind: 'handler-aborted', cause, running: result };
        }
        if (run.abortCause) return { kind: 'handler-aborted', cause: run.abortCause };
        span?.end();
      }
      return HANDLED;
    } catch (error) {
      const cause = run.abortCause;
      span?.end(cause ? ABORT_CODES[cause] : error);
      return cause ? { kind: 'handler-aborted', cause } : { kind: 'handler-threw', error };
    } finally {
      span?.end(run.abortCause && ABORT_CODES[run.abortCause]);
      this.#keeper.finish(run);
      external?.removeEventListener('abort', onExternal);
    }
  }

  /** Aborts every running handler and any later run (the consumer's shutdown deadline passed). */
  abortAll(): void {
    this.#aborted = true;
    this.#keeper.abortAll('shutdown');
  }
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

/** Why an external signal aborted: the typed cause it carries, a shutdown otherwise. */
function causeOf(external: AbortSignal | undefined): AbortCause {
  const reason: unknown = external?.reason;
  return isAbortCause(reason) ? reason : 'shutdown';
}
