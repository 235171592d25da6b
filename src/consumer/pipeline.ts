import type { Logger } from 'pino';
import {
  DeadLetterError,
  type ErrorCode,
  errorMessage,
  isPartnerEventsError,
  RetryLaterError,
  VerificationError,
} from '../core/errors.js';
import { isKnownEventType, type UnknownEvent } from '../core/events/schemas.js';
import { validateEvent } from '../core/events/validate.js';
import { backoffDelay, decide, type Outcome, type RetryPolicy } from '../core/outcome.js';
import type { Keyring } from '../core/secrets.js';
import type { RawMessage } from '../core/source-adapter.js';
import { type VerifiedMessage, verifyMessage } from '../core/verify.js';
import type { DedupeStore } from '../dedupe/types.js';
import { type AbortCode, HandlerRun } from './handler-run.js';
import { LeaseKeeper } from './lease-keeper.js';
import type { Handler, HandlerContext, Router } from './router.js';
import { DEFAULT_MAX_ABANDONED_CLAIMS } from './settings.js';

export interface PipelineSettings {
  readonly maxEnvelopeBytes: number;
  readonly maxAgeSeconds: number;
  readonly maxFutureSkewSeconds: number;
  readonly strictAge: boolean;
  readonly checkAge: boolean;
  readonly retry: RetryPolicy;
  readonly leaseMs: number;
  readonly retentionMs: number;
  readonly handlerTimeoutMs: number;
  readonly unknownEventTypes: 'ack' | 'dead-letter';
  /** Default 3; 0 turns the check off (see the consumer setting). */
  readonly maxAbandonedClaims?: number;
}

export interface PipelineDeps {
  readonly keyring: Keyring;
  readonly dedupe: DedupeStore;
  readonly router: Router;
  readonly logger: Logger;
  readonly now?: () => number;
}

/** The outcome of one message with what was learned about it on the way. */
export interface ProcessResult {
  readonly outcome: Outcome;
  /** Known once the signature verified (ids from the signed body); undefined before. */
  readonly eventId: string | undefined;
  readonly eventType: string | undefined;
  readonly keyId: string | undefined;
  /** `signed_at` (Unix seconds) of a verified event. */
  readonly signedAt: number | undefined;
  readonly attempt: number;
  /** Receipt to outcome: verification, dedupe and handlers. */
  readonly durationMs: number;
  /** The handlers alone, when they ran. */
  readonly handlerDurationMs: number | undefined;
}

type Fail = { code: ErrorCode; reason: string; delayMs?: number };
/** A handler failure; `running` is the handler still going after a timeout or a lost lease. */
type HandlerFail = Fail & { running?: PromiseLike<unknown> };

/**
 * One message in, one outcome out; never throws. Order (DESIGN.md): envelope → age → HMAC →
 * body → id copies → claim → schema → handlers → complete. Nothing about a message that failed
 * verification reaches the dedupe store.
 */
export class Pipeline {
  readonly #settings: PipelineSettings;
  readonly #deps: PipelineDeps;
  readonly #now: () => number;
  readonly #keeper: LeaseKeeper;
  #aborted = false;

