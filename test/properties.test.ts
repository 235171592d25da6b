/**
 * Property tests of the verification (fast-check prints the seed and the shrunk counterexample
 * on failure; re-run with `{ seed, path }` to reproduce).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseEnvelope } from '../src/core/envelope.js';
import { VERIFICATION_CODES, VerificationError } from '../src/core/errors.js';
import { Keyring, type SigningSecret } from '../src/core/secrets.js';
import { sign } from '../src/core/signature.js';
import { type VerifyOptions, verifyMessage } from '../src/core/verify.js';

const NUM_RUNS = 150;
const params = { numRuns: NUM_RUNS };

/** Secrets the Keyring accepts: non-empty, no surrounding whitespace; any Unicode, or raw bytes. */
const secretArb: fc.Arbitrary<string | Uint8Array> = fc.oneof(
  fc.string({ unit: 'binary', minLength: 1, maxLength: 64 }).filter((s) => s.trim() === s && s.length > 0),
  fc
    .string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 64 })
    .filter((s) => s.trim() === s && s.length > 0),
  fc.uint8Array({ minLength: 1, maxLength: 64 }),
);

/** Any JSON object with Unicode strings, plus the ids the envelope copies. */
const eventArb = fc.record({
  eventId: fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }),
  eventType: fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }),
  extra: fc.dictionary(
    fc.string({ unit: 'binary', maxLength: 12 }),
    fc.jsonValue({ stringUnit: 'binary', maxDepth: 3 }),
    { maxKeys: 8 },
  ),
});

/** Unix seconds from 1970 to far beyond 2100. */
const signedAtArb = fc.integer({ min: 0, max: 2 ** 40 });

interface Signed {
  event: { eventId: string; eventType: string };
  signedAt: number;
  raw: string;
  envelope: { event_id: string; event_type: string; signed_at: number; signature: string; body: string };
  body: string;
  expected: Record<string, unknown>;
  keyring: Keyring;
  now: number;
}

function signed(
  event: { eventId: string; eventType: string; extra: Record<string, unknown> },
  secret: string | Uint8Array,
  signedAt: number,
): Signed {
  const body = JSON.stringify({ ...event.extra, event_id: event.eventId, event_type: event.eventType });
  const envelope = {
    event_id: event.eventId,
    event_type: event.eventType,
    signed_at: signedAt,
    signature: sign(body, secret, signedAt),
    body,
  };
  const secrets: SigningSecret[] = [{ id: 'k', secret }];
  return {
    event,
    signedAt,
    raw: JSON.stringify(envelope),
    envelope,
    body,
    expected: JSON.parse(body) as Record<string, unknown>,
    keyring: new Keyring(secrets),
    now: signedAt * 1000,
  };
}

/** An envelope of any event, signed with any secret at any signed_at. */
const signedArb = fc
  .tuple(eventArb, secretArb, signedAtArb)
  .map(([event, secret, signedAt]) => signed(event, secret, signedAt));

/** Runs verification; returns the result, or the code of a VerificationError. Any other throw fails. */
function outcome(raw: string | Uint8Array, options: VerifyOptions) {
  try {
    return { ok: true as const, result: verifyMessage(raw, options) };
  } catch (error) {
    if (!(error instanceof VerificationError)) throw error;
    expect(VERIFICATION_CODES).toContain(error.code);
    return { ok: false as const, code: error.code };
  }
}

/** Verifies `raw` with the keyring that signed `s`, as of its signing time, at any size. */
function verifySigned(s: Signed, raw: string | Uint8Array) {
  return outcome(raw, { keyring: s.keyring, now: s.now, maxEnvelopeBytes: 1 << 24 });
}

/** A different UTF-16 code unit that is not a surrogate (lone surrogates: test/regressions.test.ts). */
const otherCharArb = fc
  .integer({ min: 0, max: 0xffff })
  .filter((c) => c < 0xd800 || c > 0xdfff)
  .map((c) => String.fromCharCode(c));

