import type { Logger } from 'pino';
import { errorMessage, VerificationError } from '../core/errors.js';
import { isKnownEventType, type UnknownEvent } from '../core/events/schemas.js';
import { validateEvent } from '../core/events/validate.js';
import { type Decision, decide, type Facts, type Outcome, type RetryPolicy } from '../core/outcome.js';
import { redact } from '../core/redact.js';
import type { Keyring } from '../core/secrets.js';
import type { RawMessage } from '../core/source-adapter.js';
import type { DeliveryTrace } from '../core/tracing.js';
import { type VerifiedMessage, verifyMessage } from '../core/verify.js';
import type { ClaimResult, DedupeStore } from '../dedupe/types.js';
import { HandlerRunner } from './handler-runner.js';
import type { Handler, Router } from './router.js';
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

/**
 * Whether the dedupe store answered for this message: `not-asked` when it stopped before the
 * claim (verification, routing), `unavailable` when the claim failed.
 */
export type StoreContact = 'answered' | 'unavailable' | 'not-asked';

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
  readonly store: StoreContact;
}

const DUPLICATE: Facts = { kind: 'duplicate' };

/**
 * One message in, one outcome out; never throws. Order (docs/concepts.md, "The pipeline"):
 * envelope → age → HMAC → body → id copies → route → claim → schema → handlers → complete.
 * Nothing about a message that failed verification reaches the dedupe store. Each step reports
 * what it learned; `decide` (src/core/outcome.ts) turns that into the outcome and says what
 * becomes of the claim.
 *
 * long: the hot path and its rare exits (unverified, unrouted, taken over, complete failed, let
 * go) share one message's state and the settings; the steps themselves live in core (verify,
 * decide), handler-runner.ts and the store, and the common path avoids helper promise hops.
 */
export class Pipeline {
  readonly #settings: PipelineSettings;
  readonly #deps: PipelineDeps;
  readonly #now: () => number;
  readonly #handlers: HandlerRunner;

  constructor(settings: PipelineSettings, deps: PipelineDeps) {
    this.#settings = settings;
    this.#deps = deps;
    this.#now = deps.now ?? Date.now;
    this.#handlers = new HandlerRunner(settings, deps.dedupe, deps.logger);
  }

  /**
   * `trace`: the delivery's span (src/core/tracing.ts), for the steps' and handlers' child spans;
   * the caller ends it once the outcome is final (after the dead-letter write). Absent: no
   * tracing code runs.
   */
  async process(message: RawMessage, signal?: AbortSignal, trace?: DeliveryTrace): Promise<ProcessResult> {
    const started = performance.now();
    const routed = this.#verifyAndRoute(message, started, trace);
    if (!('handlers' in routed)) return routed;
    const { verified, handlers } = routed;

    const { dedupe } = this.#deps;
    const s = this.#settings;
    let claim: ClaimResult;
    const claiming = trace?.step('dedupe.claim');
    try {
      claim = await dedupe.claim(verified.eventId, s.leaseMs);
    } catch (error) {
      claiming?.end(error);
      return this.#result(message, started, { kind: 'store-unavailable', error }, 'unavailable', verified);
    }
    claiming?.end(undefined, claim.status);
    if (claim.status !== 'claimed') {
      return this.#result(message, started, notClaimed(claim), 'answered', verified);
    }
    const { token } = claim;
    let facts = this.#abandoned(verified, claim.abandoned ?? 0);
    let handlerMs: number | undefined;
    if (facts === undefined) {
      const validation = validateEvent(verified.eventType, verified.payload);
      if (validation.ok) {
        const handlersStarted = performance.now();
        facts = await this.#handlers.run(handlers, validation.event, verified, message, token, signal, trace);
        handlerMs = performance.now() - handlersStarted;
      } else {
        facts = { kind: 'schema-invalid', reason: validation.reason };
      }
    }
    const decision = decide(facts, message.attempt, s);
    if (decision.claim === 'complete') {
      // Awaited here rather than in a helper: one promise hop fewer per handled event.
      const completing = trace?.step('dedupe.complete');
      try {
        if (!(await dedupe.complete(verified.eventId, token, s.retentionMs))) this.#takenOver(verified);
        completing?.end();
      } catch (error) {
        completing?.end(error);
        this.#completeFailed(verified, error);
      }
    } else {
      await this.#letGo(decision, facts, verified.eventId, token);
    }
    return this.#finish(message, started, decision.outcome, 'answered', verified, handlerMs);
  }

