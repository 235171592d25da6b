import { createHash } from 'node:crypto';
import { type ErrorCode, VerificationError } from './errors.js';
import type { RawMessage } from './source-adapter.js';

/**
 * One dead event, as a JSONL line. For a verified event (`event_id` set), `raw` is the message
 * exactly as received (base64 when it was not valid UTF-8), so `partner-events replay` can verify
 * the original signature again. A message that never verified is stored bounded, since anyone
 * can send one: base64 when escaping its text for JSON would cost more than base64 does, and
 * beyond `maxUnverifiedBytes` only a prefix, with the whole message's length and SHA-256.
 */
export interface DeadLetterRecord {
  readonly dead_lettered_at: string;
  readonly code: ErrorCode;
  readonly reason: string;
  readonly attempts: number;
  readonly source: string;
  readonly message_id: string;
  readonly enqueued_at: string | null;
  /** From the signed body when the signature verified; null otherwise (never the unsigned copy). */
  readonly event_id: string | null;
  readonly event_type: string | null;
  readonly metadata: Readonly<Record<string, string | number | boolean | null>>;
  readonly raw: string;
  readonly raw_encoding: 'utf8' | 'base64';
  /** Present (true) when `raw` holds only the first bytes of the message: it cannot be replayed. */
  readonly raw_truncated?: true;
  /** With `raw_truncated`: the whole message's length in bytes. */
  readonly raw_bytes?: number;
  /** With `raw_truncated`: the SHA-256 of the whole message, hex. */
  readonly raw_sha256?: string;
}

/** How much of a message that never verified a dead-letter record keeps, by default. */
export const DEFAULT_DEAD_LETTER_MAX_UNVERIFIED_BYTES = 64 * 1024;

export interface DeadLetterRecordOptions {
  /** Bytes of a message that never verified to keep (default 64 KiB); the rest is cut off. */
  readonly maxUnverifiedBytes?: number;
}

// ignoreBOM: keep a leading byte-order mark, so `raw` is exactly the bytes received.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export function deadLetterRecord(
  message: RawMessage,
  failure: { code: ErrorCode; reason: string; eventId?: string | undefined; eventType?: string | undefined },
  source: string,
  now: Date = new Date(),
  options: DeadLetterRecordOptions = {},
): DeadLetterRecord {
  let stored: StoredRaw;
  if (failure.eventId !== undefined) {
    stored = exactRaw(message.body);
  } else {
    stored = boundedRaw(message.body, options.maxUnverifiedBytes ?? DEFAULT_DEAD_LETTER_MAX_UNVERIFIED_BYTES);
    // Already a prefix (a truncated record, replayed): it stays marked as one, describing the original.
    if (message.truncated) {
      stored = {
        ...stored,
        raw_truncated: true,
        raw_bytes: message.truncated.bytes,
        raw_sha256: message.truncated.sha256,
      };
    }
  }
  return {
    dead_lettered_at: now.toISOString(),
    code: failure.code,
    reason: failure.reason,
    attempts: message.attempt,
    source,
    message_id: message.id,
    enqueued_at: isoTime(message.enqueuedAt),
    event_id: failure.eventId ?? null,
    event_type: failure.eventType ?? null,
    metadata: message.metadata ?? {},
    ...stored,
  };
}

/**
 * An enqueue time as ISO text, or null when there is none a Date can hold: a library user's own
 * loop may pass `NaN` (`Number(attributes.SentTimestamp)` when the attribute was not asked for),
 * which verification ignores, and building the record must not throw on it either: a record
 * that cannot be built would keep a dead message retrying forever.
 */
function isoTime(ms: number | undefined): string | null {
  if (ms === undefined || !Number.isFinite(ms) || Math.abs(ms) > MAX_DATE_MS) return null;
  return new Date(ms).toISOString();
}

/** The largest distance from the epoch a Date can hold (ECMAScript, 100,000,000 days). */
const MAX_DATE_MS = 8.64e15;

type StoredRaw = Pick<
  DeadLetterRecord,
  'raw' | 'raw_encoding' | 'raw_truncated' | 'raw_bytes' | 'raw_sha256'
>;

