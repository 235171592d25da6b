/**
 * How a Storage Queue message's text becomes the envelope text the HMAC is checked on.
 *
 * The service stores text. The JS SDK sends it as-is; Azure Functions and the .NET SDK's
 * `QueueMessageEncoding.Base64` send base64 of the UTF-8 bytes. The signature covers the envelope,
 * so the envelope must be recovered exactly: a wrong guess never "repairs" a message, it delivers
 * the raw text, rejected as ENCODING_MISMATCH with a hint in the metadata (kept for replay).
 */

/** `auto`: plain JSON as-is, else base64 of a JSON envelope; `base64`: always decode; `none`: never. */
export type MessageEncoding = 'auto' | 'base64' | 'none';

/**
 * Why a message's text did not match the configured encoding:
 * - `looks-base64`: `none` is configured, but the text is base64 of a JSON envelope.
 * - `looks-plain`: `base64` is configured, but the text is plain JSON.
 * - `not-base64`: `base64` is configured, but the text is not base64.
 * - `not-utf8`: the text is base64, but of bytes that are not UTF-8 text.
 */
export type EncodingHint = 'looks-base64' | 'looks-plain' | 'not-base64' | 'not-utf8';

export interface DecodedText {
  /** The envelope text handed to the pipeline (and signed by the publisher, when all is well). */
  readonly text: string;
  /** Whether `text` was decoded from base64 (`base64`) or is the message text itself (`none`). */
  readonly applied: 'base64' | 'none';
  /** Set when the text does not fit the configured encoding; `text` is then the raw text. */
  readonly hint?: EncodingHint;
}

/** What to tell an operator for each hint: the likely fix. */
export const ENCODING_FIXES: Readonly<Record<EncodingHint, string>> = {
  'looks-base64':
    "the message text is base64 of a JSON envelope but encoding is 'none': set encoding to 'base64' or 'auto'",
  'looks-plain': "the message text is plain JSON but encoding is 'base64': set encoding to 'none' or 'auto'",
  'not-base64': "the message text is not base64 but encoding is 'base64': check the sender's encoding",
  'not-utf8': "the message text is base64, but not of UTF-8 text: check the sender's encoding",
};

// Canonical base64 (RFC 4648 §4, padded), the alphabet .NET and Functions write. Base64url or
// unpadded text is not accepted: it is not what a Storage Queue sender produces.
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Whether the text opens like a JSON object (whitespace and a byte-order mark allowed first). */
export function looksLikeJsonObject(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    // space, tab, LF, CR (JSON whitespace) and U+FEFF (a byte-order mark)
    if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d || c === 0xfeff) continue;
    return c === 0x7b; // {
  }
  return false;
}

/** The UTF-8 text that `text` is the base64 of, or why there is none. */
function fromBase64(text: string): { text: string } | { hint: 'not-base64' | 'not-utf8' } {
  const trimmed = text.trim();
  if (trimmed.length === 0 || !BASE64.test(trimmed)) return { hint: 'not-base64' };
  try {
    return { text: utf8.decode(Buffer.from(trimmed, 'base64')) };
  } catch {
    return { hint: 'not-utf8' };
  }
}

/** Recovers the envelope text from a message's text under the configured encoding. */
export function decodeMessageText(raw: string, encoding: MessageEncoding): DecodedText {
  switch (encoding) {
    case 'none': {
      if (looksLikeJsonObject(raw)) return { text: raw, applied: 'none' };
      const decoded = fromBase64(raw);
      // Only a confident diagnosis earns a hint: base64 of something that is itself an envelope.
      if ('text' in decoded && looksLikeJsonObject(decoded.text)) {
        return { text: raw, applied: 'none', hint: 'looks-base64' };
      }
      return { text: raw, applied: 'none' };
    }
    case 'base64': {
      const decoded = fromBase64(raw);
      if ('text' in decoded) return { text: decoded.text, applied: 'base64' };
      const hint = looksLikeJsonObject(raw) ? 'looks-plain' : decoded.hint;
      return { text: raw, applied: 'none', hint };
    }
    case 'auto': {
      if (looksLikeJsonObject(raw)) return { text: raw, applied: 'none' };
      const decoded = fromBase64(raw);
      if ('text' in decoded && looksLikeJsonObject(decoded.text)) {
        return { text: decoded.text, applied: 'base64' };
      }
      // Neither plain JSON nor base64 of it: deliver the text so the pipeline names the problem.
      return { text: raw, applied: 'none' };
    }
  }
}
