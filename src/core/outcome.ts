import { backoff } from './backoff.js';
import {
  DeadLetterError,
  type ErrorCode,
  errorMessage,
  FORWARD_CODES,
  isPartnerEventsError,
  RetryLaterError,
  type VerificationCode,
  VerificationError,
} from './errors.js';

/**
 * What happens to one message, decided in one place (`decide`) and mapped by each adapter onto
 * its broker: ack = delete / checkpoint / 2xx; retry = make visible again after `delayMs` /
 * retry in place / 5xx; dead = write to the dead-letter sink, then ack.
 */
export type Outcome =
  | { readonly kind: 'ack'; readonly result: AckResult }
  | { readonly kind: 'retry'; readonly delayMs: number; readonly code: ErrorCode; readonly reason: string }
  | DeadOutcome;

export type DeadOutcome = { readonly kind: 'dead'; readonly code: ErrorCode; readonly reason: string };

/**
 * The most of a dead outcome's reason that a broker's copy of the message carries (an SQS
 * dead-letter queue's attribute, a poison hub's property). A handler's error message can be any
 * length, and a copy over the broker's size limit is refused every time it is sent; the
 * dead-letter file keeps the whole reason.
 */
export const COPY_REASON_MAX_CHARS = 1024;

/** `reason` cut to `COPY_REASON_MAX_CHARS`, never between the two halves of a surrogate pair. */
export function reasonForCopy(reason: string): string {
  if (reason.length <= COPY_REASON_MAX_CHARS) return reason;
  const last = reason.charCodeAt(COPY_REASON_MAX_CHARS - 1);
  const splitsPair = last >= 0xd800 && last <= 0xdbff;
  return reason.slice(0, splitsPair ? COPY_REASON_MAX_CHARS - 1 : COPY_REASON_MAX_CHARS);
}

/** handled: the handlers succeeded; duplicate: already handled; ignored: no handler wants this type. */
export type AckResult = 'handled' | 'duplicate' | 'ignored';

export interface RetryPolicy {
  /** Deliveries before a retryable failure is dead-lettered. */
  readonly maxAttempts: number;
  /** Delay after the first failed attempt; doubles each attempt. */
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxAttempts: 10,
  baseDelayMs: 2000,
  maxDelayMs: 10 * 60_000,
};

/**
 * `policy` capped field by field by a source's `retryBound` (the smaller value wins): a file's
 * short schedule applies whatever longer `retry` the consumer was given, and a shorter one stays.
 */
export function boundRetryPolicy(policy: RetryPolicy, bound: RetryPolicy | undefined): RetryPolicy {
  if (!bound) return policy;
  return {
    maxAttempts: Math.min(policy.maxAttempts, bound.maxAttempts),
    baseDelayMs: Math.min(policy.baseDelayMs, bound.baseDelayMs),
    maxDelayMs: Math.min(policy.maxDelayMs, bound.maxDelayMs),
  };
}

/** The settings `decide` reads (a subset of the consumer's). */
export interface DecisionPolicy {
  readonly retry: RetryPolicy;
  /** The delay after a timeout or a lost lease: a handler that may still run has stopped by then. */
  readonly leaseMs: number;
  readonly handlerTimeoutMs: number;
  /** Types outside the catalog with no `onUnknown` handler: ack with a warning, or dead-letter. */
  readonly unknownEventTypes: 'ack' | 'dead-letter';
}

/** Why a run of handlers was cut short: the consumer stopping, the lease keeper, a failed visibility heartbeat. */
export type AbortCause = 'shutdown' | 'handler-timeout' | 'lease-lost' | 'visibility-lost';

/** The code each abort cause is reported with (the signal's reason names it too). */
export const ABORT_CODES = {
  shutdown: 'SHUTDOWN',
  'handler-timeout': 'HANDLER_TIMEOUT',
  'lease-lost': 'LEASE_LOST',
  'visibility-lost': 'LEASE_LOST',
} as const satisfies Record<AbortCause, ErrorCode>;

/** Whether an abort signal's `reason` is one of the causes above (anything else reads as a shutdown). */
export function isAbortCause(reason: unknown): reason is AbortCause {
  return typeof reason === 'string' && Object.hasOwn(ABORT_CODES, reason);
}

/**
 * What the processing of one message learned, up to the step where it stopped: the input of
 * `decide`. In pipeline order (docs/concepts.md, "The pipeline").
 */