  constructor(settings: PipelineSettings, deps: PipelineDeps) {
    this.#settings = settings;
    this.#deps = deps;
    this.#now = deps.now ?? Date.now;
    this.#keeper = new LeaseKeeper({
      leaseMs: settings.leaseMs,
      handlerTimeoutMs: settings.handlerTimeoutMs,
      extend: (run) => deps.dedupe.extend(run.eventId, run.token, settings.leaseMs),
    });
  }

  async process(message: RawMessage, signal?: AbortSignal): Promise<ProcessResult> {
    const started = performance.now();
    const s = this.#settings;
    let handlerMs: number | undefined;
    const finish = (outcome: Outcome, verified?: VerifiedMessage): ProcessResult => ({
      outcome,
      eventId: verified?.eventId,
      eventType: verified?.eventType,
      keyId: verified?.keyId,
      signedAt: verified?.signedAt,
      attempt: message.attempt,
      durationMs: performance.now() - started,
      handlerDurationMs: handlerMs,
    });
    const fail = (f: Fail, verified?: VerifiedMessage) =>
      finish(decide(f.code, f.reason, message.attempt, s.retry, f.delayMs), verified);

    if (message.rejection) return fail(message.rejection);
    let verified: VerifiedMessage;
    try {
      verified = verifyMessage(message.body, {
        keyring: this.#deps.keyring,
        now: this.#now(),
        enqueuedAt: message.enqueuedAt,
        strictAge: s.strictAge,
        checkAge: s.checkAge,
        maxAgeSeconds: s.maxAgeSeconds,
        maxFutureSkewSeconds: s.maxFutureSkewSeconds,
        maxEnvelopeBytes: s.maxEnvelopeBytes,
      });
    } catch (error) {
      if (error instanceof VerificationError) return fail({ code: error.code, reason: error.message });
      return fail({ code: 'MALFORMED_ENVELOPE', reason: 'unexpected verification failure' });
    }

    const { eventType } = verified;
    let handlers: readonly Handler<never>[];
    if (isKnownEventType(eventType)) {
      handlers = this.#deps.router.match(eventType);
    } else {
      const unknown = this.#deps.router.unknownHandler;
      if (unknown) {
        handlers = [unknown];
      } else if (s.unknownEventTypes === 'dead-letter') {
        return fail(
          { code: 'UNKNOWN_EVENT_TYPE', reason: `event type "${eventType}" is not in the catalog` },
          verified,
        );
      } else {
        this.#deps.logger.warn(
          { event_id: verified.eventId, event_type: eventType },
          'event type not in the catalog and no unknown handler: acked without handling',
        );
        return finish({ kind: 'ack', result: 'ignored' }, verified);
      }
    }
    // Nobody wants this type: nothing to de-duplicate or run.
    if (handlers.length === 0) return finish({ kind: 'ack', result: 'ignored' }, verified);

    const { dedupe } = this.#deps;
    let claim: Awaited<ReturnType<DedupeStore['claim']>>;
    try {
      claim = await dedupe.claim(verified.eventId, s.leaseMs);
    } catch (error) {
      return fail({ code: 'DEDUPE_UNAVAILABLE', reason: errorMessage(error) }, verified);
    }
    if (claim.status === 'duplicate') return finish({ kind: 'ack', result: 'duplicate' }, verified);
    if (claim.status === 'in_progress') {
      return fail(
        {
          code: 'IN_PROGRESS',
          reason: 'another delivery of this event is being handled right now',
          // Usually the holder finishes in milliseconds: look again soon, backing off per attempt.
          delayMs: Math.max(100, Math.min(claim.retryAfterMs, backoffDelay(message.attempt, s.retry))),
        },
        verified,
      );
    }
    const { token } = claim;
    const abandoned = claim.abandoned ?? 0;
    const maxAbandoned = s.maxAbandonedClaims ?? DEFAULT_MAX_ABANDONED_CLAIMS;
    if (abandoned > 0) {
      // Each one is a worker that died or hung mid-event: worth an operator's eye before the limit.
      this.#deps.logger.warn(
        { event_id: verified.eventId, event_type: eventType, abandoned, limit: maxAbandoned },
        'an earlier handling of this event was abandoned (its worker died or hung)',
      );
    }
    if (maxAbandoned > 0 && abandoned >= maxAbandoned) {
      // Handling this event keeps killing (or hanging) the worker: stop feeding it to it.
      await this.#release(verified.eventId, token);
      return fail(
        {
          code: 'HANDLER_ABANDONED',
          reason: `its handling was abandoned ${abandoned} times (the worker died or hung while handling it); handlers not run again`,
        },
        verified,
      );
    }

    const validation = validateEvent(eventType, verified.payload);
    if (!validation.ok) {
      await this.#release(verified.eventId, token);
      return fail({ code: validation.code, reason: validation.reason }, verified);
    }

    const handlersStarted = performance.now();
    const failure = await this.#runHandlers(handlers, validation.event, verified, message, token, signal);
    handlerMs = performance.now() - handlersStarted;
    if (failure) {
      const { running, ...reported } = failure;
      if (running) {
        // A timed-out or lease-lost handler may still be running: keep the claim until it stops
        // (at most until the lease runs out), so no second copy starts alongside it. Released
        // then, the claim does not count as abandoned.
        const release = () => this.#release(verified.eventId, token);
        running.then(release, release);
      } else {
        await this.#release(verified.eventId, token);
      }
      return fail(reported, verified);
    }

    try {
      const completed = await dedupe.complete(verified.eventId, token, s.retentionMs);
      if (!completed) {
        this.#deps.logger.warn(
          { event_id: verified.eventId, event_type: eventType },
          'lease was taken over before completion: this event may have been handled twice',
        );
      }
    } catch (error) {
      // The handlers succeeded: acking is right. Not recording "done" only matters if another
      // copy arrives later, which then runs the handlers again (the documented crash window).
      this.#deps.logger.error(
        { event_id: verified.eventId, err: errorMessage(error) },
        'could not record event as done in the dedupe store; acking anyway',
      );
    }
    return finish({ kind: 'ack', result: 'handled' }, verified);
  }

  async #runHandlers(
    handlers: readonly Handler<never>[],
    event: unknown,
    verified: VerifiedMessage,
    message: RawMessage,
    token: string,
    external: AbortSignal | undefined,
  ): Promise<HandlerFail | undefined> {
    const s = this.#settings;
    if (this.#aborted || external?.aborted) return abortFailure(abortCodeOf(external?.reason), s);
    const run = new HandlerRun(verified.eventId, token, {
      now: Date.now(),
      timeoutMs: s.handlerTimeoutMs,
      leaseMs: s.leaseMs,
    });
    const onExternal = () => run.abort(abortCodeOf(external?.reason));
    external?.addEventListener('abort', onExternal, { once: true });
    this.#keeper.start(run);
    const context = this.#context(verified, message, run);
    try {
      for (const handler of handlers) {
        const result = handler(event as never, context);
        if (isPromiseLike(result)) {
          await run.wait(result);
          // Timed out or lease lost while the handler's promise was pending: it may still be
          // running. (At a shutdown the process is about to end: the claim is released at once.)
          if (run.abortCode && run.abortCode !== 'SHUTDOWN') {
            return { ...abortFailure(run.abortCode, s), running: result };
          }
        }
        if (run.abortCode) return abortFailure(run.abortCode, s);
      }
      return undefined;
    } catch (error) {
      return run.abortCode ? abortFailure(run.abortCode, s) : handlerFailure(error);
    } finally {
      this.#keeper.finish(run);
      external?.removeEventListener('abort', onExternal);
    }
  }

  /** Aborts every running handler (the consumer's shutdown deadline passed). */
  abortAll(): void {
    this.#aborted = true;
    this.#keeper.abortAll('SHUTDOWN');
  }

  #context(verified: VerifiedMessage, message: RawMessage, run: HandlerRun): HandlerContext {
    const parent = this.#deps.logger;
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

  async #release(eventId: string, token: string): Promise<void> {
    try {
      await this.#deps.dedupe.release(eventId, token);
    } catch (error) {
      // The lease then simply expires; the next delivery waits for it.
      this.#deps.logger.warn(
        { event_id: eventId, err: errorMessage(error) },
        'could not release dedupe claim',
      );
    }
  }
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

