import type { Logger } from 'pino';
import type { AbortSignalLike } from '../core/abort-notice.js';
import type { RawMessage } from '../core/source-adapter.js';
import type { VerifiedMessage } from '../core/verify.js';
import type { HandlerRun } from './handler-run.js';
import type { HandlerContext } from './router.js';

/**
 * What a handler of `verified` receives besides the event. A class, not an object literal with
 * getters: one allocation per event instead of an object and two closures. Its signal and logger
 * are made on first use (most handlers never look at them, and neither is free).
 */
class EventContext implements HandlerContext {
  readonly eventId: string;
  readonly eventType: string;
  readonly signedAt: number;
  readonly keyId: string;
  readonly attempt: number;
  readonly messageId: string;
  readonly enqueuedAt: number | undefined;
  readonly rawBody: string;
  readonly #run: HandlerRun;
  readonly #parent: Logger;
  #logger: Logger | undefined;

  constructor(verified: VerifiedMessage, message: RawMessage, run: HandlerRun, parent: Logger) {
    this.eventId = verified.eventId;
    this.eventType = verified.eventType;
    this.signedAt = verified.signedAt;
    this.keyId = verified.keyId;
    this.attempt = message.attempt;
    this.messageId = message.id;
    this.enqueuedAt = message.enqueuedAt;
    this.rawBody = verified.envelope.body;
    this.#run = run;
    this.#parent = parent;
  }

  get signal(): AbortSignal {
    return this.#run.signal;
  }

  /** The run's `notice` (not a member: a handler sees only `HandlerContext`). */
  static noticeOf(context: EventContext): AbortSignalLike {
    return context.#run.notice;
  }

  get logger(): Logger {
    this.#logger ??= this.#parent.child({
      event_id: this.eventId,
      event_type: this.eventType,
      attempt: this.attempt,
    });
    return this.#logger;
  }
}

/**
 * Aborts when `context.signal` would, for the kit's own handlers (the forwarder), without making an
 * AbortSignal for every event (src/core/abort-notice.ts). A context the kit did not make (a test's
 * own) gives its `signal`.
 */
export function abortOf(context: HandlerContext): AbortSignalLike {
  return context instanceof EventContext ? EventContext.noticeOf(context) : context.signal;
}

export function handlerContext(
  verified: VerifiedMessage,
  message: RawMessage,
  run: HandlerRun,
  parent: Logger,
): HandlerContext {
  return new EventContext(verified, message, run, parent);
}
