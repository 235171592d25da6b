import { backoff } from './backoff.js';
import type { ErrorCode } from './errors.js';

/**
 * What happens to one message, decided in one place (`decide`) and mapped by each adapter onto
 * its broker: ack = delete / checkpoint / 2xx; retry = make visible again after `delayMs` /
 * retry in place / 5xx; dead = write to the dead-letter sink, then ack.
 */
export type Outcome =
  | { readonly kind: 'ack'; readonly result: AckResult }
  | { readonly kind: 'retry'; readonly delayMs: number; readonly code: ErrorCode; readonly reason: string }
  | { readonly kind: 'dead'; readonly code: ErrorCode; readonly reason: string };

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
 * Turns a failure into an outcome. `attempt` is 1-based (the broker's delivery count). A retry
 * delay given by the caller (a handler's `RetryLaterError`, a lease's remaining time) wins over
 * the backoff.
 */
export function decide(
  code: ErrorCode,
  reason: string,
  attempt: number,
  policy: RetryPolicy,
  delayMs?: number,
): Outcome {
  if (DEAD_AT_ONCE.has(code)) return { kind: 'dead', code, reason };
  if (!NEVER_DEAD.has(code) && attempt >= policy.maxAttempts) {
    return { kind: 'dead', code, reason: `${reason} (gave up after ${attempt} attempts)` };
  }
  return { kind: 'retry', code, reason, delayMs: delayMs ?? backoffDelay(attempt, policy) };
}

/** Exponential backoff with equal jitter: half fixed, half random, so retries spread out. */
export function backoffDelay(attempt: number, policy: RetryPolicy): number {
  return backoff(attempt, { baseMs: policy.baseDelayMs, maxMs: policy.maxDelayMs, jitter: 'equal' });
}
