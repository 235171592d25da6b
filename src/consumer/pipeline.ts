import type { Logger } from 'pino';
import type { AbortSignalLike } from '../core/abort-notice.js';
import { errorMessage, VerificationError } from '../core/errors.js';
import { isKnownEventType, type UnknownEvent } from '../core/events/schemas.js';
import { validateEvent } from '../core/events/validate.js';
import { type Decision, decide, type Facts, type Outcome, type RetryPolicy } from '../core/outcome.js';
import { redact } from '../core/redact.js';
import type { Keyring } from '../core/secrets.js';
import { messageSize, type RawMessage } from '../core/source-adapter.js';
import type { DeliveryTrace, StepSpan } from '../core/tracing.js';
import { type VerifiedMessage, verifyMessage } from '../core/verify.js';
import { claimAll, claimOne, completeAll, completeOne, StoreFailure } from '../dedupe/many.js';
import type { BatchCallOptions, ClaimResult, DedupeStore, HeldClaim } from '../dedupe/types.js';
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
 * A batch whose messages hold at least this much asks the store to commit its claims and its
 * completes at once (`commitAtOnce`) instead of waiting a turn of the event loop to share the
 * commit with other batches. Waiting keeps the batch alive through that turn, which is where V8
 * runs its scheduled young-generation collections: at 64 KB bodies every one copied the whole
 * batch (5 MB at 27 in flight), and committing at once ran 8-9 % faster from memory and about
 * 20 % from fauxqs. Small batches still share commits: at 300 B with four SQS receives in flight,
 * committing every batch at once cut the calls per commit from 1.6-2.4 to 1 and ran slower
 * (docs/performance-log.md, "Large batches commit at once"). 300 B and 2 KB batches (at most 64
 * in flight: 20 and 150 KB) stay under it.
 */
export const COMMIT_AT_ONCE_BYTES = 256 * 1024;

/**
 * Each message in, one outcome out; never throws. Order (docs/concepts.md, "The pipeline"):
 * envelope → age → HMAC → body → id copies → route → claim → schema → handlers → complete.
 * Nothing about a message that failed verification reaches the dedupe store. Each step reports
 * what it learned; `decide` (src/core/outcome.ts) turns that into the outcome and says what
 * becomes of the claim. The messages of one receive go through together (`processBatch`): one
 * store call for their claims and one for their completes where the store allows it.
 *
 * long: the hot path and its rare exits (unverified, unrouted, taken over, complete failed, let
 * go) share one message's state (`InFlight`) and the settings; the steps themselves live in core
 * (verify, decide), handler-runner.ts and the store.
 */
export class Pipeline {
  readonly #settings: PipelineSettings;
  readonly #deps: PipelineDeps;
  readonly #now: () => number;
  readonly #handlers: HandlerRunner;
  /** Whether the store claims a batch in one call (`claimMany`). */
  readonly #claimsTogether: boolean;

  constructor(settings: PipelineSettings, deps: PipelineDeps) {
    this.#settings = settings;
    this.#deps = deps;
    this.#claimsTogether = typeof deps.dedupe.claimMany === 'function';
    this.#now = deps.now ?? Date.now;
    this.#handlers = new HandlerRunner(settings, deps.dedupe, deps.logger);
  }

  /**
   * `trace`: the delivery's span (src/core/tracing.ts), for the steps' and handlers' child spans;
   * the caller ends it once the outcome is final (after the dead-letter write). Absent: no
   * tracing code runs.
   */
  async process(
    message: RawMessage,
    signal?: AbortSignalLike,
    trace?: DeliveryTrace,
  ): Promise<ProcessResult> {
    let result: ProcessResult | undefined;
    await this.processBatch(
      [message],
      (_, r) => {
        result = r;
      },
      signal && [signal],
      trace && [trace],
    );
    return result as ProcessResult;
  }

