import { redact } from './redact.js';

/**
 * Every error the kit raises carries a stable string `code`. Codes are part of the public
 * contract: they appear in logs, metrics, dead-letter records and CLI output.
 */
export const VERIFICATION_CODES = [
  'MALFORMED_ENVELOPE',
  'ENVELOPE_TOO_LARGE',
  'TIMESTAMP_TOO_OLD',
  'TIMESTAMP_TOO_NEW',
  'SIGNATURE_MISMATCH',
  'BODY_NOT_JSON',
  'ENVELOPE_MISMATCH',
  'ENCODING_MISMATCH',
  'DEAD_LETTER_TRUNCATED',
] as const;

export const ERROR_CODES = [
  ...VERIFICATION_CODES,
  'SCHEMA_INVALID',
  'UNKNOWN_EVENT_TYPE',
  'HANDLER_FAILED',
  'HANDLER_TIMEOUT',
  'HANDLER_ABANDONED',
  'HANDLER_REQUESTED_RETRY',
  'HANDLER_REQUESTED_DEAD_LETTER',
  'FORWARD_REDIRECTED',
  'FORWARD_ANSWER_INCOMPLETE',
  'LEASE_LOST',
  'IN_PROGRESS',
  'DEDUPE_UNAVAILABLE',
  'SHUTDOWN',
  // An unexpected exception inside the kit's own checks (a bug): retried, never blamed on the message.
  'INTERNAL_ERROR',
  'CONFIG_INVALID',
  'SECRET_INVALID',
  'ADAPTER_ERROR',
] as const;

export type VerificationCode = (typeof VERIFICATION_CODES)[number];
export type ErrorCode = (typeof ERROR_CODES)[number];

/**
 * Codes of a rejection: the message itself is bad (it failed verification, or its body is
 * invalid). The metrics' `rejected_total` and the console's rejection counts both use this set.
 */
export const REJECTION_CODES: ReadonlySet<string> = new Set<ErrorCode>([
  ...VERIFICATION_CODES,
  'SCHEMA_INVALID',
  'UNKNOWN_EVENT_TYPE',
]);

// A registry-wide symbol, so `isPartnerEventsError` holds when both the ESM and the CJS build
// of this package are loaded in one process (their classes differ, the brand does not).
const BRAND = Symbol.for('partner-health-events.error');

export interface PartnerEventsErrorOptions {
  cause?: unknown;
  details?: Readonly<Record<string, unknown>>;
}

export class PartnerEventsError extends Error {
  readonly code: ErrorCode;
  readonly details: Readonly<Record<string, unknown>>;
  readonly [BRAND] = true;

  constructor(code: ErrorCode, message: string, options: PartnerEventsErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'PartnerEventsError';
    this.code = code;
    this.details = options.details ?? {};
  }
}

export function isPartnerEventsError(value: unknown): value is PartnerEventsError {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
}

/** The message failed one of the spec's verification steps (or the kit's extra envelope checks). */
export class VerificationError extends PartnerEventsError {
  declare readonly code: VerificationCode;
  constructor(code: VerificationCode, message: string, options?: PartnerEventsErrorOptions) {
    super(code, message, options);
    this.name = 'VerificationError';
  }
}

/** Options, config files or secrets are unusable; raised at start-up, before anything connects. */
export class ConfigError extends PartnerEventsError {
  constructor(
    message: string,
    options?: PartnerEventsErrorOptions & { code?: 'CONFIG_INVALID' | 'SECRET_INVALID' },
  ) {
    super(options?.code ?? 'CONFIG_INVALID', message, options);
    this.name = 'ConfigError';
  }
}

/** The dedupe store could not be reached or answered with an error; always retryable. */
export class DedupeUnavailableError extends PartnerEventsError {
  constructor(message: string, options?: PartnerEventsErrorOptions) {
    super('DEDUPE_UNAVAILABLE', message, options);
    this.name = 'DedupeUnavailableError';
  }
}

/** A queue adapter failed to talk to its broker. */
export class AdapterError extends PartnerEventsError {
  constructor(message: string, options?: PartnerEventsErrorOptions) {
    super('ADAPTER_ERROR', message, options);
    this.name = 'AdapterError';
  }
}

/**
 * Thrown by a handler to say "not now": the message is retried after `delayMs` (or the
 * configured backoff) and dead-lettered once the attempts run out.
 */
export class RetryLaterError extends PartnerEventsError {
  readonly delayMs: number | undefined;
  constructor(
    message = 'handler asked to retry later',
    options: PartnerEventsErrorOptions & { delayMs?: number } = {},
  ) {
    super('HANDLER_REQUESTED_RETRY', message, options);
    this.name = 'RetryLaterError';
    this.delayMs = options.delayMs;
  }
}

/**
 * Thrown by a handler to say "this will never succeed": the message is dead-lettered at once
 * (with this error's message as the reason) and then acknowledged.
 */
export class DeadLetterError extends PartnerEventsError {
  constructor(message: string, options?: PartnerEventsErrorOptions) {
    super('HANDLER_REQUESTED_DEAD_LETTER', message, options);
    this.name = 'DeadLetterError';
  }
}

/**
 * Codes of a hand-off over HTTP (the forwarder, `--to http(s)`) that failed in a way worth its
 * own code: the app answered with a redirect (3xx), which is never followed; or it answered 2xx
 * and then its body was cut off or stalled, so the answer is not whole. Retried like a handler error.
 */
export const FORWARD_CODES = ['FORWARD_REDIRECTED', 'FORWARD_ANSWER_INCOMPLETE'] as const;
export type ForwardCode = (typeof FORWARD_CODES)[number];

/** A hand-off over HTTP that failed with one of `FORWARD_CODES`. */
export class ForwardError extends PartnerEventsError {
  declare readonly code: ForwardCode;
  constructor(code: ForwardCode, message: string, options?: PartnerEventsErrorOptions) {
    super(code, message, options);
    this.name = 'ForwardError';
  }
}

/**
 * The message of anything thrown, for logs (never its stack), redacted: other libraries quote
 * URLs whole (fetch: "Request cannot be constructed from a URL that includes credentials: …").
 */
export function errorMessage(error: unknown): string {
  // Never throws: it runs inside the decision for a failed handler, and a handler may throw
  // anything (`Object.create(null)`, an Error whose `message` is not a string, an object whose
  // `toString` throws). A throw here would fail the whole batch instead of one message.
  try {
    // A refused connection to a host with several addresses is an AggregateError with no message.
    if (error instanceof AggregateError && Array.isArray(error.errors) && error.errors.length > 0) {
      return error.errors.map(errorMessage).join('; ');
    }
    if (error instanceof Error) {
      const message: unknown = error.message;
      if (typeof message === 'string' && message !== '') return redact(message);
      return redact(typeof error.name === 'string' && error.name !== '' ? error.name : 'Error');
    }
    return redact(String(error));
  } catch {
    return unprintable(error);
  }
}

/** What is said of a thrown value that has no string form: its type tag, e.g. `[object Object]`. */
function unprintable(error: unknown): string {
  try {
    return `unprintable thrown value ${Object.prototype.toString.call(error)}`;
  } catch {
    return 'unprintable thrown value';
  }
}
