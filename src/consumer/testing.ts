/**
 * Helpers for partners' own tests: sign fixtures with a test secret, build envelopes that break
 * exactly one rule, and feed them through an in-memory source.
 */
import type { Envelope } from '../core/envelope.js';
import { SAMPLE_USER_ID, sampleEvent } from '../core/events/samples.js';
import {
  EVENT_TYPES,
  type EventMap,
  type EventType,
  isKnownEventType,
  type PartnerEvent,
  type UnknownEvent,
} from '../core/events/schemas.js';
import type { SigningSecret } from '../core/secrets.js';
import { sign } from '../core/signature.js';
import type { Handler, HandlerContext } from './router.js';

// Partners' unit tests feed the consumer from an in-process queue: `./testing` hands them the memory
// source with the fixtures (a static re-export, no SDK; no spec names it, so not the registry).
export {
  createMemorySource,
  type MemorySource,
  type MemorySourceOptions,
} from '../../adapters/memory/index.js';
export { SAMPLE_USER_ID, sampleEvent } from '../core/events/samples.js';
export { sign } from '../core/signature.js';

/** A secret for tests only. Never use it anywhere else. */
export const TEST_SIGNING_SECRET = 'test-signing-secret-do-not-use-in-production';

/** The secret before a rotation, for tests of the grace window. Tests only. */
export const TEST_PREVIOUS_SIGNING_SECRET = 'test-previous-signing-secret-do-not-use-in-production';

/** The keys of a consumer in a rotation's grace window: `current` and `previous`. */
export const TEST_ROTATION_SECRETS: readonly SigningSecret[] = [
  { id: 'current', secret: TEST_SIGNING_SECRET },
  { id: 'previous', secret: TEST_PREVIOUS_SIGNING_SECRET },
];

/** A body builder for one catalog type: valid by its schema; `fields` override (top level). */
export type Fixture<T extends EventType> = (fields?: Record<string, unknown>) => EventMap[T];

/**
 * A fixture builder for every catalog type, e.g. `fixtures['daily.data.steps.created']({ value: 0 })`.
 * Each call returns a fresh body with a new `event_id`.
 */
export const fixtures: { readonly [T in EventType]: Fixture<T> } = Object.fromEntries(
  EVENT_TYPES.map((type) => [type, (fields: Record<string, unknown> = {}) => sampleEvent(type, fields)]),
) as { readonly [T in EventType]: Fixture<T> };

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

/**
 * Signed with the secret from before a rotation (default `TEST_PREVIOUS_SIGNING_SECRET`): passes
 * while the consumer still has that key (`TEST_ROTATION_SECRETS`, key id `previous`), fails with
 * SIGNATURE_MISMATCH once it is gone.
 */
export function rotatedKeyEnvelope(
  type: EventType,
  options: TestEnvelopeOptions & { previousSecret?: string } = {},
): TestEnvelope {
  const { previousSecret, ...rest } = options;
  return createTestEnvelope(type, { ...rest, secret: previousSecret ?? TEST_PREVIOUS_SIGNING_SECRET });
}

/** One call of a spied handler. */
export interface HandlerCall<E> {
  readonly event: E;
  readonly context: HandlerContext;
  /** Set once the call returned (`ok`) or threw (`failed`, with `error`). */
  readonly state: 'running' | 'ok' | 'failed';
  readonly error?: unknown;
}

export interface HandlerSpy<E> {
  /** Register this: `consumer.on('daily.data.*', spy.handler)`. */
  readonly handler: Handler<E>;
  /** Every call so far, in order. */
  readonly calls: readonly HandlerCall<E>[];
  /** How many times the handler was called for `eventId`. */
  count(eventId: string): number;
  /**
   * Resolves with the `times`-th call (default the first) for `eventId` once it has finished,
   * whether it returned or threw. Rejects with a `HandlerSpyTimeoutError` after `timeoutMs`
   * (default 5000).
   */
  waitFor(eventId: string, options?: { timeoutMs?: number; times?: number }): Promise<HandlerCall<E>>;
  /** Forgets the calls (waiters keep waiting). */
  reset(): void;
}

/** `waitFor` ran out of time; `code` is stable. */
export class HandlerSpyTimeoutError extends Error {
  readonly code = 'WAIT_TIMEOUT';
  constructor(message: string) {
    super(message);
    this.name = 'HandlerSpyTimeoutError';
  }
}

/**
 * A handler that records its calls, so tests wait for an event instead of sleeping. `impl` runs
 * inside it (its result or error is the handler's); without it the handler succeeds.
 *
 *   const spy = createHandlerSpy();
 *   consumer.on('daily.data.steps.created', spy.handler);
 *   source.send(event.raw);
 *   await spy.waitFor(event.eventId);
 */
export function createHandlerSpy<E extends { readonly event_id: string } = PartnerEvent | UnknownEvent>(
  impl?: Handler<E>,
): HandlerSpy<E> {
  const calls: MutableCall<E>[] = [];
  const waiters = new Set<Waiter>();
  const settled = () => {
    for (const waiter of waiters) if (waiter.check()) waiters.delete(waiter);
  };
  return {
    handler: recordingHandler(impl, calls, settled),
    calls,
    count: (eventId) => calls.filter((c) => c.event.event_id === eventId).length,
    waitFor: (eventId, options = {}) => waitForCall(calls, waiters, eventId, options),
    reset() {
      calls.length = 0;
    },
  };
}

type MutableCall<E> = { -readonly [K in keyof HandlerCall<E>]: HandlerCall<E>[K] };

/** A pending `waitFor`: `check` settles it when its call has finished, and says whether it did. */
interface Waiter {
  check(): boolean;
}

/** Runs `impl` (or nothing), recording the call and its end in `calls`; `settled` after each. */
function recordingHandler<E>(
  impl: Handler<E> | undefined,
  calls: MutableCall<E>[],
  settled: () => void,
): Handler<E> {
  return async (event, context) => {
    const call: MutableCall<E> = { event, context, state: 'running' };
    calls.push(call);
    try {
      const result = impl ? await impl(event, context) : undefined;
      call.state = 'ok';
      return result;
    } catch (error) {
      call.state = 'failed';
      call.error = error;
      throw error;
    } finally {
      settled();
    }
  };
}

/** The `times`-th finished call for `eventId`, now or once it finishes; rejects after `timeoutMs`. */
function waitForCall<E extends { readonly event_id: string }>(
  calls: readonly HandlerCall<E>[],
  waiters: Set<Waiter>,
  eventId: string,
  options: { timeoutMs?: number; times?: number },
): Promise<HandlerCall<E>> {
  const times = options.times ?? 1;
  const timeoutMs = options.timeoutMs ?? 5000;
  const finished = () =>
    calls.filter((c) => c.event.event_id === eventId && c.state !== 'running')[times - 1];
  const done = finished();
  if (done) return Promise.resolve(done);
  return new Promise((resolve, reject) => {
    const waiter = {
      check() {
        const call = finished();
        if (!call) return false;
        clearTimeout(timer);
        resolve(call);
        return true;
      },
    };
    const timer = setTimeout(() => {
      waiters.delete(waiter);
      reject(
        new HandlerSpyTimeoutError(
          `handler was not called ${times === 1 ? '' : `${times} times `}for ${eventId} within ${timeoutMs} ms (${calls.length} calls so far)`,
        ),
      );
    }, timeoutMs);
    waiters.add(waiter);
  });
}
