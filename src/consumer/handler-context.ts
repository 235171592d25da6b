import type { Logger } from 'pino';
import type { RawMessage } from '../core/source-adapter.js';
import type { VerifiedMessage } from '../core/verify.js';
import type { HandlerRun } from './handler-run.js';
import type { HandlerContext } from './router.js';

/** What a handler of `verified` receives besides the event; its signal and logger made on first use. */
export function handlerContext(
  verified: VerifiedMessage,
  message: RawMessage,
  run: HandlerRun,
  parent: Logger,
): HandlerContext {
  let logger: Logger | undefined;
  return {
    eventId: verified.eventId,
    eventType: verified.eventType,
    signedAt: verified.signedAt,
    keyId: verified.keyId,
    attempt: message.attempt,
    messageId: message.id,
    enqueuedAt: message.enqueuedAt,
    rawBody: verified.envelope.body,
    get signal() {
      return run.signal;
    },
    // Created on first use: most handlers never log, and a child logger is not free.
    get logger() {
      logger ??= parent.child({
        event_id: verified.eventId,
        event_type: verified.eventType,
        attempt: message.attempt,
      });
      return logger;
    },
  };
}
