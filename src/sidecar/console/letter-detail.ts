import type { DeadLetterRecord } from '../../core/dead-letter-record.js';
import { errorMessage, VerificationError } from '../../core/errors.js';
import type { Keyring } from '../../core/secrets.js';
import { verifyMessage } from '../../core/verify.js';

/** What the detail view shows of a letter: everything but the message itself. */
export interface LetterDetail {
  readonly n: number;
  readonly deadLetteredAt: string | null;
  readonly code: string | null;
  readonly reason: string | null;
  readonly attempts: number | null;
  readonly source: string | null;
  readonly messageId: string | null;
  readonly enqueuedAt: string | null;
  readonly eventId: string | null;
  readonly eventType: string | null;
  readonly metadata: Readonly<Record<string, unknown>>;
  readonly rawBytes: number;
  /** Verification with the keys active now (age not checked: a dead letter is old by nature). */
  readonly verification:
    | { readonly ok: true; readonly keyId: string }
    | { readonly ok: false; readonly code: string; readonly reason: string };
}

/** The message bytes a record holds, or why they cannot be verified. */
export function recordBytes(record: Partial<DeadLetterRecord>): Buffer | { code: string; reason: string } {
  if (typeof record.raw !== 'string') return { code: 'NOT_A_RECORD', reason: 'the line has no raw message' };
  if (record.raw_truncated) {
    return {
      code: 'DEAD_LETTER_TRUNCATED',
      reason: 'only the first bytes of this message were kept: it cannot verify',
    };
  }
  return Buffer.from(record.raw, record.raw_encoding === 'base64' ? 'base64' : 'utf8');
}

export function letterDetail(n: number, line: string, keyring: Keyring): LetterDetail {
  let record: Partial<DeadLetterRecord> = {};
  try {
    record = JSON.parse(line) as Partial<DeadLetterRecord>;
  } catch {
    // An unreadable line: shown with what little there is.
  }
  const bytes = recordBytes(record);
  return {
    n,
    deadLetteredAt: record.dead_lettered_at ?? null,
    code: record.code ?? null,
    reason: record.reason ?? null,
    attempts: record.attempts ?? null,
    source: record.source ?? null,
    messageId: record.message_id ?? null,
    enqueuedAt: record.enqueued_at ?? null,
    eventId: record.event_id ?? null,
    eventType: record.event_type ?? null,
    metadata: record.metadata ?? {},
    rawBytes: Buffer.isBuffer(bytes) ? bytes.length : (record.raw_bytes ?? 0),
    verification: Buffer.isBuffer(bytes) ? verifyNow(bytes, keyring) : { ok: false, ...bytes },
  };
}

function verifyNow(bytes: Buffer, keyring: Keyring): LetterDetail['verification'] {
  try {
    const verified = verifyMessage(bytes, { keyring, checkAge: false });
    return { ok: true, keyId: verified.keyId };
  } catch (error) {
    if (error instanceof VerificationError) return { ok: false, code: error.code, reason: error.message };
    return { ok: false, code: 'INTERNAL_ERROR', reason: errorMessage(error) };
  }
}
