import type { RawMessage } from './adapter.js';
import { appendLine } from './durable-append.js';
import type { ErrorCode } from './errors.js';

/**
 * One dead event, as a JSONL line. `raw` is the message exactly as received (base64 when it was
 * not valid UTF-8), so `partner-events replay` can verify the original signature again.
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
}

export interface DeadLetterSink {
  /** Resolves once the record is durable; the message is acked only after that. */
  write(record: DeadLetterRecord): Promise<void>;
  close(): Promise<void>;
}

// ignoreBOM: keep a leading byte-order mark, so `raw` is exactly the bytes received.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export function deadLetterRecord(
  message: RawMessage,
  failure: { code: ErrorCode; reason: string; eventId?: string | undefined; eventType?: string | undefined },
  source: string,
  now: Date = new Date(),
): DeadLetterRecord {
  let raw: string;
  let rawEncoding: 'utf8' | 'base64' = 'utf8';
  if (typeof message.body === 'string') {
    raw = message.body;
  } else {
    try {
      raw = utf8.decode(message.body);
    } catch {
      raw = Buffer.from(message.body).toString('base64');
      rawEncoding = 'base64';
    }
  }
  return {
    dead_lettered_at: now.toISOString(),
    code: failure.code,
    reason: failure.reason,
    attempts: message.attempt,
    source,
    message_id: message.id,
    enqueued_at: message.enqueuedAt === undefined ? null : new Date(message.enqueuedAt).toISOString(),
    event_id: failure.eventId ?? null,
    event_type: failure.eventType ?? null,
    metadata: message.metadata ?? {},
    raw,
    raw_encoding: rawEncoding,
  };
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

/** The original message bytes of a dead-letter record. */
export function rawOfDeadLetter(record: DeadLetterRecord): string | Uint8Array {
  return record.raw_encoding === 'base64' ? Buffer.from(record.raw, 'base64') : record.raw;
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

/**
 * Appends records to a JSONL file, serialised so lines never interleave. Each record opens the
 * file, appends, `datasync`s and closes it (`appendLine`: all of the line or none of it, the
 * file created 0600): dead letters are rare, durability matters more than speed, and a file
 * moved away by log rotation is simply created anew on the next record.
 */
export class JsonlDeadLetterSink implements DeadLetterSink {
  readonly path: string;
  #tail: Promise<void> = Promise.resolve();
  #count = 0;

  constructor(path: string) {
    this.path = path;
  }

  /** Records written by this sink since it was created. */
  get count(): number {
    return this.#count;
  }

  write(record: DeadLetterRecord): Promise<void> {
    const line = JSON.stringify(record);
    const next = this.#tail.then(async () => {
      await appendLine(this.path, line);
      this.#count++;
    });
    this.#tail = next.catch(() => undefined);
    return next;
  }

  async close(): Promise<void> {
    await this.#tail;
  }
}

export function jsonlDeadLetters(path: string): JsonlDeadLetterSink {
  return new JsonlDeadLetterSink(path);
}
