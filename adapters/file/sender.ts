import { appendLine } from '../../src/core/durable-append.js';
import { type Envelope, parseEnvelope } from '../../src/core/envelope.js';
import { AdapterError } from '../../src/core/errors.js';
import type { Target } from '../../src/core/target.js';

/**
 * `--to file:PATH`: appends each envelope as one JSONL line, all of it synced or none of it
 * (`appendLine`). Sends are serialised, so concurrent sends never interleave within a line. An
 * envelope written over several lines (pretty-printed JSON) is written compact (`oneLine`), or
 * refused: each line of a JSONL file is read as an envelope of its own.
 */
export function fileTarget(path: string): Target {
  let tail: Promise<unknown> = Promise.resolve();
  return {
    name: `file:${path}`,
    send(message) {
      const text =
        typeof message.body === 'string' ? message.body : Buffer.from(message.body).toString('utf8');
      const write = tail.then(() => appendLine(path, oneLine(text, path)));
      tail = write.catch(() => undefined);
      return write.then(() => ({ accepted: true, detail: 'appended' }));
    },
    close: async () => {
      await tail;
    },
  };
}

const LINE_BREAK = /[\r\n]/;

/**
 * `text` as one line: as it is when it has no line break; else the same JSON re-serialised
 * without whitespace. A line break can only be whitespace between JSON tokens (inside a string it
 * is escaped), so string values, `body` with them, keep every character. The compact form is
 * written only when the kit reads the same envelope from it: `parseEnvelope`, whose fields are all
 * that verification uses (the HMAC covers `signed_at + "." + body`), gives the same five fields for
 * both texts, so it verifies with any key exactly when the original does (a number such as
 * `signed_at` is re-written from its value, which is what the HMAC input is built from; duplicate
 * keys keep the last, as the parser does). It is also no longer than the original, so no size
 * limit the original met refuses it. Otherwise the write is refused (`AdapterError`): the hand-off
 * fails and the message stays where it was.
 */
export function oneLine(text: string, path: string): string {
  if (!LINE_BREAK.test(text)) return text;
  const refuse = (why: string, cause?: unknown) =>
    new AdapterError(`cannot write to ${path} as one JSONL line: the envelope spans lines and ${why}`, {
      cause,
      details: { path },
    });
  let compact: string;
  try {
    // A byte-order mark is not part of the envelope (parseEnvelope drops it too).
    compact = JSON.stringify(JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text));
  } catch (cause) {
    throw refuse('is not JSON', cause);
  }
  const original = envelopeOrUndefined(text);
  const rewritten = envelopeOrUndefined(compact);
  if (!original || !rewritten) throw refuse('is not a valid envelope');
  if (!sameEnvelope(original, rewritten)) throw refuse('its compact form would read differently');
  if (Buffer.byteLength(compact) > Buffer.byteLength(text)) throw refuse('its compact form is longer');
  return compact;
}

function envelopeOrUndefined(text: string): Envelope | undefined {
  try {
    return parseEnvelope(text, Number.POSITIVE_INFINITY);
  } catch {
    return undefined;
  }
}

function sameEnvelope(a: Envelope, b: Envelope): boolean {
  return (
    a.event_id === b.event_id &&
    a.event_type === b.event_type &&
    a.signed_at === b.signed_at &&
    a.signature === b.signature &&
    a.body === b.body
  );
}
