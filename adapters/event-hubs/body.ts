const utf8 = new TextDecoder('utf-8', { fatal: true });
const QUOTE = 0x22;

/**
 * The envelope text of an event body, as received with `skipParsingBodyAsJson: true` (so the SDK
 * hands over a data section's bytes untouched instead of guessing at JSON).
 *
 * - Bytes holding the envelope JSON (what .NET, Python, Java and a JS publisher sending a Buffer
 *   put on the wire): decoded as UTF-8, exactly. Invalid UTF-8 is passed on as bytes, so the
 *   pipeline dead-letters it (MALFORMED_ENVELOPE) with the original bytes in the record.
 * - Bytes holding a JSON *string literal* (a JS publisher that sent the envelope as a string:
 *   the SDK `JSON.stringify`s string bodies): unquoted with `JSON.parse`, which gives back the
 *   original string exactly.
 * - A string (an AMQP value section): as is.
 * - Any other value (an AMQP map/list, e.g. a publisher that sent the envelope as an object in a
 *   value section): re-serialised with `JSON.stringify`. This is safe for the HMAC because the
 *   signature covers `signed_at + "." + body`, where `body` is a string field of the envelope;
 *   a string survives re-serialisation unchanged. An envelope whose `body` is not a string is
 *   rejected by the pipeline either way.
 */
export function envelopeText(body: unknown): string | Uint8Array {
  if (typeof body === 'string') return body;
  if (body instanceof Uint8Array) return bytesToText(body);
  if (Array.isArray(body) && body.length > 0 && body.every((part) => part instanceof Uint8Array)) {
    return bytesToText(Buffer.concat(body)); // several data sections: one payload
  }
  if (body === undefined || body === null) return '';
  return JSON.stringify(body) ?? '';
}

function bytesToText(bytes: Uint8Array): string | Uint8Array {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return bytes;
  }
  if (bytes[firstNonSpace(bytes)] === QUOTE) {
    try {
      const inner: unknown = JSON.parse(text);
      if (typeof inner === 'string') return inner;
    } catch {
      // Not a JSON string after all: the text is what was sent.
    }
  }
  return text;
}

function firstNonSpace(bytes: Uint8Array): number {
  let i = 0;
  // space, tab, LF, CR: JSON's insignificant whitespace
  while (
    i < bytes.length &&
    (bytes[i] === 0x20 || bytes[i] === 0x09 || bytes[i] === 0x0a || bytes[i] === 0x0d)
  )
    i++;
  return i;
}
