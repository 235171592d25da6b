import { DEFAULT_MAX_ENVELOPE_BYTES, type Envelope, parseEnvelope } from './envelope.js';
import { VerificationError } from './errors.js';
import type { Keyring } from './secrets.js';
import { matchSignature } from './signature.js';

/** The spec's limit: reject `signed_at` more than 5 minutes old. */
export const DEFAULT_MAX_AGE_SECONDS = 300;
/** How far ahead of our clock `signed_at` may be (publisher clock skew). */
export const DEFAULT_MAX_FUTURE_SKEW_SECONDS = 300;

export interface VerifyOptions {
  readonly keyring: Keyring;
  /** Current time in milliseconds; default `Date.now()`. */
  readonly now?: number;
  /**
   * When the broker accepted the message (ms). With it, age is `enqueuedAt − signed_at`, so a
   * backlog is not mistaken for a replay; a re-sent old envelope gets a fresh enqueue time and is
   * still rejected. Without it (or with `strictAge`), age is measured against `now`.
   */
  readonly enqueuedAt?: number | undefined;
  readonly strictAge?: boolean;
  /** Skip the age check entirely (replay of dead letters). The future check still applies. */
  readonly checkAge?: boolean;
  readonly maxAgeSeconds?: number;
  readonly maxFutureSkewSeconds?: number;
  readonly maxEnvelopeBytes?: number;
}

/** A message that passed every verification step; ids come from the signed body. */
export interface VerifiedMessage {
  readonly envelope: Envelope;
  /** The parsed body: the only part of the message that is trusted. */
  readonly payload: Record<string, unknown>;
  readonly eventId: string;
  readonly eventType: string;
  readonly signedAt: number;
  /** Id of the secret that verified the signature. */
  readonly keyId: string;
}

/**
 * The spec's verification, in its order: parse the envelope, check the age, check the HMAC in
 * constant time against every active secret, and only then parse the body. Then the envelope's
 * unsigned copies of `event_id` / `event_type` must equal the body's. Throws `VerificationError`.
 */
export function verifyMessage(raw: string | Uint8Array, options: VerifyOptions): VerifiedMessage {
  const envelope = parseEnvelope(raw, options.maxEnvelopeBytes ?? DEFAULT_MAX_ENVELOPE_BYTES);
  const now = options.now ?? Date.now();
  // The broker's enqueue time when there is one (and not strict): the moment the event reached
  // us, which an attacker cannot set. Age and the keys' notAfter are both judged at that moment,
  // so a backlog signed with a key that has since been retired still verifies.
  const brokerTime = Number.isFinite(options.enqueuedAt) && !options.strictAge;
  const referenceMs = brokerTime ? (options.enqueuedAt as number) : now;
  checkFreshness(envelope.signed_at, now, referenceMs, brokerTime, options);

  const keyId = matchSignature(
    envelope.signed_at,
    envelope.body,
    envelope.signature,
    options.keyring.active(referenceMs),
  );
  if (keyId === undefined) {
    throw new VerificationError('SIGNATURE_MISMATCH', 'signature does not match any active signing secret');
  }

  const payload = parseBody(envelope.body);
  if (payload.event_id !== envelope.event_id || payload.event_type !== envelope.event_type) {
    throw new VerificationError(
      'ENVELOPE_MISMATCH',
      'envelope event_id/event_type differ from the signed body (the envelope copies are not signed)',
      { details: { field: payload.event_id !== envelope.event_id ? 'event_id' : 'event_type' } },
    );
  }
  return {
    envelope,
    payload,
    eventId: envelope.event_id,
    eventType: envelope.event_type,
    signedAt: envelope.signed_at,
    keyId,
  };
}

function checkFreshness(
  signedAt: number,
  nowMs: number,
  referenceMs: number,
  brokerTime: boolean,
  options: VerifyOptions,
): void {
  const nowSeconds = Math.floor(nowMs / 1000);
  const maxFuture = options.maxFutureSkewSeconds ?? DEFAULT_MAX_FUTURE_SKEW_SECONDS;
  // Always against our clock: skew heals as time passes, so this failure is retryable.
  if (signedAt - nowSeconds > maxFuture) {
    throw new VerificationError(
      'TIMESTAMP_TOO_NEW',
      `signed_at is ${signedAt - nowSeconds}s in the future (limit ${maxFuture}s)`,
      {
        details: { signedAt, now: nowSeconds },
      },
    );
  }
  if (options.checkAge === false) return;
  const maxAge = options.maxAgeSeconds ?? DEFAULT_MAX_AGE_SECONDS;
  const reference = Math.floor(referenceMs / 1000);
  const age = reference - signedAt;
  if (age > maxAge) {
    throw new VerificationError(
      'TIMESTAMP_TOO_OLD',
      `signed_at is ${age}s older than the ${brokerTime ? 'enqueue time' : 'clock'} (limit ${maxAge}s)`,
      { details: { signedAt, reference, measuredAgainst: brokerTime ? 'enqueued_at' : 'clock' } },
    );
  }
}

function parseBody(body: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    throw new VerificationError('BODY_NOT_JSON', 'body is not valid JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new VerificationError('BODY_NOT_JSON', 'body is not a JSON object');
  }
  return value as Record<string, unknown>;
}