describe('sign → verify round trip', () => {
  it('any JSON object body, any secret, any signed_at: verifies, with ids and payload from the body', () => {
    fc.assert(
      fc.property(signedArb, (s) => {
        const { event, signedAt } = s;
        for (const raw of [s.raw, Buffer.from(s.raw, 'utf8')]) {
          const r = verifySigned(s, raw);
          expect(r.ok).toBe(true);
          if (!r.ok) return;
          expect(r.result.payload).toEqual(s.expected);
          expect(r.result.eventId).toBe(event.eventId);
          expect(r.result.eventType).toBe(event.eventType);
          expect(r.result.signedAt).toBe(signedAt);
          expect(r.result.keyId).toBe('k');
          expect(r.result.envelope.body).toBe(s.body);
        }
      }),
      params,
    );
  });

  it('a string secret and its UTF-8 bytes are the same key', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'binary', minLength: 1, maxLength: 32 }).filter((s) => s.trim() === s),
        signedAtArb,
        (secret, signedAt) => {
          const body = '{"event_id":"e","event_type":"t"}';
          expect(sign(body, secret, signedAt)).toBe(sign(body, Buffer.from(secret, 'utf8'), signedAt));
          const ring = new Keyring([{ id: 'bytes', secret: Buffer.from(secret, 'utf8') }]);
          const raw = JSON.stringify({
            event_id: 'e',
            event_type: 't',
            signed_at: signedAt,
            signature: sign(body, secret, signedAt),
            body,
          });
          expect(verifyMessage(raw, { keyring: ring, now: signedAt * 1000 }).keyId).toBe('bytes');
        },
      ),
      params,
    );
  });

  it('a different secret never verifies', () => {
    fc.assert(
      fc.property(eventArb, secretArb, secretArb, signedAtArb, (event, secret, other, signedAt) => {
        fc.pre(Buffer.compare(Buffer.from(secret), Buffer.from(other)) !== 0);
        const s = signed(event, secret, signedAt);
        const ring = new Keyring([{ id: 'other', secret: other }]);
        const r = outcome(s.raw, { keyring: ring, now: s.now, maxEnvelopeBytes: 1 << 24 });
        expect(r).toEqual({ ok: false, code: 'SIGNATURE_MISMATCH' });
      }),
      params,
    );
  });
});

describe('tampering', () => {
  it('changing any single character of the signed body → SIGNATURE_MISMATCH', () => {
    fc.assert(
      fc.property(signedArb, fc.nat(), otherCharArb, (s, at, c) => {
        const i = at % s.body.length;
        fc.pre(s.body[i] !== c);
        const body = s.body.slice(0, i) + c + s.body.slice(i + 1);
        const raw = JSON.stringify({ ...s.envelope, body });
        const r = verifySigned(s, raw);
        // Replacing half of a surrogate pair leaves a lone surrogate: refused before the HMAC.
        const code = body.isWellFormed() ? 'SIGNATURE_MISMATCH' : 'MALFORMED_ENVELOPE';
        expect(r).toEqual({ ok: false, code });
      }),
      params,
    );
  });

  it('changing any single character of the signature → SIGNATURE_MISMATCH (case changes are no change)', () => {
    fc.assert(
      fc.property(signedArb, fc.nat(63), otherCharArb, (s, i, c) => {
        const original = s.envelope.signature[i] as string;
        fc.pre(original.toLowerCase() !== c.toLowerCase());
        const signature = s.envelope.signature.slice(0, i) + c + s.envelope.signature.slice(i + 1);
        const raw = JSON.stringify({ ...s.envelope, signature });
        const r = verifySigned(s, raw);
        expect(r).toEqual({ ok: false, code: 'SIGNATURE_MISMATCH' });
      }),
      params,
    );
  });

  it('changing signed_at by any amount → SIGNATURE_MISMATCH (or an age error, never success)', () => {
    fc.assert(
      fc.property(
        signedArb,
        fc.integer({ min: -1000, max: 1000 }).filter((d) => d !== 0),
        (s, delta) => {
          const { signedAt } = s;
          fc.pre(signedAt + delta >= 0);
          const raw = JSON.stringify({ ...s.envelope, signed_at: signedAt + delta });
          const r = verifySigned(s, raw);
          expect(r.ok).toBe(false);
          if (!r.ok)
            expect(['SIGNATURE_MISMATCH', 'TIMESTAMP_TOO_OLD', 'TIMESTAMP_TOO_NEW']).toContain(r.code);
        },
      ),
      params,
    );
  });

  it('flipping any bit of the raw message bytes: a VerificationError, or a success that trusts the same content', () => {
    fc.assert(
      fc.property(signedArb, fc.nat(), fc.integer({ min: 0, max: 7 }), (s, at, bit) => {
        const { event, signedAt } = s;
        const bytes = new Uint8Array(Buffer.from(s.raw, 'utf8'));
        const i = at % bytes.length;
        bytes[i] = (bytes[i] as number) ^ (1 << bit);
        const r = verifySigned(s, bytes);
        if (r.ok) {
          // Only harmless changes may pass (e.g. the case of a hex digit of the signature).
          expect(r.result.payload).toEqual(s.expected);
          expect(r.result.eventId).toBe(event.eventId);
          expect(r.result.eventType).toBe(event.eventType);
          expect(r.result.signedAt).toBe(signedAt);
          expect(r.result.envelope.body).toBe(s.body);
        }
      }),
      { numRuns: NUM_RUNS * 2 },
    );
  });

  it('replacing the envelope copies of the ids → ENVELOPE_MISMATCH', () => {
    fc.assert(
      fc.property(
        signedArb,
        fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }),
        fc.boolean(),
        (s, other, whichId) => {
          const field = whichId ? 'event_id' : 'event_type';
          fc.pre(s.envelope[field] !== other);
          const raw = JSON.stringify({ ...s.envelope, [field]: other });
          const r = verifySigned(s, raw);
          expect(r).toEqual({ ok: false, code: 'ENVELOPE_MISMATCH' });
        },
      ),
      params,
    );
  });
});