export type Facts =
  /** The source already knew the message cannot be verified as delivered (`RawMessage.rejection`). */
  | { readonly kind: 'rejected'; readonly code: VerificationCode; readonly reason: string }
  /** `verifyMessage` threw: a `VerificationError`, or anything else (a bug in the kit). */
  | { readonly kind: 'unverified'; readonly error: unknown }
  /** Verified, but no handler wants it; `known`: its type is in the catalog. */
  | { readonly kind: 'unrouted'; readonly eventType: string; readonly known: boolean }
  /** The dedupe store's answers to the claim other than a plain "claimed". */
  | { readonly kind: 'duplicate' }
  | { readonly kind: 'in-progress'; readonly retryAfterMs: number }
  | { readonly kind: 'store-unavailable'; readonly error: unknown }
  /** Claimed, but earlier claims were abandoned `times` times, reaching `maxAbandonedClaims`. */
  | { readonly kind: 'abandoned'; readonly times: number }
  | { readonly kind: 'schema-invalid'; readonly reason: string }
  | { readonly kind: 'handled' }
  | { readonly kind: 'handler-threw'; readonly error: unknown }
  /** `running`: the handler's promise, when it may still be running (not at a shutdown). */
  | { readonly kind: 'handler-aborted'; readonly cause: AbortCause; readonly running?: PromiseLike<unknown> }
  /** A dead outcome whose dead-letter record could not be written. */
  | { readonly kind: 'dead-letter-failed'; readonly dead: DeadOutcome }
  /** Received after the consumer stopped: nobody handles it (the SQS adapter hands these back). */
  | { readonly kind: 'not-handled' }
  /**
   * The pipeline itself threw after verification (a bug in the kit), so the message has no result
   * of its own; any handler it started has ended.
   */
  | { readonly kind: 'kit-failed'; readonly error: unknown };

/**
 * What becomes of the event's dedupe claim: `none` when there is none of ours to act on (never
 * taken, held by another delivery, or already settled), else complete it, release it, or release
 * it once the still running handler stops (so no second copy starts beside it).
 */
export type ClaimAction = 'none' | 'complete' | 'release' | 'release-when-stopped';

export interface Decision {
  readonly outcome: Outcome;
  readonly claim: ClaimAction;
}

/** Settles a message nobody handled so that it is visible again at once. */
export const NOT_HANDLED: Outcome = {
  kind: 'retry',
  delayMs: 0,
  code: 'SHUTDOWN',
  reason: 'received after stop',
};

// The common outcomes are shared, not built per message.
const HANDLED: Decision = { outcome: { kind: 'ack', result: 'handled' }, claim: 'complete' };
const DUPLICATE: Decision = { outcome: { kind: 'ack', result: 'duplicate' }, claim: 'none' };
const IGNORED: Decision = { outcome: { kind: 'ack', result: 'ignored' }, claim: 'none' };

/** The same bytes fail the same way forever: dead-letter at once, don't burn the retries. */
const DEAD_AT_ONCE: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'MALFORMED_ENVELOPE',
  'ENVELOPE_TOO_LARGE',
  'BODY_NOT_JSON',
  'ENVELOPE_MISMATCH',
  'ENCODING_MISMATCH',
  'DEAD_LETTER_TRUNCATED',
  'TIMESTAMP_TOO_OLD',
  'SCHEMA_INVALID',
  'UNKNOWN_EVENT_TYPE',
  'HANDLER_REQUESTED_DEAD_LETTER',
  'HANDLER_ABANDONED',
]);

/** Not failures of this message: never counted towards dead-lettering. */
const NEVER_DEAD: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['IN_PROGRESS', 'SHUTDOWN']);

/**
 * Every ack / retry / dead decision of the kit, from what was learned about the message and its
 * delivery count `attempt` (1-based). The table in docs/concepts.md ("Decision table") is tested
 * against this function row by row (test/decision-table.test.ts).
 */
export function decide(facts: Facts, attempt: number, policy: DecisionPolicy): Decision {
  switch (facts.kind) {
    case 'handled':
      return HANDLED;
    case 'duplicate':
      return DUPLICATE;
    case 'unrouted':
      if (facts.known || policy.unknownEventTypes === 'ack') return IGNORED;
      return failure(
        'UNKNOWN_EVENT_TYPE',
        `event type "${facts.eventType}" is not in the catalog`,
        attempt,
        policy,
      );
    case 'rejected':
      return failure(facts.code, facts.reason, attempt, policy);
    case 'unverified':
      if (facts.error instanceof VerificationError) {
        return failure(facts.error.code, facts.error.message, attempt, policy);
      }
      return kitBug('in verification', facts.error, attempt, policy, 'none');
    case 'in-progress':
      // Usually the holder finishes in milliseconds: look again soon, backing off per attempt.
      return retry(
        'IN_PROGRESS',
        'another delivery of this event is being handled right now',
        Math.max(100, Math.min(facts.retryAfterMs, retryBackoff(attempt, policy))),
      );
    case 'store-unavailable':
      return failure('DEDUPE_UNAVAILABLE', errorMessage(facts.error), attempt, policy);
    case 'abandoned':
      return failure(
        'HANDLER_ABANDONED',
        `its handling was abandoned ${facts.times} times (the worker died or hung while handling it); handlers not run again`,
        attempt,
        policy,
        'release',
      );
    case 'schema-invalid':
      return failure('SCHEMA_INVALID', facts.reason, attempt, policy, 'release');
    case 'kit-failed':
      // A claim this delivery holds is let go: the next delivery need not wait for the lease.
      return kitBug('while processing', facts.error, attempt, policy, 'release');
    case 'handler-threw':
      return handlerThrew(facts.error, attempt, policy);
    case 'handler-aborted':
      return handlerAborted(facts, attempt, policy);
    case 'dead-letter-failed':
      // The record is not durable, so the message must not be acked: retried whatever its
      // attempt, never dead (dead means "recorded, then acked").
      return retry(facts.dead.code, 'dead-letter sink unavailable', retryBackoff(attempt, policy));
    case 'not-handled':
      return { outcome: NOT_HANDLED, claim: 'none' };
  }
}