/** A verified message, byte for byte: its text, or base64 when it is not valid UTF-8. */
function exactRaw(body: string | Uint8Array): StoredRaw {
  if (typeof body === 'string') return { raw: body, raw_encoding: 'utf8' };
  try {
    return { raw: utf8.decode(body), raw_encoding: 'utf8' };
  } catch {
    return { raw: Buffer.from(body).toString('base64'), raw_encoding: 'base64' };
  }
}

/**
 * A message that never verified, bounded: at most `maxBytes` of it (a longer one keeps a prefix,
 * its length and SHA-256), as text only while JSON escaping costs no more than base64 (4 bytes
 * per 3), so the record grows at most 4/3 of what was kept, whatever the bytes are.
 */
function boundedRaw(body: string | Uint8Array, maxBytes: number): StoredRaw {
  const bytes =
    typeof body === 'string'
      ? Buffer.from(body, 'utf8')
      : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const truncated = bytes.length > maxBytes;
  const kept = truncated ? bytes.subarray(0, maxBytes) : bytes;
  // A string kept whole stays the string: exact even where it is not well-formed UTF-16.
  const text = typeof body === 'string' && !truncated ? body : decodeOrUndefined(kept);
  const base64Length = Math.ceil(kept.length / 3) * 4;
  const stored: StoredRaw =
    text !== undefined && Buffer.byteLength(JSON.stringify(text)) - 2 <= base64Length
      ? { raw: text, raw_encoding: 'utf8' }
      : { raw: kept.toString('base64'), raw_encoding: 'base64' };
  if (!truncated) return stored;
  return {
    ...stored,
    raw_truncated: true,
    raw_bytes: bytes.length,
    raw_sha256: createHash('sha256').update(bytes).digest('hex'),
  };
}

function decodeOrUndefined(bytes: Uint8Array): string | undefined {
  try {
    return utf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/** Whether a parsed JSONL line is a dead-letter record (rather than a bare envelope). */
export function isDeadLetterRecord(value: unknown): value is DeadLetterRecord {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as Record<string, unknown>).raw === 'string' &&
    typeof (value as Record<string, unknown>).dead_lettered_at === 'string'
  );
}

/** Whether the record keeps only a prefix of its message (`raw_truncated`): nothing to verify or replay. */
export function isTruncatedDeadLetter(record: DeadLetterRecord): boolean {
  return record.raw_truncated === true;
}

/** What the record stores in `raw`, decoded: the message, or only its prefix when truncated. */
export function storedRawOfDeadLetter(record: DeadLetterRecord): string | Uint8Array {
  return record.raw_encoding === 'base64' ? Buffer.from(record.raw, 'base64') : record.raw;
}

/**
 * The original message bytes of a dead-letter record. Throws `VerificationError`
 * `DEAD_LETTER_TRUNCATED` for a record that keeps only a prefix: a prefix is never re-driven.
 */
export function rawOfDeadLetter(record: DeadLetterRecord): string | Uint8Array {
  if (isTruncatedDeadLetter(record)) throw truncatedError(record);
  return storedRawOfDeadLetter(record);
}

/** Why a truncated record cannot be verified or replayed, naming what is left of the message. */
export function truncatedError(record: DeadLetterRecord): VerificationError {
  const kept = storedRawOfDeadLetter(record);
  const keptBytes = typeof kept === 'string' ? Buffer.byteLength(kept) : kept.byteLength;
  return new VerificationError(
    'DEAD_LETTER_TRUNCATED',
    `the record keeps only the first ${keptBytes} of the message's ${record.raw_bytes ?? 'unknown'} bytes: it cannot be verified or replayed`,
    { details: { raw_bytes: record.raw_bytes, raw_sha256: record.raw_sha256 } },
  );
}

/**
 * The envelope to verify again when a dead letter is replayed or inspected: the original
 * message, except that a Storage Queue message rejected for its transport encoding (base64 text
 * while `none` was configured) is decoded, as its record's hint says.
 */
export function envelopeOfDeadLetter(record: DeadLetterRecord): string | Uint8Array {
  const raw = rawOfDeadLetter(record);
  if (
    record.code === 'ENCODING_MISMATCH' &&
    record.metadata.encoding_hint === 'looks-base64' &&
    typeof raw === 'string'
  ) {
    return Buffer.from(raw, 'base64').toString('utf8');
  }
  return raw;
}