/** The abort code an external signal carries (`abort('LEASE_LOST')`), SHUTDOWN otherwise. */
function abortCodeOf(reason: unknown): AbortCode {
  return reason === 'LEASE_LOST' || reason === 'HANDLER_TIMEOUT' ? reason : 'SHUTDOWN';
}

function abortFailure(code: AbortCode, s: PipelineSettings): Fail {
  switch (code) {
    case 'SHUTDOWN':
      return { code, reason: 'consumer stopped before the handler finished', delayMs: 0 };
    case 'HANDLER_TIMEOUT':
      // The handler may still be running: retry only once its lease has lapsed.
      return { code, reason: `handler ran longer than ${s.handlerTimeoutMs}ms`, delayMs: s.leaseMs };
    case 'LEASE_LOST':
      return { code, reason: 'lease on the event or message could not be kept', delayMs: s.leaseMs };
  }
}

function handlerFailure(error: unknown): Fail {
  if (
    error instanceof RetryLaterError ||
    (isPartnerEventsError(error) && error.code === 'HANDLER_REQUESTED_RETRY')
  ) {
    const delayMs = (error as RetryLaterError).delayMs;
    return delayMs === undefined
      ? { code: 'HANDLER_REQUESTED_RETRY', reason: error.message }
      : { code: 'HANDLER_REQUESTED_RETRY', reason: error.message, delayMs };
  }
  if (
    error instanceof DeadLetterError ||
    (isPartnerEventsError(error) && error.code === 'HANDLER_REQUESTED_DEAD_LETTER')
  ) {
    return { code: 'HANDLER_REQUESTED_DEAD_LETTER', reason: (error as Error).message };
  }
  // A forward's own failure code (a redirect) says more than HANDLER_FAILED; retried the same way.
  if (isPartnerEventsError(error) && error.code === 'FORWARD_REDIRECTED') {
    return { code: error.code, reason: error.message };
  }
  return { code: 'HANDLER_FAILED', reason: `handler threw: ${errorMessage(error)}` };
}

export type { UnknownEvent };