/** A bug of the kit, not a property of the message: retried, so a good event is not lost. */
function kitBug(
  where: string,
  error: unknown,
  attempt: number,
  policy: DecisionPolicy,
  claim: ClaimAction,
): Decision {
  return failure(
    'INTERNAL_ERROR',
    `unexpected exception ${where}: ${errorMessage(error)}`,
    attempt,
    policy,
    claim,
  );
}

function handlerThrew(error: unknown, attempt: number, policy: DecisionPolicy): Decision {
  // Recognised by code as well, so errors from a second copy of the package (ESM and CJS) work.
  if (
    error instanceof RetryLaterError ||
    (isPartnerEventsError(error) && error.code === 'HANDLER_REQUESTED_RETRY')
  ) {
    const delayMs = usableDelay((error as RetryLaterError).delayMs);
    return failure('HANDLER_REQUESTED_RETRY', error.message, attempt, policy, 'release', delayMs);
  }
  if (
    error instanceof DeadLetterError ||
    (isPartnerEventsError(error) && error.code === 'HANDLER_REQUESTED_DEAD_LETTER')
  ) {
    return failure('HANDLER_REQUESTED_DEAD_LETTER', (error as Error).message, attempt, policy, 'release');
  }
  // A forward's own failure code (a redirect, a 2xx cut off) says more than HANDLER_FAILED;
  // retried the same way.
  if (isPartnerEventsError(error) && (FORWARD_CODES as readonly string[]).includes(error.code)) {
    return failure(error.code, error.message, attempt, policy, 'release');
  }
  return failure('HANDLER_FAILED', `handler threw: ${errorMessage(error)}`, attempt, policy, 'release');
}

function handlerAborted(
  facts: { readonly cause: AbortCause; readonly running?: PromiseLike<unknown> },
  attempt: number,
  policy: DecisionPolicy,
): Decision {
  // A timed-out or lease-lost handler may still be running: its claim is kept until it stops
  // (at most until the lease runs out), so no second copy starts beside it.
  const claim = facts.running ? 'release-when-stopped' : 'release';
  switch (facts.cause) {
    case 'shutdown':
      // The process is about to end: released at once, whether or not the handler still runs.
      return retry('SHUTDOWN', 'consumer stopped before the handler finished', 0, 'release');
    case 'handler-timeout':
      // Retried only once its lease has lapsed.
      return failure(
        'HANDLER_TIMEOUT',
        `handler ran longer than ${policy.handlerTimeoutMs}ms`,
        attempt,
        policy,
        claim,
        policy.leaseMs,
      );
    case 'lease-lost':
    case 'visibility-lost':
      // A lost visibility means the broker already shows the message again: hand it back at once
      // rather than after the lease.
      return failure(
        'LEASE_LOST',
        'lease on the event or message could not be kept',
        attempt,
        policy,
        claim,
        facts.cause === 'visibility-lost' ? 0 : policy.leaseMs,
      );
  }
}

/**
 * A failure: dead at once when retrying cannot help, dead once the attempts run out, else a
 * retry after `delayMs` (a delay the failure names itself: `RetryLaterError`, a lease) or the
 * backoff.
 */
function failure(
  code: ErrorCode,
  reason: string,
  attempt: number,
  policy: DecisionPolicy,
  claim: ClaimAction = 'none',
  delayMs?: number,
): Decision {
  if (DEAD_AT_ONCE.has(code)) return { outcome: { kind: 'dead', code, reason }, claim };
  if (!NEVER_DEAD.has(code) && attempt >= policy.retry.maxAttempts) {
    return {
      outcome: { kind: 'dead', code, reason: `${reason} (gave up after ${attempt} attempts)` },
      claim,
    };
  }
  return retry(code, reason, delayMs ?? retryBackoff(attempt, policy), claim);
}

/**
 * A handler's own delay, when it is one: a finite number ≥ 0. Anything else (`NaN` from
 * `Number(missingHeader) * 1000`, a negative or infinite value) would retry at once, every
 * attempt within milliseconds, or never; the backoff is used instead.
 */
function usableDelay(delayMs: unknown): number | undefined {
  return typeof delayMs === 'number' && Number.isFinite(delayMs) && delayMs >= 0 ? delayMs : undefined;
}

function retry(code: ErrorCode, reason: string, delayMs: number, claim: ClaimAction = 'none'): Decision {
  return { outcome: { kind: 'retry', code, reason, delayMs }, claim };
}

/** Exponential backoff with equal jitter: half fixed, half random, so retries spread out. */
function retryBackoff(attempt: number, policy: DecisionPolicy): number {
  const { baseDelayMs, maxDelayMs } = policy.retry;
  return backoff(attempt, { baseMs: baseDelayMs, maxMs: maxDelayMs, jitter: 'equal' });
}
