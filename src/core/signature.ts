import { createHmac, timingSafeEqual } from 'node:crypto';
import type { ActiveKey } from './secrets.js';

/**
 * 64 hex digits, checked before decoding: Node's hex decoder reads only the low byte of each
 * UTF-16 unit, so `Buffer.from('ᔸ', 'hex')` decodes U+1538 as the digit '8' (a decoded length
 * of 32 bytes does not prove the text was hex; the property tests found it).
 */
const SIGNATURE_HEX = /^[0-9a-fA-F]{64}$/;

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
  if (!SIGNATURE_HEX.test(signature)) return undefined;
  const expected = Buffer.from(signature, 'hex');
  const prefix = `${signedAt}.`;
  for (const { id, key } of keys) {
    const actual = createHmac('sha256', key).update(prefix).update(body).digest();
    if (timingSafeEqual(actual, expected)) return id;
  }
  return undefined;
}