  /**
   * The messages of one receive, together: each is verified and routed; then, with a store that
   * has `claimMany`, all are claimed in one call, each runs its handlers, and those that
   * succeeded at once are completed in one call; with any other store each message is claimed
   * as it is verified and goes on alone. `onResult(i, result)` reports each message as soon as
   * its result is final (a message whose handlers are still running holds back no other).
   * Resolves once every message was reported, each exactly once; never rejects. `signals` and
   * `traces` go by index.
   */
  async processBatch(
    messages: readonly RawMessage[],
    onResult: (index: number, result: ProcessResult) => void,
    signals?: readonly (AbortSignalLike | undefined)[],
    traces?: readonly (DeliveryTrace | undefined)[],
  ): Promise<void> {
    const batch = new BatchInFlight(messages.length, onResult);
    try {
      await this.#processAll(messages, batch, signals, traces);
    } catch (error) {
      await this.#afterKitFailure(messages, batch, error);
    }
  }

  /**
   * A bug of the kit threw in the middle of a batch. First every message still on its way (a
   * handler running, a claim or complete asked) ends, so that no slot is freed while its handler
   * runs; then each message left without a result gets `INTERNAL_ERROR` (retried, dead after N,
   * so nothing is lost) and any claim it holds is released.
   */
  async #afterKitFailure(
    messages: readonly RawMessage[],
    batch: BatchInFlight,
    error: unknown,
  ): Promise<void> {
    await Promise.allSettled(batch.running);
    this.#deps.logger.error({ err: errorMessage(error) }, 'unexpected exception while processing a batch');
    const facts: Facts = { kind: 'kit-failed', error };
    for (let i = 0; i < messages.length; i++) {
      if (batch.isReported(i)) continue;
      const message = messages[i] as RawMessage;
      const item = batch.items[i];
      const decision = decide(facts, message.attempt, this.#settings);
      if (item && item.token !== '' && decision.claim === 'release')
        await this.#release(item.eventId, item.token);
      const started = item?.started ?? performance.now();
      const store = item && item.token !== '' ? 'answered' : 'not-asked';
      batch.report(
        i,
        this.#finish(message, started, decision.outcome, store, item?.verified, item?.handlerMs),
      );
    }
  }

  async #processAll(
    messages: readonly RawMessage[],
    batch: BatchInFlight,
    signals: readonly (AbortSignalLike | undefined)[] | undefined,
    traces: readonly (DeliveryTrace | undefined)[] | undefined,
  ): Promise<void> {
    const onResult = batch.report;
    const together = this.#claimsTogether;
    const claiming: InFlight[] = [];
    const alone: Promise<void>[] = [];
    let claimingBytes = 0;
    // Received together: each message's time starts at the batch's receipt, and each is judged
    // fresh or stale at that moment.
    const started = performance.now();
    const now = this.#now();
    for (let i = 0; i < messages.length; i++) {
      const message = messages[i] as RawMessage;
      const trace = traces?.[i];
      const admitted = this.#admit(i, message, started, signals?.[i], trace, now);
      if (!(admitted instanceof InFlight)) {
        onResult(i, admitted);
        continue;
      }
      batch.items[i] = admitted;
      if (together) {
        claiming.push(admitted);
        claimingBytes += messageSize(message);
      } else {
        alone.push(batch.track(this.#claimAlone(admitted, onResult)));
      }
    }
    if (claiming.length > 0) {
      const commit = { commitAtOnce: claimingBytes >= COMMIT_AT_ONCE_BYTES };
      await this.#claimTogether(claiming, batch, commit);
    }
    if (alone.length > 0) await Promise.all(alone);
  }

  /**
   * A store with `claimMany` (SQLite, memory): the batch's claims in one call, then each
   * message's handlers, then the completes of those that succeeded at once in one call. `commit`
   * goes with both calls: large batches are committed at once (`COMMIT_AT_ONCE_BYTES`).
   */
  async #claimTogether(
    claiming: readonly InFlight[],
    batch: BatchInFlight,
    commit: BatchCallOptions,
  ): Promise<void> {
    const onResult = batch.report;
    const { dedupe } = this.#deps;
    const ids = claiming.map((item) => {
      item.span = item.trace?.step('dedupe.claim');
      return item.eventId;
    });
    const claims = await claimAll(dedupe, ids, this.#settings.leaseMs, commit);
    const completing: InFlight[] = [];
    const later: Promise<void>[] = [];
    for (let k = 0; k < claiming.length; k++) {
      const item = claiming[k] as InFlight;
      const facts = this.#claimed(item, claims[k] as ClaimResult | StoreFailure, onResult);
      if (facts === undefined) continue; // not claimed: reported
      if (isPromiseLike(facts)) {
        later.push(
          batch.track(facts.then((f) => this.#afterHandlers(item, f)).then((r) => onResult(item.index, r))),
        );
      } else if (this.#decide(item, facts).claim === 'complete') {
        item.span = item.trace?.step('dedupe.complete');
        completing.push(item);
      } else {
        later.push(batch.track(this.#letGoOf(item, facts).then((r) => onResult(item.index, r))));
      }
    }
    if (completing.length > 0) {
      const done = await completeAll(dedupe, completing, this.#settings.retentionMs, commit);
      // Completed together: one clock read for all of them.
      const at = performance.now();
      for (let k = 0; k < completing.length; k++) {
        const item = completing[k] as InFlight;
        this.#completed(item, done[k] as boolean | StoreFailure);
        onResult(item.index, this.#decided(item, at));
      }
    }
    if (later.length > 0) await Promise.all(later);
  }

  /**
   * Any other store (Redis): one message's claim, asked as soon as it is verified, and the
   * message goes on as soon as its claim answers. The store works on the first claims of a batch
   * while the rest are verified (Redis pipelines the calls as they come); a batch barrier would
   * only make every message wait for the slowest claim.
   */
  async #claimAlone(item: InFlight, onResult: (index: number, result: ProcessResult) => void): Promise<void> {
    item.span = item.trace?.step('dedupe.claim');
    const claim = await claimOne(this.#deps.dedupe, item.eventId, this.#settings.leaseMs);
    const facts = this.#claimed(item, claim, onResult);
    if (facts !== undefined) onResult(item.index, await this.#afterHandlers(item, await facts));
  }

  /**
   * What the claim answered, and then the handlers: undefined when the message is not claimed
   * (reported already), else the handlers' facts (a promise while a handler still runs).
   */
  #claimed(
    item: InFlight,
    claim: ClaimResult | StoreFailure,
    onResult: (index: number, result: ProcessResult) => void,
  ): Facts | Promise<Facts> | undefined {
    const { message, started, verified } = item;
    if (claim instanceof StoreFailure) {
      item.span?.end(claim.error);
      const facts: Facts = { kind: 'store-unavailable', error: claim.error };
      onResult(item.index, this.#result(message, started, facts, 'unavailable', verified));
      return undefined;
    }
    item.span?.end(undefined, claim.status);
    if (claim.status !== 'claimed') {
      onResult(item.index, this.#result(message, started, notClaimed(claim), 'answered', verified));
      return undefined;
    }
    item.token = claim.token;
    const stop = this.#abandoned(verified, claim.abandoned ?? 0);
    if (stop) return stop;
    const validation = validateEvent(verified.eventType, verified.payload);
    if (!validation.ok) return { kind: 'schema-invalid', reason: validation.reason };
    item.handlersStarted = performance.now();
    const { handlers, signal, trace } = item;
    return this.#handlers.run(handlers, validation.event, verified, message, claim.token, signal, trace);
  }

  /** The decision on a claimed message's facts (its handlers' time taken once they ran). */
  #decide(item: InFlight, facts: Facts): Decision {
    if (item.handlersStarted !== undefined) item.handlerMs = performance.now() - item.handlersStarted;
    item.decision = decide(facts, item.message.attempt, this.#settings);
    return item.decision;
  }

  /** The end of a message whose handlers ran asynchronously: its claim completed or let go. */
  async #afterHandlers(item: InFlight, facts: Facts): Promise<ProcessResult> {
    if (this.#decide(item, facts).claim !== 'complete') return this.#letGoOf(item, facts);
    item.span = item.trace?.step('dedupe.complete');
    this.#completed(item, await completeOne(this.#deps.dedupe, item, this.#settings.retentionMs));
    return this.#decided(item);
  }

  /** What the store answered to a complete: warnings when it did not record the event as done. */
  #completed(item: InFlight, done: boolean | StoreFailure): void {
    if (done instanceof StoreFailure) {
      item.span?.end(done.error);
      this.#completeFailed(item.verified, done.error);
      return;
    }
    if (!done) this.#takenOver(item.verified);
    item.span?.end();
  }

  async #letGoOf(item: InFlight, facts: Facts): Promise<ProcessResult> {
    await this.#letGo(item.decision as Decision, facts, item.verified.eventId, item.token);
    return this.#decided(item);
  }

  /** The result of a message whose claim was answered and decided on, final at `at` (ms). */
  #decided(item: InFlight, at = performance.now()): ProcessResult {
    const outcome = (item.decision as Decision).outcome;
    return this.#finish(item.message, item.started, outcome, 'answered', item.verified, item.handlerMs, at);
  }

  /**
   * The steps before the store: a message the source already rejected, verification, routing.
   * A message that passes is on its way to its claim; any other has its result.
   */
  #admit(
    index: number,
    message: RawMessage,
    started: number,
    signal: AbortSignalLike | undefined,
    trace: DeliveryTrace | undefined,
    now: number,
  ): InFlight | ProcessResult {
    if (message.rejection) {
      return this.#result(message, started, { kind: 'rejected', ...message.rejection }, 'not-asked');
    }
    let verified: VerifiedMessage;
    const verifying = trace?.step('verify');
    try {
      verified = this.#verify(message, now);
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
    return new InFlight(index, message, started, signal, trace, verified, handlers);
  }

  /** Aborts every running handler (the consumer's shutdown deadline passed). */
  abortAll(): void {
    this.#handlers.abortAll();
  }

  #verify(message: RawMessage, now: number): VerifiedMessage {
    const s = this.#settings;
    return verifyMessage(message.body, {
      keyring: this.#deps.keyring,
      now,
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
    at = performance.now(),
  ): ProcessResult {
    return {
      outcome,
      eventId: verified?.eventId,
      eventType: verified?.eventType,
      keyId: verified?.keyId,
      signedAt: verified?.signedAt,
      attempt: message.attempt,
      durationMs: at - started,
      handlerDurationMs: handlerMs,
      store,
    };
  }
}

/**
 * What a batch has under way: which messages were reported (each exactly once: a second report,
 * from work that outlived a failure of the batch, is ignored), the promises of the messages still
 * on their way, and each message's claim once it was admitted.
 */
class BatchInFlight {
  readonly items: (InFlight | undefined)[];
  readonly running: Promise<void>[] = [];
  readonly #reported: Uint8Array;
  readonly #onResult: (index: number, result: ProcessResult) => void;

  constructor(size: number, onResult: (index: number, result: ProcessResult) => void) {
    this.items = new Array<InFlight | undefined>(size);
    this.#reported = new Uint8Array(size);
    this.#onResult = onResult;
  }

  readonly report = (index: number, result: ProcessResult): void => {
    if (this.#reported[index]) return;
    this.#reported[index] = 1;
    this.#onResult(index, result);
  };

  isReported(index: number): boolean {
    return this.#reported[index] === 1;
  }

  track(work: Promise<void>): Promise<void> {
    this.running.push(work);
    return work;
  }
}

/** One message of a batch from its claim to its result (once claimed, a claim it holds). */
class InFlight implements HeldClaim {
  readonly index: number;
  readonly eventId: string;
  readonly message: RawMessage;
  readonly started: number;
  readonly signal: AbortSignalLike | undefined;
  readonly trace: DeliveryTrace | undefined;
  readonly verified: VerifiedMessage;
  readonly handlers: readonly Handler<never>[];
  /** The span of the store call under way (claim, then complete). */
  span: StepSpan | undefined = undefined;
  token = '';
  handlersStarted: number | undefined = undefined;
  handlerMs: number | undefined = undefined;
  decision: Decision | undefined = undefined;

  constructor(
    index: number,
    message: RawMessage,
    started: number,
    signal: AbortSignalLike | undefined,
    trace: DeliveryTrace | undefined,
    verified: VerifiedMessage,
    handlers: readonly Handler<never>[],
  ) {
    this.index = index;
    this.message = message;
    this.started = started;
    this.signal = signal;
    this.trace = trace;
    this.verified = verified;
    this.eventId = verified.eventId;
    this.handlers = handlers;
  }
}

function isPromiseLike<T>(value: T | Promise<T>): value is Promise<T> {
  return typeof (value as Promise<T> | null)?.then === 'function';
}

/** What the store's answer says when it is not a plain "claimed". */
function notClaimed(claim: Exclude<ClaimResult, { status: 'claimed' }>): Facts {
  return claim.status === 'duplicate' ? DUPLICATE : { kind: 'in-progress', retryAfterMs: claim.retryAfterMs };
}

export type { UnknownEvent };
