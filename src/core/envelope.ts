import { VerificationError } from './errors.js';

/** The envelope the service publishes (spec, Events → Envelope). Extra fields are allowed. */
export interface Envelope {
  readonly event_id: string;
  readonly event_type: string;
  /** Unix epoch seconds, integer. */
  readonly signed_at: number;
  /** Hex HMAC-SHA256 of `signed_at + "." + body`. */
  readonly signature: string;
  /** The event payload as a JSON text: exactly the bytes that were signed. */
  readonly body: string;
}

/** 1 MiB: far above any event the catalog describes, small enough to bound memory per message. */
export const DEFAULT_MAX_ENVELOPE_BYTES = 1024 * 1024;

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Decodes raw message bytes as UTF-8, refusing invalid sequences instead of replacing them. */
export function decodeUtf8(raw: Uint8Array): string {
  try {
    return utf8.decode(raw);
  } catch {
    throw new VerificationError('MALFORMED_ENVELOPE', 'message is not valid UTF-8');
  }
}

function byteLengthExceeds(raw: string, maxBytes: number): boolean {
  // A UTF-16 code unit takes 1 to 3 UTF-8 bytes: skip the exact count when the answer is certain.
  if (raw.length > maxBytes) return true;
  if (raw.length * 3 <= maxBytes) return false;
  return Buffer.byteLength(raw, 'utf8') > maxBytes;
}

/**
 * Spec step 1: parse the envelope. The size limit is enforced before parsing, so an oversized
 * message costs neither a JSON parse nor an HMAC.
 */
export function parseEnvelope(raw: string | Uint8Array, maxBytes = DEFAULT_MAX_ENVELOPE_BYTES): Envelope {
  if (typeof raw !== 'string') {
    if (raw.byteLength > maxBytes) throw tooLarge(raw.byteLength, maxBytes);
    raw = decodeUtf8(raw);
  } else if (byteLengthExceeds(raw, maxBytes)) {
    throw tooLarge(Buffer.byteLength(raw, 'utf8'), maxBytes);
  } else if (raw.charCodeAt(0) === 0xfeff) {
    raw = raw.slice(1); // a byte-order mark is not part of the envelope (TextDecoder drops it for bytes too)
  }

  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw new VerificationError('MALFORMED_ENVELOPE', 'envelope is not valid JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new VerificationError('MALFORMED_ENVELOPE', 'envelope is not a JSON object');
  }
  const fields = value as Record<string, unknown>;
  const { event_id, event_type, signed_at, signature, body } = fields;
  if (typeof event_id !== 'string' || event_id.length === 0) throw missing('event_id', 'a non-empty string');
  if (typeof event_type !== 'string' || event_type.length === 0)
    throw missing('event_type', 'a non-empty string');
  if (typeof signed_at !== 'number' || !Number.isSafeInteger(signed_at) || signed_at < 0) {
    throw missing('signed_at', 'a non-negative integer (Unix seconds)');
  }
  if (typeof signature !== 'string') throw missing('signature', 'a string');
  if (typeof body !== 'string') throw missing('body', 'a string holding JSON (not a nested object)');
  // HMAC input is the UTF-8 encoding of the body, which maps every lone surrogate to U+FFFD: a
  // body with one could pass with the signature of a different text. No real JSON text has one.
  if (!body.isWellFormed()) {
    throw new VerificationError('MALFORMED_ENVELOPE', 'body contains an unpaired UTF-16 surrogate', {
      details: { field: 'body' },
    });
  }
  return { event_id, event_type, signed_at, signature, body };
}

function missing(field: string, expected: string): VerificationError {
  return new VerificationError('MALFORMED_ENVELOPE', `envelope field "${field}" must be ${expected}`, {
    details: { field },
  });
}

function tooLarge(size: number, maxBytes: number): VerificationError {
  return new VerificationError('ENVELOPE_TOO_LARGE', `envelope is ${size} bytes, the limit is ${maxBytes}`, {
    details: { size, maxBytes },
  });
}