  /** The steps before the store: a message the source already rejected, verification, routing. */
  #verifyAndRoute(
    message: RawMessage,
    started: number,
    trace: DeliveryTrace | undefined,
  ): { verified: VerifiedMessage; handlers: readonly Handler<never>[] } | ProcessResult {
    if (message.rejection) {
      return this.#result(message, started, { kind: 'rejected', ...message.rejection }, 'not-asked');
    }
    let verified: VerifiedMessage;
    const verifying = trace?.step('verify');
    try {
      verified = this.#verify(message);
    } catch (error) {
      verifying?.end(error);
      return this.#unverified(message, started, error);
    }
    if (trace) {
      verifying?.end();
      trace.verified(verified);
    }
    const handlers = this.#route(verified);
    if (handlers === undefined) return this.#unrouted(message, started, verified);
    return { verified, handlers };
  }

  /** Aborts every running handler (the consumer's shutdown deadline passed). */
  abortAll(): void {
    this.#handlers.abortAll();
  }

  #verify(message: RawMessage): VerifiedMessage {
    const s = this.#settings;
    return verifyMessage(message.body, {
      keyring: this.#deps.keyring,
      now: this.#now(),
      enqueuedAt: message.enqueuedAt,
      strictAge: s.strictAge,
      checkAge: s.checkAge,
      maxAgeSeconds: s.maxAgeSeconds,
      maxFutureSkewSeconds: s.maxFutureSkewSeconds,
      maxEnvelopeBytes: s.maxEnvelopeBytes,
    });
  }

  #unverified(message: RawMessage, started: number, error: unknown): ProcessResult {
    if (!(error instanceof VerificationError)) {
      // A bug in the kit, not a bad message: say so loudly; the message is retried, not dead-lettered.
      this.#deps.logger.error(
        {
          message_id: message.id,
          attempt: message.attempt,
          err: errorMessage(error),
          stack: error instanceof Error && error.stack ? redact(error.stack) : undefined,
        },
        'unexpected exception while verifying a message (a bug in partner-health-events): it will be retried',
      );
    }
    return this.#result(message, started, { kind: 'unverified', error }, 'not-asked');
  }

  /** The handlers for a verified event; undefined when nobody wants it. */
  #route(verified: VerifiedMessage): readonly Handler<never>[] | undefined {
    const { router } = this.#deps;
    if (!isKnownEventType(verified.eventType)) {
      return router.unknownHandler ? [router.unknownHandler] : undefined;
    }
    const handlers = router.match(verified.eventType);
    return handlers.length > 0 ? handlers : undefined;
  }

  #unrouted(message: RawMessage, started: number, verified: VerifiedMessage): ProcessResult {
    const { eventId, eventType } = verified;
    const known = isKnownEventType(eventType);
    const decision = decide({ kind: 'unrouted', eventType, known }, message.attempt, this.#settings);
    if (!known && decision.outcome.kind === 'ack') {
      this.#deps.logger.warn(
        { event_id: eventId, event_type: eventType },
        'event type not in the catalog and no unknown handler: acked without handling',
      );
    }
    return this.#finish(message, started, decision.outcome, 'not-asked', verified, undefined);
  }

  /** Facts that stop an event whose claims were abandoned too often; warns of each abandoned one. */
  #abandoned(verified: VerifiedMessage, abandoned: number): Facts | undefined {
    if (abandoned === 0) return undefined;
    const limit = this.#settings.maxAbandonedClaims ?? DEFAULT_MAX_ABANDONED_CLAIMS;
    // Each one is a worker that died or hung mid-event: worth an operator's eye before the limit.
    this.#deps.logger.warn(
      { event_id: verified.eventId, event_type: verified.eventType, abandoned, limit },
      'an earlier handling of this event was abandoned (its worker died or hung)',
    );
    // Handling this event keeps killing (or hanging) the worker: stop feeding it to it.
    return limit > 0 && abandoned >= limit ? { kind: 'abandoned', times: abandoned } : undefined;
  }

  #takenOver(verified: VerifiedMessage): void {
    this.#deps.logger.warn(
      { event_id: verified.eventId, event_type: verified.eventType },
      'lease was taken over before completion: this event may have been handled twice',
    );
  }

  #completeFailed(verified: VerifiedMessage, error: unknown): void {
    // The handlers succeeded: acking is right. Not recording "done" only matters if another
    // copy arrives later, which then runs the handlers again (the documented crash window).
    this.#deps.logger.error(
      { event_id: verified.eventId, err: errorMessage(error) },
      'could not record event as done in the dedupe store; acking anyway',
    );
  }

  /** Releases the claim at once, or once the handler that may still run has stopped. */
  async #letGo(decision: Decision, facts: Facts, eventId: string, token: string): Promise<void> {
    if (decision.claim === 'release') return this.#release(eventId, token);
    if (decision.claim !== 'release-when-stopped') return;
    // Released then, the claim does not count as abandoned.
    const running = facts.kind === 'handler-aborted' ? facts.running : undefined;
    const release = () => this.#release(eventId, token);
    if (running) running.then(release, release);
    else await release();
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

  #result(
    message: RawMessage,
    started: number,
    facts: Facts,
    store: StoreContact,
    verified?: VerifiedMessage,
  ): ProcessResult {
    const { outcome } = decide(facts, message.attempt, this.#settings);
    return this.#finish(message, started, outcome, store, verified, undefined);
  }

  #finish(
    message: RawMessage,
    started: number,
    outcome: Outcome,
    store: StoreContact,
    verified: VerifiedMessage | undefined,
    handlerMs: number | undefined,
  ): ProcessResult {
    return {
      outcome,
      eventId: verified?.eventId,
      eventType: verified?.eventType,
      keyId: verified?.keyId,
      signedAt: verified?.signedAt,
      attempt: message.attempt,
      durationMs: performance.now() - started,
      handlerDurationMs: handlerMs,
      store,
    };
  }
}

/** What the store's answer says when it is not a plain "claimed". */
function notClaimed(claim: Exclude<ClaimResult, { status: 'claimed' }>): Facts {
  return claim.status === 'duplicate' ? DUPLICATE : { kind: 'in-progress', retryAfterMs: claim.retryAfterMs };
}

export type { UnknownEvent };
