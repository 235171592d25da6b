import { createHmac, timingSafeEqual } from 'node:crypto';
import type { ActiveKey } from './secrets.js';

/** Hex characters of a SHA-256 signature. */
const SIGNATURE_HEX_LENGTH = 64;

/**
 * The service's signature: hex HMAC-SHA256 of `signed_at + "." + body`, keyed with the signing
 * secret's UTF-8 bytes. Exposed so tests and tools can sign their own fixtures.
 */
export function sign(body: string, secret: string | Uint8Array, signedAt: number): string {
  return createHmac('sha256', secret).update(`${signedAt}.`).update(body).digest('hex');
}

/**
 * Returns the id of the first active key whose HMAC matches, or `undefined`. Never throws: a
 * signature of the wrong length or with non-hex characters simply matches nothing. Comparison is
 * `timingSafeEqual` on two 32-byte buffers.
 */
export function matchSignature(
  signedAt: number,
  body: string,
  signature: string,
  keys: readonly ActiveKey[],
): string | undefined {
  if (signature.length !== SIGNATURE_HEX_LENGTH) return undefined;
  // Node stops decoding hex at the first character that is not hex (documented truncation), so
  // 32 bytes means all 64 characters were hex: the check a regex would make, without the regex.
  const expected = Buffer.from(signature, 'hex');
  if (expected.length !== SIGNATURE_HEX_LENGTH / 2) return undefined;
  const prefix = `${signedAt}.`;
  for (const { id, key } of keys) {
    const actual = createHmac('sha256', key).update(prefix).update(body).digest();
    if (timingSafeEqual(actual, expected)) return id;
  }
  return undefined;
}
