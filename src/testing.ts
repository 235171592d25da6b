/**
 * Helpers for partners' own tests: sign fixtures with a test secret, build envelopes that break
 * exactly one rule, and feed them through an in-memory source.
 */
import type { Envelope } from './envelope.js';
import { SAMPLE_USER_ID, sampleEvent } from './events/samples.js';
import { type EventType, isKnownEventType } from './events/schemas.js';
import { sign } from './signature.js';

export { MemorySource, type MemorySourceOptions, memorySource } from '../adapters/memory/index.js';
export { SAMPLE_USER_ID, sampleEvent } from './events/samples.js';
export { sign } from './signature.js';

/** A secret for tests only. Never use it anywhere else. */
export const TEST_SIGNING_SECRET = 'test-signing-secret-do-not-use-in-production';

export interface TestEnvelopeOptions {
  /** Default `TEST_SIGNING_SECRET`. */
  readonly secret?: string;
  /** Unix seconds; default now. */
  readonly signedAt?: number;
  /** Fields merged into the sample body before signing. */
  readonly fields?: Record<string, unknown>;
  /** The exact body text to sign instead of a sample (for malformed-body tests). */
  readonly body?: string;
  /** Envelope fields replaced after signing: to tamper, or to break the envelope. */
  readonly envelope?: Record<string, unknown>;
}

export interface TestEnvelope {
  /** The message as a broker would deliver it. */
  readonly raw: string;
  readonly envelope: Envelope;
  /** The parsed body (before any envelope override). */
  readonly event: Record<string, unknown>;
  readonly eventId: string;
}

/** A correctly signed envelope of `type` (any string; catalog types get a valid sample body). */
export function createTestEnvelope(
  type: EventType | (string & {}),
  options: TestEnvelopeOptions = {},
): TestEnvelope {
  const event: Record<string, unknown> = isKnownEventType(type)
    ? { ...sampleEvent(type), ...options.fields }
    : {
        event_id: `evt_${crypto.randomUUID()}`,
        event_type: type,
        user_id: SAMPLE_USER_ID,
        ...options.fields,
      };
  const body = options.body ?? JSON.stringify(event);
  const signedAt = options.signedAt ?? Math.floor(Date.now() / 1000);
  const eventId = String(event.event_id);
  const envelope = {
    event_id: eventId,
    event_type: String(event.event_type),
    signed_at: signedAt,
    signature: sign(body, options.secret ?? TEST_SIGNING_SECRET, signedAt),
    body,
    ...options.envelope,
  } as Envelope;
  return { raw: JSON.stringify(envelope), envelope, event, eventId };
}

/** Signed `ageSeconds` ago (default 10 minutes: past the spec's 5-minute limit). */
export function staleEnvelope(
  type: EventType,
  ageSeconds = 600,
  options: TestEnvelopeOptions = {},
): TestEnvelope {
  return createTestEnvelope(type, { ...options, signedAt: Math.floor(Date.now() / 1000) - ageSeconds });
}

/** Signed `aheadSeconds` in the future (default 10 minutes: past the default skew). */
export function futureEnvelope(
  type: EventType,
  aheadSeconds = 600,
  options: TestEnvelopeOptions = {},
): TestEnvelope {
  return createTestEnvelope(type, { ...options, signedAt: Math.floor(Date.now() / 1000) + aheadSeconds });
}

/** Signed with a secret the consumer does not have. */
export function forgedEnvelope(type: EventType, options: TestEnvelopeOptions = {}): TestEnvelope {
  return createTestEnvelope(type, { ...options, secret: 'an-attacker-guess-at-the-secret' });
}

/** Validly signed, then one byte of the body changed (the signature no longer matches). */
export function tamperedEnvelope(type: EventType, options: TestEnvelopeOptions = {}): TestEnvelope {
  const valid = createTestEnvelope(type, options);
  const envelope = { ...valid.envelope, body: valid.envelope.body.replace('"user_id":"', '"user_id":"0') };
  return { ...valid, raw: JSON.stringify(envelope), envelope };
}
