import { z } from 'zod';
import { DEFAULT_DEAD_LETTER_MAX_UNVERIFIED_BYTES } from '../core/dead-letter-record.js';
import { DEFAULT_MAX_ENVELOPE_BYTES } from '../core/envelope.js';
import { ConfigError } from '../core/errors.js';
import { DEFAULT_RETRY_POLICY } from '../core/outcome.js';
import { DEFAULT_MAX_AGE_SECONDS, DEFAULT_MAX_FUTURE_SKEW_SECONDS } from '../core/verify.js';
import { DEFAULT_LEASE_MS, DEFAULT_RETENTION_MS } from '../dedupe/types.js';

const positiveInt = z.number().int().positive();

/** See `maxInFlightBytes`; measured in docs/performance-log.md ("Large events in a long run"). */
export const DEFAULT_MAX_IN_FLIGHT_BYTES = 2 * 1024 * 1024;

/** Abandoned claims of one event before it is dead-lettered as HANDLER_ABANDONED. */
export const DEFAULT_MAX_ABANDONED_CLAIMS = 3;

/**
 * The consumer's tunable settings: one schema for the library and the CLI. Every field has a
 * default; `z.input` is what callers pass, `z.output` what the pipeline runs with.
 */
export const consumerSettingsSchema = z.strictObject({
  /** Messages processed at once. */
  concurrency: positiveInt.max(10_000).default(16),
  /**
   * Size of the messages in flight at most (bytes of binary bodies, characters of text ones),
   * 0 for no bound beside `concurrency`. Bounds memory, and keeps large events from filling V8's
   * young generation (docs/deployment.md, "Large events").
   */
  maxInFlightBytes: z.number().int().nonnegative().default(DEFAULT_MAX_IN_FLIGHT_BYTES),
  /** Messages larger than this are dead-lettered before any HMAC (ENVELOPE_TOO_LARGE). */
  maxEnvelopeBytes: positiveInt.default(DEFAULT_MAX_ENVELOPE_BYTES),
  /** Oldest accepted `signed_at`, in seconds (spec: 5 minutes). */
  maxAgeSeconds: positiveInt.default(DEFAULT_MAX_AGE_SECONDS),
  /** How far `signed_at` may be ahead of the clock, in seconds. */
  maxFutureSkewSeconds: z.number().int().nonnegative().default(DEFAULT_MAX_FUTURE_SKEW_SECONDS),
  /** Measure age against the clock even when the broker stamps an enqueue time. */
  strictAge: z.boolean().default(false),
  /** Check `signed_at` age at all (replay of dead letters turns it off). */
  checkAge: z.boolean().default(true),
  retry: z
    .strictObject({
      maxAttempts: positiveInt.default(DEFAULT_RETRY_POLICY.maxAttempts),
      baseDelayMs: z.number().int().nonnegative().default(DEFAULT_RETRY_POLICY.baseDelayMs),
      maxDelayMs: z.number().int().nonnegative().default(DEFAULT_RETRY_POLICY.maxDelayMs),
    })
    .prefault({}),
  /** How long a claim on an event_id holds without a heartbeat. */
  leaseMs: positiveInt.min(100).default(DEFAULT_LEASE_MS),
  /** How long a handled event_id is remembered (the publisher retries for 48 h). */
  retentionMs: positiveInt.default(DEFAULT_RETENTION_MS),
  /**
   * An event whose earlier claims were abandoned this many times (the worker died or hung while
   * handling it: the lease ran out without an outcome) is dead-lettered as HANDLER_ABANDONED
   * without running its handlers again. 0 turns this off.
   */
  maxAbandonedClaims: z.number().int().nonnegative().default(DEFAULT_MAX_ABANDONED_CLAIMS),
  /** A handler running longer is aborted (its signal fires) and the message retried. */
  handlerTimeoutMs: positiveInt.default(60_000),
  /** Types outside the catalog with no `onUnknown` handler: ack with a warning, or dead-letter. */
  unknownEventTypes: z.enum(['ack', 'dead-letter']).default('ack'),
  /** How long `stop()` waits for in-flight handlers before aborting them. */
  shutdownTimeoutMs: z.number().int().nonnegative().default(30_000),
  /**
   * Bytes of a message that never verified (anyone can send one) kept in its dead-letter record;
   * a longer one keeps this prefix with its length and SHA-256, and cannot be replayed.
   */
  deadLetterMaxUnverifiedBytes: positiveInt.default(DEFAULT_DEAD_LETTER_MAX_UNVERIFIED_BYTES),
});

export type ConsumerSettingsInput = z.input<typeof consumerSettingsSchema>;
export type ConsumerSettings = z.output<typeof consumerSettingsSchema>;

/** Validates settings, throwing a `ConfigError` that names each bad field. */
export function parseSettings(input: unknown): ConsumerSettings {
  const result = consumerSettingsSchema.safeParse(input);
  if (!result.success) {
    throw new ConfigError(`invalid consumer settings:\n${z.prettifyError(result.error)}`, {
      details: { issues: result.error.issues },
    });
  }
  return result.data;
}