describe('timestamps at the tolerance edges, for any clock', () => {
  const body = '{"event_id":"e","event_type":"t"}';
  const ring = new Keyring([{ id: 'k', secret: 'edge-secret' }]);
  const rawAt = (signedAt: number) =>
    JSON.stringify({
      event_id: 'e',
      event_type: 't',
      signed_at: signedAt,
      signature: sign(body, 'edge-secret', signedAt),
      body,
    });

  it('age == maxAge passes and maxAge + 1 fails; skew == maxFuture passes and maxFuture + 1 fails', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 10_000_000, max: 2 ** 42 }), // now in ms, any sub-second part
        fc.option(fc.integer({ min: 0, max: 86_400 }), { nil: undefined }),
        fc.option(fc.integer({ min: 0, max: 86_400 }), { nil: undefined }),
        (now, maxAgeSeconds, maxFutureSkewSeconds) => {
          const nowS = Math.floor(now / 1000);
          const maxAge = maxAgeSeconds ?? 300;
          const maxFuture = maxFutureSkewSeconds ?? 300;
          const opts: VerifyOptions = {
            keyring: ring,
            now,
            ...(maxAgeSeconds === undefined ? {} : { maxAgeSeconds }),
            ...(maxFutureSkewSeconds === undefined ? {} : { maxFutureSkewSeconds }),
          };
          expect(outcome(rawAt(nowS), opts).ok).toBe(true);
          if (nowS - maxAge >= 0) expect(outcome(rawAt(nowS - maxAge), opts).ok).toBe(true);
          if (nowS - maxAge - 1 >= 0) {
            expect(outcome(rawAt(nowS - maxAge - 1), opts)).toEqual({ ok: false, code: 'TIMESTAMP_TOO_OLD' });
          }
          expect(outcome(rawAt(nowS + maxFuture), opts).ok).toBe(true);
          expect(outcome(rawAt(nowS + maxFuture + 1), opts)).toEqual({
            ok: false,
            code: 'TIMESTAMP_TOO_NEW',
          });
        },
      ),
      { numRuns: 300 },
    );
  });

  it('with a broker time, age is measured against it (and the future against the clock)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1_000_000_000_000, max: 2 ** 42 }),
        fc.integer({ min: 0, max: 7 * 86_400_000 }), // how long the message waited in the queue
        (now, waitedMs) => {
          const enqueuedAt = now - waitedMs;
          const enqS = Math.floor(enqueuedAt / 1000);
          const opts: VerifyOptions = { keyring: ring, now, enqueuedAt };
          expect(outcome(rawAt(enqS - 300), opts).ok).toBe(true);
          expect(outcome(rawAt(enqS - 301), opts)).toEqual({ ok: false, code: 'TIMESTAMP_TOO_OLD' });
          const strict = outcome(rawAt(enqS - 300), { ...opts, strictAge: true });
          const ageByClock = Math.floor(now / 1000) - (enqS - 300);
          expect(strict.ok).toBe(ageByClock <= 300);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('arbitrary input never escapes as anything but a VerificationError', () => {
  const ring = new Keyring([{ id: 'k', secret: 'fuzz-secret' }]);
  const opts: VerifyOptions = { keyring: ring, now: 1_780_000_000_000 };

  it('arbitrary strings', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (raw) => {
        outcome(raw, opts);
      }),
      { numRuns: 500 },
    );
  });

  it('arbitrary bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (raw) => {
        outcome(raw, opts);
      }),
      { numRuns: 500 },
    );
  });

  it('arbitrary JSON texts', () => {
    fc.assert(
      fc.property(fc.json({ stringUnit: 'binary' }), (raw) => {
        outcome(raw, opts);
        outcome(Buffer.from(raw), opts);
      }),
      { numRuns: 300 },
    );
  });

  it('envelope-shaped objects with arbitrary field values, and any size limit', () => {
    const anyValue = fc.oneof(
      fc.jsonValue({ stringUnit: 'binary', maxDepth: 2 }),
      fc.integer({ min: 1_779_999_000, max: 1_780_001_000 }),
      fc.string({ unit: fc.constantFrom(...'0123456789abcdefABCDEF'), minLength: 64, maxLength: 64 }),
      fc.constant('{"event_id":"e","event_type":"t"}'),
    );
    fc.assert(
      fc.property(
        fc.record(
          {
            event_id: anyValue,
            event_type: anyValue,
            signed_at: anyValue,
            signature: anyValue,
            body: anyValue,
          },
          { requiredKeys: [] },
        ),
        fc.option(fc.integer({ min: 0, max: 2000 }), { nil: undefined }),
        fc.option(fc.integer({ min: 0, max: 2 ** 42 }), { nil: undefined }),
        fc.boolean(),
        (envelope, maxEnvelopeBytes, enqueuedAt, strictAge) => {
          outcome(JSON.stringify(envelope), {
            ...opts,
            strictAge,
            ...(maxEnvelopeBytes === undefined ? {} : { maxEnvelopeBytes }),
            ...(enqueuedAt === undefined ? {} : { enqueuedAt }),
          });
        },
      ),
      { numRuns: 500 },
    );
  });

  it('a correctly signed arbitrary body: success only for a JSON object with matching ids', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary' }), fc.json({ stringUnit: 'binary' })), (body) => {
        const signedAt = 1_780_000_000;
        const raw = JSON.stringify({
          event_id: 'e',
          event_type: 't',
          signed_at: signedAt,
          signature: sign(body, 'fuzz-secret', signedAt),
          body,
        });
        const r = outcome(raw, opts);
        if (r.ok) {
          expect(r.result.payload).toEqual(JSON.parse(body));
          expect(r.result.payload.event_id).toBe('e');
        } else {
          expect(['BODY_NOT_JSON', 'ENVELOPE_MISMATCH']).toContain(r.code);
        }
      }),
      params,
    );
  });
});

