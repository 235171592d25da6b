/**
 * Envelope verification, standard-webhooks style: ONE valid signed message, and every test
 * breaks exactly one thing of it and asserts the exact `VerificationError` code.
 */
import { createHmac } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  createTestEnvelope,
  TEST_SIGNING_SECRET,
  type TestEnvelopeOptions,
} from '../src/consumer/testing.js';
import { DEFAULT_MAX_ENVELOPE_BYTES, parseEnvelope } from '../src/core/envelope.js';
import { VERIFICATION_CODES, type VerificationCode, VerificationError } from '../src/core/errors.js';
import { Keyring } from '../src/core/secrets.js';
import { matchSignature, sign } from '../src/core/signature.js';
import {
  DEFAULT_MAX_AGE_SECONDS,
  DEFAULT_MAX_FUTURE_SKEW_SECONDS,
  type VerifyOptions,
  verifyMessage,
} from '../src/core/verify.js';

/** A fixed clock, on a whole second, so edges are exact. */
const NOW_MS = 1_780_000_000_000;
const NOW_S = NOW_MS / 1000;
const TYPE = 'daily.data.heart_rate.created';
const OTHER_SECRET = 'a-completely-different-secret';

const keyring = () => new Keyring([{ id: 'current', secret: TEST_SIGNING_SECRET }]);

/** The one valid message (signed now, with the test secret); `options` break one thing. */
function message(options: TestEnvelopeOptions = {}) {
  return createTestEnvelope(TYPE, { signedAt: NOW_S, ...options });
}

function verify(raw: string | Uint8Array, options: Partial<VerifyOptions> = {}) {
  return verifyMessage(raw, { keyring: keyring(), now: NOW_MS, ...options });
}

/** Runs `fn` and returns the `VerificationError` it throws; fails on success or any other throw. */
function verificationError(fn: () => unknown): VerificationError {
  let thrown: unknown;
  try {
    fn();
  } catch (error) {
    thrown = error;
  }
  expect(thrown, 'expected a VerificationError, got success').toBeDefined();
  expect(thrown).toBeInstanceOf(VerificationError);
  const error = thrown as VerificationError;
  expect(VERIFICATION_CODES).toContain(error.code);
  return error;
}

function expectCode(fn: () => unknown, code: VerificationCode): VerificationError {
  const error = verificationError(fn);
  expect(error.code).toBe(code);
  return error;
}