describe('prototype pollution', () => {
  const dangerousKey = fc.constantFrom('__proto__', 'constructor', 'prototype');
  const pollution = fc.record({
    key: dangerousKey,
    inner: dangerousKey,
    value: fc.jsonValue({ maxDepth: 1 }),
  });

  /** A JSON member that would pollute if a parser or a merge assigned it naively. */
  const member = (p: { key: string; inner: string; value: unknown }) =>
    `${JSON.stringify(p.key)}:{${JSON.stringify(p.inner)}:{"polluted":${JSON.stringify(p.value ?? null)}},"polluted":true}`;

  it('__proto__ / constructor keys in envelope and body never reach Object.prototype', () => {
    const protoKeysBefore = Object.getOwnPropertyNames(Object.prototype).sort();
    fc.assert(
      fc.property(pollution, pollution, fc.boolean(), (inEnvelope, inBody, asBytes) => {
        const signedAt = 1_780_000_000;
        const body = `{${member(inBody)},"event_id":"e","event_type":"t"}`;
        const raw = `{${member(inEnvelope)},"event_id":"e","event_type":"t","signed_at":${signedAt},"signature":"${sign(
          body,
          'proto-secret',
          signedAt,
        )}","body":${JSON.stringify(body)}}`;
        const ring = new Keyring([{ id: 'k', secret: 'proto-secret' }]);
        const result = verifyMessage(asBytes ? Buffer.from(raw) : raw, {
          keyring: ring,
          now: signedAt * 1000,
        });
        const plain: Record<string, unknown> = {};
        expect(plain.polluted).toBeUndefined();
        expect(({} as Record<string, unknown>).polluted).toBeUndefined();
        expect(Object.getOwnPropertyNames(Object.prototype).sort()).toEqual(protoKeysBefore);
        // The payload is an ordinary object; the dangerous key is just data on it.
        expect(Object.getPrototypeOf(result.payload)).toBe(Object.prototype);
        expect(Object.hasOwn(result.payload, inBody.key)).toBe(true);
        expect(result.eventId).toBe('e');
        // The parsed envelope keeps only its five fields.
        const env = parseEnvelope(raw);
        expect(Object.keys(env).sort()).toEqual(['body', 'event_id', 'event_type', 'signature', 'signed_at']);
        expect(Object.getPrototypeOf(env)).toBe(Object.prototype);
      }),
      params,
    );
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('a "__proto__" body member cannot smuggle event_id / event_type', () => {
    const signedAt = 1_780_000_000;
    const body = '{"__proto__":{"event_id":"e","event_type":"t"}}';
    const raw = JSON.stringify({
      event_id: 'e',
      event_type: 't',
      signed_at: signedAt,
      signature: sign(body, 'proto-secret', signedAt),
      body,
    });
    const ring = new Keyring([{ id: 'k', secret: 'proto-secret' }]);
    expect(outcome(raw, { keyring: ring, now: signedAt * 1000 })).toEqual({
      ok: false,
      code: 'ENVELOPE_MISMATCH',
    });
  });
});