/** The valid message with its envelope re-serialised after `edit` (for fields `envelope` can't express). */
function withEnvelope(edit: (env: Record<string, unknown>) => void): string {
  const env = { ...message().envelope } as Record<string, unknown>;
  edit(env);
  return JSON.stringify(env);
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('the valid message', () => {
  it('verifies, as a string and as bytes', () => {
    const msg = message();
    for (const raw of [msg.raw, Buffer.from(msg.raw), new TextEncoder().encode(msg.raw)]) {
      const result = verify(raw);
      expect(result.eventId).toBe(msg.eventId);
      expect(result.eventType).toBe(TYPE);
      expect(result.signedAt).toBe(NOW_S);
      expect(result.keyId).toBe('current');
      expect(result.payload).toEqual(msg.event);
      expect(result.envelope).toEqual(msg.envelope);
    }
  });

  it('uses the defaults the spec and the design name', () => {
    expect(DEFAULT_MAX_AGE_SECONDS).toBe(300);
    expect(DEFAULT_MAX_FUTURE_SKEW_SECONDS).toBe(300);
    expect(DEFAULT_MAX_ENVELOPE_BYTES).toBe(1024 * 1024);
  });

  it('defaults `now` to the real clock', () => {
    const msg = createTestEnvelope(TYPE); // signed at the real now
    expect(verifyMessage(msg.raw, { keyring: keyring() }).eventId).toBe(msg.eventId);
    expectCode(
      () => verifyMessage(message().raw, { keyring: keyring(), now: NOW_MS + 301_000 }),
      'TIMESTAMP_TOO_OLD',
    );
  });
});

describe('sign', () => {
  it('is hex HMAC-SHA256 of signed_at + "." + body, keyed with the secret bytes', () => {
    const body = '{"event_id":"evt_1","event_type":"x","note":"héllo ☃ 😀"}';
    const expected = createHmac('sha256', 'k3y')
      .update(Buffer.from(`1780000000.${body}`, 'utf8'))
      .digest('hex');
    expect(sign(body, 'k3y', 1_780_000_000)).toBe(expected);
    expect(sign(body, new TextEncoder().encode('k3y'), 1_780_000_000)).toBe(expected);
    expect(expected).toMatch(/^[0-9a-f]{64}$/);
  });

  it('depends on every input', () => {
    const base = sign('{}', 'k', 1);
    expect(sign('{ }', 'k', 1)).not.toBe(base);
    expect(sign('{}', 'K', 1)).not.toBe(base);
    expect(sign('{}', 'k', 2)).not.toBe(base);
  });

  it('is what createTestEnvelope puts in the envelope', () => {
    const { envelope } = message();
    expect(envelope.signature).toBe(sign(envelope.body, TEST_SIGNING_SECRET, NOW_S));
  });
});

describe('parseEnvelope', () => {
  it('returns exactly the five envelope fields, from a string or bytes', () => {
    const msg = message({ envelope: { extra: 'kept out' } });
    const fromString = parseEnvelope(msg.raw);
    expect(Object.keys(fromString).sort()).toEqual([
      'body',
      'event_id',
      'event_type',
      'signature',
      'signed_at',
    ]);
    expect(parseEnvelope(Buffer.from(msg.raw))).toEqual(fromString);
    expect(fromString.body).toBe(msg.envelope.body);
  });

  it('does not verify anything (a forged envelope still parses)', () => {
    expect(parseEnvelope(message({ secret: OTHER_SECRET }).raw).event_id).toBeTypeOf('string');
  });
});

describe('MALFORMED_ENVELOPE', () => {
  it.each([
    ['empty input', ''],
    ['not JSON', 'hello'],
    ['truncated JSON', '{"event_id":'],
    ['a JSON array', '[]'],
    ['JSON null', 'null'],
    ['a JSON number', '42'],
    ['a JSON string', '"{}"'],
  ])('%s', (_name, raw) => {
    expectCode(() => verify(raw), 'MALFORMED_ENVELOPE');
  });

  it('the valid envelope wrapped in an array', () => {
    expectCode(() => verify(`[${message().raw}]`), 'MALFORMED_ENVELOPE');
  });

  it.each<[string, string, (env: Record<string, unknown>) => void]>([
    ['event_id', 'missing', (e) => delete e.event_id],
    ['event_id', 'empty', (e) => (e.event_id = '')],
    ['event_id', 'a number', (e) => (e.event_id = 42)],
    ['event_id', 'null', (e) => (e.event_id = null)],
    ['event_type', 'missing', (e) => delete e.event_type],
    ['event_type', 'empty', (e) => (e.event_type = '')],
    ['signed_at', 'a numeric string', (e) => (e.signed_at = String(NOW_S))],
    ['signed_at', 'a float (1.5)', (e) => (e.signed_at = 1.5)],
    ['signed_at', 'a float near now', (e) => (e.signed_at = NOW_S + 0.5)],
    ['signed_at', 'negative', (e) => (e.signed_at = -1)],
    ['signed_at', 'missing', (e) => delete e.signed_at],
    ['signed_at', 'null', (e) => (e.signed_at = null)],
    ['signed_at', 'beyond the safe integers', (e) => (e.signed_at = 2 ** 53)],
    ['signature', 'missing', (e) => delete e.signature],
    ['signature', 'a number', (e) => (e.signature = 1234)],
    ['signature', 'an array of strings', (e) => (e.signature = [String(e.signature)])],
    ['body', 'missing', (e) => delete e.body],
    ['body', 'a nested object', (e) => (e.body = JSON.parse(String(e.body)))],
    ['body', 'null', (e) => (e.body = null)],
  ])('%s %s', (field, _how, edit) => {
    const error = expectCode(() => verify(withEnvelope(edit)), 'MALFORMED_ENVELOPE');
    expect(error.details).toEqual({ field });
  });

  it('signed_at beyond Number range written as 1e400 in JSON', () => {
    const raw = message().raw.replace(`"signed_at":${NOW_S}`, '"signed_at":1e400');
    expect(raw).toContain('1e400');
    expectCode(() => verify(raw), 'MALFORMED_ENVELOPE');
  });

  it('signed_at written as 1780000000.0 is the same integer (JSON has one number type)', () => {
    const raw = message().raw.replace(`"signed_at":${NOW_S}`, `"signed_at":${NOW_S}.0`);
    expect(verify(raw).signedAt).toBe(NOW_S);
  });

  it('invalid UTF-8 bytes given as Uint8Array', () => {
    const bytes = Buffer.from(message().raw);
    const at = bytes.indexOf('user_id');
    const broken = new Uint8Array(bytes);
    broken[at] = 0xff; // never valid in UTF-8
    expectCode(() => verify(broken), 'MALFORMED_ENVELOPE');
    // A lone continuation byte and a truncated multi-byte sequence, too.
    expectCode(() => verify(new Uint8Array([0x7b, 0x80, 0x7d])), 'MALFORMED_ENVELOPE');
    expectCode(() => verify(new Uint8Array([0x7b, 0x22, 0xe2, 0x82, 0x22, 0x7d])), 'MALFORMED_ENVELOPE');
    // The shared decoder is not left in a broken state.
    expect(verify(Buffer.from(message().raw)).keyId).toBe('current');
  });

  it('is not confused by valid multi-byte UTF-8 in bytes', () => {
    const msg = message({ fields: { note: 'Grüße ☃ 😀 中文' } });
    expect(verify(new TextEncoder().encode(msg.raw)).payload.note).toBe('Grüße ☃ 😀 中文');
  });
});

describe('ENVELOPE_TOO_LARGE', () => {
  const padded = (bytes: number) => message({ fields: { padding: 'x'.repeat(bytes) } });

  it('a string over the default 1 MiB, although its signature is valid', () => {
    const msg = padded(DEFAULT_MAX_ENVELOPE_BYTES);
    // The signature really is valid: with a larger limit it verifies.
    expect(verify(msg.raw, { maxEnvelopeBytes: 4 * DEFAULT_MAX_ENVELOPE_BYTES }).eventId).toBe(msg.eventId);
    const error = expectCode(() => verify(msg.raw), 'ENVELOPE_TOO_LARGE');
    expect(error.details).toMatchObject({ maxBytes: DEFAULT_MAX_ENVELOPE_BYTES });
  });

  it('bytes over the default 1 MiB, although the signature is valid', () => {
    const msg = padded(DEFAULT_MAX_ENVELOPE_BYTES);
    const bytes = Buffer.from(msg.raw);
    expect(verify(bytes, { maxEnvelopeBytes: 4 * DEFAULT_MAX_ENVELOPE_BYTES }).eventId).toBe(msg.eventId);
    expectCode(() => verify(bytes), 'ENVELOPE_TOO_LARGE');
  });

  it('is checked before any JSON parse and before the HMAC', () => {
    const msg = padded(DEFAULT_MAX_ENVELOPE_BYTES);
    const ring = keyring();
    const active = vi.spyOn(ring, 'active');
    const parse = vi.spyOn(JSON, 'parse');
    for (const raw of [msg.raw, Buffer.from(msg.raw)]) {
      expectCode(() => verifyMessage(raw, { keyring: ring, now: NOW_MS }), 'ENVELOPE_TOO_LARGE');
    }
    expect(parse).not.toHaveBeenCalled();
    expect(active).not.toHaveBeenCalled(); // no key was ever looked at: no HMAC computed
  });

  it('counts UTF-8 bytes, not UTF-16 code units, with the limit inclusive', () => {
    const msg = message({ fields: { note: '☃'.repeat(2000) } }); // 1 code unit, 3 bytes each
    const bytes = Buffer.byteLength(msg.raw, 'utf8');
    expect(msg.raw.length).toBeLessThan(bytes - 3000);
    expect(verify(msg.raw, { maxEnvelopeBytes: bytes }).eventId).toBe(msg.eventId);
    expectCode(() => verify(msg.raw, { maxEnvelopeBytes: bytes - 1 }), 'ENVELOPE_TOO_LARGE');
    expectCode(() => verify(msg.raw, { maxEnvelopeBytes: msg.raw.length }), 'ENVELOPE_TOO_LARGE');
    const encoded = Buffer.from(msg.raw);
    expect(verify(encoded, { maxEnvelopeBytes: bytes }).eventId).toBe(msg.eventId);
    expectCode(() => verify(encoded, { maxEnvelopeBytes: bytes - 1 }), 'ENVELOPE_TOO_LARGE');
  });

  it('counts a surrogate pair as 4 bytes', () => {
    const msg = message({ fields: { note: '😀'.repeat(500) } });
    const bytes = Buffer.byteLength(msg.raw, 'utf8');
    expect(verify(msg.raw, { maxEnvelopeBytes: bytes }).eventId).toBe(msg.eventId);
    expectCode(() => verify(msg.raw, { maxEnvelopeBytes: bytes - 1 }), 'ENVELOPE_TOO_LARGE');
  });

  it('applies to malformed input too (size first)', () => {
    expectCode(() => verify('x'.repeat(101), { maxEnvelopeBytes: 100 }), 'ENVELOPE_TOO_LARGE');
    expectCode(() => parseEnvelope(new Uint8Array(101).fill(0xff), 100), 'ENVELOPE_TOO_LARGE');
  });
});

describe('TIMESTAMP_TOO_OLD / TIMESTAMP_TOO_NEW: freshness both ways', () => {
  it('age exactly 300 s passes, 301 s fails', () => {
    expect(verify(message({ signedAt: NOW_S - 300 }).raw).signedAt).toBe(NOW_S - 300);
    expectCode(() => verify(message({ signedAt: NOW_S - 301 }).raw), 'TIMESTAMP_TOO_OLD');
  });

  it('exactly 300 s in the future passes, 301 s fails', () => {
    expect(verify(message({ signedAt: NOW_S + 300 }).raw).signedAt).toBe(NOW_S + 300);
    expectCode(() => verify(message({ signedAt: NOW_S + 301 }).raw), 'TIMESTAMP_TOO_NEW');
  });

  it('very old and very new', () => {
    expectCode(() => verify(message({ signedAt: 0 }).raw), 'TIMESTAMP_TOO_OLD');
    expectCode(() => verify(message({ signedAt: NOW_S + 86_400 * 365 }).raw), 'TIMESTAMP_TOO_NEW');
  });

  it('maxAgeSeconds is configurable', () => {
    const opts = { maxAgeSeconds: 60 };
    expect(verify(message({ signedAt: NOW_S - 60 }).raw, opts).signedAt).toBe(NOW_S - 60);
    expectCode(() => verify(message({ signedAt: NOW_S - 61 }).raw, opts), 'TIMESTAMP_TOO_OLD');
    const wide = { maxAgeSeconds: 3600 };
    expect(verify(message({ signedAt: NOW_S - 3600 }).raw, wide).signedAt).toBe(NOW_S - 3600);
    expectCode(() => verify(message({ signedAt: NOW_S - 3601 }).raw, wide), 'TIMESTAMP_TOO_OLD');
  });

  it('maxFutureSkewSeconds is configurable', () => {
    const opts = { maxFutureSkewSeconds: 5 };
    expect(verify(message({ signedAt: NOW_S + 5 }).raw, opts).signedAt).toBe(NOW_S + 5);
    expectCode(() => verify(message({ signedAt: NOW_S + 6 }).raw, opts), 'TIMESTAMP_TOO_NEW');
    const none = { maxFutureSkewSeconds: 0 };
    expect(verify(message().raw, none).signedAt).toBe(NOW_S);
    expectCode(() => verify(message({ signedAt: NOW_S + 1 }).raw, none), 'TIMESTAMP_TOO_NEW');
  });

  it('the future limit does not depend on maxAgeSeconds, nor the age limit on the skew', () => {
    expectCode(
      () => verify(message({ signedAt: NOW_S + 301 }).raw, { maxAgeSeconds: 10_000 }),
      'TIMESTAMP_TOO_NEW',
    );
    expectCode(
      () => verify(message({ signedAt: NOW_S - 301 }).raw, { maxFutureSkewSeconds: 10_000 }),
      'TIMESTAMP_TOO_OLD',
    );
  });

  it('reports the measured values in details', () => {
    const error = expectCode(() => verify(message({ signedAt: NOW_S - 400 }).raw), 'TIMESTAMP_TOO_OLD');
    expect(error.details).toMatchObject({
      signedAt: NOW_S - 400,
      reference: NOW_S,
      measuredAgainst: 'clock',
    });
  });
});

describe('backlog is not an attack (enqueuedAt)', () => {
  const enqueuedAt = NOW_MS - 10 * 60_000;
  const backlogged = () => message({ signedAt: NOW_S - 10 * 60 - 2 }); // signed 2 s before it was enqueued

  it('a message enqueued 10 minutes ago, signed just before, passes although the clock says 10 min old', () => {
    const msg = backlogged();
    expectCode(() => verify(msg.raw), 'TIMESTAMP_TOO_OLD'); // the clock alone would reject it
    const result = verify(msg.raw, { enqueuedAt });
    expect(result.eventId).toBe(msg.eventId);
  });

  it('measures age against the enqueue time with the same inclusive edge', () => {
    const enq = NOW_MS - 3_600_000;
    const enqS = enq / 1000;
    expect(verify(message({ signedAt: enqS - 300 }).raw, { enqueuedAt: enq }).keyId).toBe('current');
    const error = expectCode(
      () => verify(message({ signedAt: enqS - 301 }).raw, { enqueuedAt: enq }),
      'TIMESTAMP_TOO_OLD',
    );
    expect(error.details).toMatchObject({ reference: enqS, measuredAgainst: 'enqueued_at' });
  });

  it('an old envelope re-sent now (fresh enqueuedAt) is still rejected', () => {
    const old = message({ signedAt: NOW_S - 10 * 60 });
    expectCode(() => verify(old.raw, { enqueuedAt: NOW_MS - 1000 }), 'TIMESTAMP_TOO_OLD');
    expectCode(() => verify(old.raw, { enqueuedAt: NOW_MS }), 'TIMESTAMP_TOO_OLD');
  });

  it('strictAge measures against the clock and rejects the backlog', () => {
    expectCode(() => verify(backlogged().raw, { enqueuedAt, strictAge: true }), 'TIMESTAMP_TOO_OLD');
    expect(verify(message().raw, { enqueuedAt, strictAge: true }).keyId).toBe('current');
  });

  it('the future check is always against the clock, not the enqueue time', () => {
    expectCode(
      () => verify(message({ signedAt: NOW_S + 301 }).raw, { enqueuedAt: NOW_MS + 3_600_000 }),
      'TIMESTAMP_TOO_NEW',
    );
  });

  it('checkAge: false skips the age check but not the future check', () => {
    const ancient = message({ signedAt: NOW_S - 30 * 86_400 });
    expect(verify(ancient.raw, { checkAge: false }).eventId).toBe(ancient.eventId);
    expect(verify(ancient.raw, { checkAge: false, strictAge: true }).eventId).toBe(ancient.eventId);
    expect(verify(ancient.raw, { checkAge: false, enqueuedAt: NOW_MS }).eventId).toBe(ancient.eventId);
    expectCode(
      () => verify(message({ signedAt: NOW_S + 301 }).raw, { checkAge: false }),
      'TIMESTAMP_TOO_NEW',
    );
    // An old forged message is still a signature mismatch.
    expectCode(
      () => verify(message({ signedAt: NOW_S - 30 * 86_400, secret: OTHER_SECRET }).raw, { checkAge: false }),
      'SIGNATURE_MISMATCH',
    );
  });
});

describe('SIGNATURE_MISMATCH', () => {
  it('signed with the wrong secret', () => {
    expectCode(() => verify(message({ secret: OTHER_SECRET }).raw), 'SIGNATURE_MISMATCH');
  });

  it('a valid signature of another body', () => {
    const other = message();
    expectCode(
      () => verify(message({ envelope: { signature: other.envelope.signature } }).raw),
      'SIGNATURE_MISMATCH',
    );
  });

  it('the body changed by one character', () => {
    const msg = message();
    const body = msg.envelope.body.replace('"user_id":"', '"user_id":"0');
    const tampered = { ...msg.envelope, body };
    expectCode(() => verify(JSON.stringify(tampered)), 'SIGNATURE_MISMATCH');
  });

  it('signed_at changed by one second (it is part of the signed string)', () => {
    const msg = message();
    expectCode(() => verify(JSON.stringify({ ...msg.envelope, signed_at: NOW_S - 1 })), 'SIGNATURE_MISMATCH');
  });

  // Each malformed form is made from the envelope's own, correct signature: it must fail for being
  // malformed, not because it signs something else.
  it.each([
    ['empty', () => ''],
    ['one hex digit short', (sig: string) => sig.slice(0, 63)],
    ['one hex digit long', (sig: string) => `${sig}0`],
    ['doubled', (sig: string) => sig.repeat(2)],
    ['32 raw bytes as base64', (sig: string) => Buffer.from(sig, 'hex').toString('base64')],
    ['non-hex character', (sig: string) => `${sig.slice(0, 63)}g`],
    ['a non-hex character in the middle', (sig: string) => `${sig.slice(0, 31)}g${sig.slice(32)}`],
    ['a non-hex first character', (sig: string) => `g${sig.slice(1)}`],
    // Node's hex decoder reads only the low byte of a UTF-16 unit: U+1538 decodes as the digit 8,
    // so this decodes to the right 32 bytes.
    [
      'a non-ASCII character whose low byte is the right hex digit',
      (sig: string) => `${sig.slice(0, 63)}${String.fromCharCode(0x1500 + sig.charCodeAt(63))}`,
    ],
    [
      'a two-byte character whose low byte is the right hex digit',
      (sig: string) => `${sig.slice(0, 63)}${String.fromCharCode(0x100 + sig.charCodeAt(63))}`,
    ],
    [
      'a lone surrogate whose low byte is the right hex digit',
      (sig: string) => `${String.fromCharCode(0xd800 + sig.charCodeAt(0))}${sig.slice(1)}`,
    ],
    ['non-hex characters throughout', () => 'z'.repeat(64)],
    ['a 0x prefix', (sig: string) => `0x${sig.slice(2)}`],
    ['surrounding whitespace', (sig: string) => ` ${sig} `],
    ['a trailing newline', (sig: string) => `${sig}\n`],
    ['a v1= prefix', (sig: string) => `v1=${sig}`],
    ['non-ASCII digits', (sig: string) => `${sig.slice(0, 62)}٣٣`],
    ['all zeros', () => '0'.repeat(64)],
  ])('signature %s', (_name, malformed: (sig: string) => string) => {
    const msg = message();
    const signature = malformed(msg.envelope.signature);
    expectCode(() => verify(JSON.stringify({ ...msg.envelope, signature })), 'SIGNATURE_MISMATCH');
  });

  // The signature is decoded into one buffer that every call reuses: a decode that stops short
  // must not be completed by the bytes the previous message left there.
  it.each([
    ['last pair', (sig: string) => `${sig.slice(0, 62)}zz`],
    ['last digit', (sig: string) => `${sig.slice(0, 63)}z`],
    ['first pair', (sig: string) => `zz${sig.slice(2)}`],
  ])('signature with a non-hex %s, right after the same message verified', (_name, malformed) => {
    const msg = message();
    expect(verify(msg.raw).keyId).toBe('current');
    const signature = malformed(msg.envelope.signature);
    expectCode(() => verify(JSON.stringify({ ...msg.envelope, signature })), 'SIGNATURE_MISMATCH');
    expect(verify(msg.raw).keyId).toBe('current');
  });

  it('uppercase hex passes (hex is case-insensitive)', () => {
    const msg = message();
    const upper = msg.envelope.signature.toUpperCase();
    expect(upper).not.toBe(msg.envelope.signature);
    expect(verify(JSON.stringify({ ...msg.envelope, signature: upper })).keyId).toBe('current');
    const mixed = [...msg.envelope.signature].map((c, i) => (i % 2 ? c.toUpperCase() : c)).join('');
    expect(verify(JSON.stringify({ ...msg.envelope, signature: mixed })).keyId).toBe('current');
  });

  it('with no key active at all', () => {
    const ring = new Keyring([{ id: 'current', secret: TEST_SIGNING_SECRET, notAfter: NOW_MS }]);
    expectCode(() => verifyMessage(message().raw, { keyring: ring, now: NOW_MS }), 'SIGNATURE_MISMATCH');
  });

  it('never shows a secret in the error', () => {
    const error = expectCode(() => verify(message({ secret: OTHER_SECRET }).raw), 'SIGNATURE_MISMATCH');
    const shown = `${error.message} ${JSON.stringify(error.details)} ${error.stack}`;
    expect(shown).not.toContain(TEST_SIGNING_SECRET);
    expect(shown).not.toContain(OTHER_SECRET);
  });
});

describe('BODY_NOT_JSON', () => {
  it.each([
    ['plain text', 'not json'],
    ['truncated JSON', '{"event_id":'],
    ['an empty body', ''],
    ['a JSON array', '[{"event_id":"evt_1"}]'],
    ['JSON null', 'null'],
    ['a JSON string', '"evt_1"'],
    ['a JSON number', '42'],
  ])('signed body that is %s', (_name, body) => {
    expectCode(() => verify(message({ body }).raw), 'BODY_NOT_JSON');
  });
});

describe('ENVELOPE_MISMATCH: only the signed part is trusted', () => {
  it('envelope event_id differs from the body', () => {
    const error = expectCode(
      () => verify(message({ envelope: { event_id: 'evt_attacker' } }).raw),
      'ENVELOPE_MISMATCH',
    );
    expect(error.details).toEqual({ field: 'event_id' });
  });

  it('envelope event_type differs from the body', () => {
    const error = expectCode(
      () => verify(message({ envelope: { event_type: 'daily.data.steps.created' } }).raw),
      'ENVELOPE_MISMATCH',
    );
    expect(error.details).toEqual({ field: 'event_type' });
  });

  it('body without event_id / event_type, or with a non-string copy', () => {
    expectCode(
      () => verify(message({ body: '{"event_type":"daily.data.heart_rate.created"}' }).raw),
      'ENVELOPE_MISMATCH',
    );
    const msg = message({ fields: { event_id: 42 } });
    expect(msg.envelope.event_id).toBe('42');
    expectCode(() => verify(msg.raw), 'ENVELOPE_MISMATCH');
  });

  it('returned ids and payload come from the signed body; unsigned envelope extras are ignored', () => {
    const msg = message({
      fields: { extra_field: { nested: [1, 2] } },
      envelope: { user_id: 'evil', value: -1 },
    });
    const result = verify(msg.raw);
    expect(result.payload).toEqual(msg.event);
    expect(result.payload.event_id).toBe(msg.event.event_id);
    expect(result.eventId).toBe(result.payload.event_id);
    expect(result.eventType).toBe(result.payload.event_type);
    expect(result.payload.user_id).toBe(msg.event.user_id);
    expect(result.payload.value).toBe(62);
    expect(result.payload.extra_field).toEqual({ nested: [1, 2] });
    expect(result.envelope).not.toHaveProperty('user_id');
  });
});

describe('order of the checks: the body is parsed only after age and HMAC pass', () => {
  const bodyParses = (raw: string, options: Partial<VerifyOptions> = {}) => {
    const parse = vi.spyOn(JSON, 'parse');
    let code: string | undefined;
    try {
      verify(raw, options);
    } catch (error) {
      code = (error as VerificationError).code;
    }
    const calls = parse.mock.calls.map((c) => c[0]);
    parse.mockRestore();
    return { code, calls };
  };

  it('a valid message: one parse for the envelope, one for the body', () => {
    const msg = message();
    const { code, calls } = bodyParses(msg.raw);
    expect(code).toBeUndefined();
    expect(calls).toEqual([msg.raw, msg.envelope.body]);
  });

  it.each<[string, () => string, VerificationCode]>([
    ['stale', () => message({ signedAt: NOW_S - 301 }).raw, 'TIMESTAMP_TOO_OLD'],
    ['from the future', () => message({ signedAt: NOW_S + 301 }).raw, 'TIMESTAMP_TOO_NEW'],
    ['forged', () => message({ secret: OTHER_SECRET }).raw, 'SIGNATURE_MISMATCH'],
    [
      'stale and forged',
      () => message({ signedAt: NOW_S - 301, secret: OTHER_SECRET }).raw,
      'TIMESTAMP_TOO_OLD',
    ],
    ['malformed signature', () => message({ envelope: { signature: 'nope' } }).raw, 'SIGNATURE_MISMATCH'],
  ])('a %s message never has its body parsed', (_name, raw, expected) => {
    const text = raw();
    const { code, calls } = bodyParses(text);
    expect(code).toBe(expected);
    expect(calls).toEqual([text]); // exactly once, for the envelope
  });

  it('a forged body that is not JSON reports SIGNATURE_MISMATCH, not BODY_NOT_JSON', () => {
    expectCode(() => verify(message({ body: 'not json', secret: OTHER_SECRET }).raw), 'SIGNATURE_MISMATCH');
  });

  it('a stale message is rejected before any key is used', () => {
    const ring = keyring();
    const active = vi.spyOn(ring, 'active');
    expectCode(
      () => verifyMessage(message({ signedAt: NOW_S - 301 }).raw, { keyring: ring, now: NOW_MS }),
      'TIMESTAMP_TOO_OLD',
    );
    expect(active).not.toHaveBeenCalled();
    verifyMessage(message().raw, { keyring: ring, now: NOW_MS });
    expect(active).toHaveBeenCalledWith(NOW_MS);
  });

  it('a stale message with a mismatched envelope is TIMESTAMP_TOO_OLD (age before everything else)', () => {
    expectCode(
      () => verify(message({ signedAt: NOW_S - 301, envelope: { event_id: 'evt_other' } }).raw),
      'TIMESTAMP_TOO_OLD',
    );
  });
});

describe('secret rotation', () => {
  const NEW_SECRET = 'the-new-signing-secret-2026-11';
  const rotating = (notAfter: number) =>
    new Keyring([
      { id: 'current', secret: NEW_SECRET },
      { id: 'previous', secret: TEST_SIGNING_SECRET, notAfter },
    ]);

  it('a message signed with the previous secret passes and reports keyId "previous"', () => {
    const ring = rotating(NOW_MS + 60_000);
    const result = verifyMessage(message().raw, { keyring: ring, now: NOW_MS });
    expect(result.keyId).toBe('previous');
    expect(verifyMessage(message({ secret: NEW_SECRET }).raw, { keyring: ring, now: NOW_MS }).keyId).toBe(
      'current',
    );
  });

  it('once notAfter has passed the previous secret no longer verifies', () => {
    for (const notAfter of [NOW_MS - 1, NOW_MS]) {
      const ring = rotating(notAfter);
      expectCode(() => verifyMessage(message().raw, { keyring: ring, now: NOW_MS }), 'SIGNATURE_MISMATCH');
      expect(verifyMessage(message({ secret: NEW_SECRET }).raw, { keyring: ring, now: NOW_MS }).keyId).toBe(
        'current',
      );
    }
    // ...and one millisecond before it, it still does.
    const ring = rotating(NOW_MS + 1);
    expect(verifyMessage(message().raw, { keyring: ring, now: NOW_MS }).keyId).toBe('previous');
  });

  it('notAfter is judged at `now`, the same clock as the age', () => {
    const ring = rotating(NOW_MS + 60_000);
    const msg = message({ signedAt: NOW_S + 30 });
    expect(verifyMessage(msg.raw, { keyring: ring, now: NOW_MS }).keyId).toBe('previous');
    expectCode(() => verifyMessage(msg.raw, { keyring: ring, now: NOW_MS + 60_000 }), 'SIGNATURE_MISMATCH');
  });

  it('keyring.replace takes effect at once', () => {
    const ring = keyring();
    const msg = message();
    expect(verifyMessage(msg.raw, { keyring: ring, now: NOW_MS }).keyId).toBe('current');
    ring.replace([{ id: 'rotated', secret: NEW_SECRET }]);
    expect(ring.ids).toEqual(['rotated']);
    expectCode(() => verifyMessage(msg.raw, { keyring: ring, now: NOW_MS }), 'SIGNATURE_MISMATCH');
    expect(verifyMessage(message({ secret: NEW_SECRET }).raw, { keyring: ring, now: NOW_MS }).keyId).toBe(
      'rotated',
    );
  });

  it('a failed replace keeps the old keys', () => {
    const ring = keyring();
    expect(() => ring.replace([])).toThrow();
    expect(verifyMessage(message().raw, { keyring: ring, now: NOW_MS }).keyId).toBe('current');
  });

  it('the first matching key in configured order wins', () => {
    const ring = new Keyring([
      { id: 'a', secret: TEST_SIGNING_SECRET },
      { id: 'b', secret: TEST_SIGNING_SECRET },
    ]);
    expect(verifyMessage(message().raw, { keyring: ring, now: NOW_MS }).keyId).toBe('a');
  });

  it('a Uint8Array secret verifies like its UTF-8 string', () => {
    const ring = new Keyring([{ id: 'bytes', secret: new TextEncoder().encode(TEST_SIGNING_SECRET) }]);
    expect(verifyMessage(message().raw, { keyring: ring, now: NOW_MS }).keyId).toBe('bytes');
  });
});

describe('matchSignature: constant time, never throws', () => {
  const body = '{"event_id":"evt_1","event_type":"t"}';
  const keys = keyring().active(NOW_MS);
  const good = sign(body, TEST_SIGNING_SECRET, NOW_S);

  it('returns the key id for a good signature, upper or lower case', () => {
    expect(matchSignature(NOW_S, body, good, keys)).toBe('current');
    expect(matchSignature(NOW_S, body, good.toUpperCase(), keys)).toBe('current');
    expect(matchSignature(NOW_S, body, good, [])).toBeUndefined();
    expect(matchSignature(NOW_S + 1, body, good, keys)).toBeUndefined();
  });

  it('malformed signatures of every length 0..130 never throw and return undefined; the right one among them matches', () => {
    const alphabets = ['0', 'f', 'F', 'g', 'z', ' ', '=', '\u00e9', '😀', '\u0000'];
    const matchedAt: number[] = [];
    for (let length = 0; length <= 130; length++) {
      const candidates = [
        good.repeat(3).slice(0, length), // a prefix/extension of the right signature
        ...alphabets.map((c) => c.repeat(length)),
        length === 0 ? '' : `${good.repeat(3).slice(0, length - 1)}g`, // right prefix, one non-hex char
      ];
      for (const signature of candidates) {
        let result: string | undefined = 'threw';
        expect(() => {
          result = matchSignature(NOW_S, body, signature, keys);
        }).not.toThrow();
        // The right signature is among the candidates (at 64): it must match, so the
        // undefined of all the others is a refusal and not a check that never runs.
        const expected = signature.toLowerCase() === good ? 'current' : undefined;
        expect(result, `length ${length}: ${JSON.stringify(signature)}`).toBe(expected);
        if (result !== undefined) matchedAt.push(length);
      }
    }
    expect(matchedAt).toEqual([64]);
  });

  it('through verifyMessage every such signature is SIGNATURE_MISMATCH', () => {
    const msg = message();
    for (let length = 0; length <= 130; length++) {
      const signature = `${msg.envelope.signature}${msg.envelope.signature}${msg.envelope.signature}`.slice(
        0,
        length,
      );
      if (length === 64) continue;
      expectCode(() => verify(JSON.stringify({ ...msg.envelope, signature })), 'SIGNATURE_MISMATCH');
    }
  });
});
