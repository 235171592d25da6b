import {
  envelopeOfDeadLetter,
  isDeadLetterRecord,
  isTruncatedDeadLetter,
  truncatedError,
} from '../core/dead-letter-record.js';
import { parseEnvelope } from '../core/envelope.js';
import { errorMessage, VerificationError } from '../core/errors.js';
import { validateEvent } from '../core/events/validate.js';
import type { Keyring } from '../core/secrets.js';
import { verifyMessage } from '../core/verify.js';
import { loadKeyring, parse, readInput, UsageError, writeLine } from './common.js';
import { ENV_MAX_ENVELOPE_BYTES, replayEnvelopeLimit } from './replay-config.js';
import { terminalSafe } from './terminal-safe.js';

export const VERIFY_USAGE = `Usage: partner-events verify [FILE|-] [--json] [--now UNIX] [--strict-age] [--no-age] [--max-envelope-bytes N] [--secrets-file PATH]

Checks envelopes (JSONL, one per line, or one JSON document; dead-letter records too) the way
the worker does: envelope, signed_at age, HMAC against every active secret, body, schema.
Age is measured the way the worker measured it: against the broker's enqueue time kept in a
dead-letter record, else against the clock (or --now).

  --json               one JSON object per input line
  --now UNIX           the current time in Unix seconds (check a capture as of when it arrived)
  --strict-age         measure age against the clock (or --now) even for dead-letter records
  --no-age             skip the age check
  --max-envelope-bytes N  larger messages fail as ENVELOPE_TOO_LARGE; give the worker's (default:
                       ${ENV_MAX_ENVELOPE_BYTES}, else 1048576), as replay does
  --secrets-file PATH  secrets (default: PARTNER_EVENTS_SECRETS_FILE, else
                       PARTNER_EVENTS_SIGNING_SECRET and PARTNER_EVENTS_SIGNING_SECRET_PREVIOUS)

Exit: 0 all ok, 1 any failed, 2 usage error.`;

export interface VerifyLineResult {
  line: number;
  ok: boolean;
  event_id: string | null;
  event_type: string | null;
  code: string | null;
  key_id: string | null;
  reason?: string;
  warning?: string;
}

export async function verifyCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    json: { type: 'boolean', default: false },
    now: { type: 'string' },
    'strict-age': { type: 'boolean', default: false },
    'no-age': { type: 'boolean', default: false },
    'max-envelope-bytes': { type: 'string' },
    'secrets-file': { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (values.help) {
    writeLine(VERIFY_USAGE);
    return 0;
  }
  if (positionals.length > 1) throw new UsageError('verify takes at most one FILE');
  let nowMs: number | undefined;
  if (values.now !== undefined) {
    const seconds = Number(values.now);
    if (!Number.isInteger(seconds) || seconds < 0)
      throw new UsageError(`--now must be Unix seconds, got "${values.now}"`);
    nowMs = seconds * 1000;
  }
  if (positionals[0] === undefined && process.stdin.isTTY) {
    // Reading a terminal would wait, silently, for envelopes nobody is about to type.
    throw new UsageError(
      'no FILE given, and standard input is a terminal: give a FILE, pipe the envelopes in, or give - to type or paste them (Ctrl-D ends)',
    );
  }
  // The worker's limit, resolved as replay resolves it, so that verify shows what a replay decides.
  const maxEnvelopeBytes = replayEnvelopeLimit(values['max-envelope-bytes'], process.env, undefined);
  const keyring = loadKeyring(values['secrets-file']);
  const text = readInput(positionals[0] ?? '-');

  const results = splitDocuments(text).map(({ line, raw }) =>
    verifyLine(line, raw, keyring, {
      now: nowMs ?? Date.now(),
      checkAge: !values['no-age'],
      strictAge: values['strict-age'],
      maxEnvelopeBytes,
    }),
  );
  if (values.json) {
    for (const r of results) writeLine(JSON.stringify(r));
  } else {
    printTable(results);
  }
  return results.every((r) => r.ok) ? 0 : 1;
}

/** One JSON document (possibly pretty-printed) or JSONL; blank lines are skipped. */
export function splitDocuments(text: string): { line: number; raw: string }[] {
  const trimmed = text.trim();
  if (trimmed.startsWith('{') && trimmed.includes('\n')) {
    try {
      JSON.parse(trimmed);
      return [{ line: 1, raw: trimmed }];
    } catch {
      // not a single document: JSONL
    }
  }
  const docs: { line: number; raw: string }[] = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    if (line.trim() !== '') docs.push({ line: i + 1, raw: line });
  });
  return docs;
}

function verifyLine(
  line: number,
  text: string,
  keyring: Keyring,
  options: { now: number; checkAge: boolean; strictAge: boolean; maxEnvelopeBytes: number },
): VerifyLineResult {
  let raw: string | Uint8Array = text;
  let enqueuedAt: number | undefined;
  if (text.includes('"dead_lettered_at"')) {
    let record: unknown;
    try {
      record = JSON.parse(text);
    } catch {
      // verified as an envelope below, which reports it as malformed
    }
    if (isDeadLetterRecord(record)) {
      if (isTruncatedDeadLetter(record)) {
        const { code, message } = truncatedError(record);
        return { line, ok: false, event_id: null, event_type: null, code, key_id: null, reason: message };
      }
      raw = envelopeOfDeadLetter(record);
      if (record.enqueued_at !== null) enqueuedAt = Date.parse(record.enqueued_at);
    }
  }
  try {
    const verified = verifyMessage(raw, { keyring, enqueuedAt, ...options });
    const validation = validateEvent(verified.eventType, verified.payload);
    const base = { line, event_id: verified.eventId, event_type: verified.eventType, key_id: verified.keyId };
    if (!validation.ok) return { ...base, ok: false, code: validation.code, reason: validation.reason };
    if (!validation.known) return { ...base, ok: true, code: null, warning: 'UNKNOWN_EVENT_TYPE' };
    return { ...base, ok: true, code: null };
  } catch (error) {
    const code = error instanceof VerificationError ? error.code : 'MALFORMED_ENVELOPE';
    return { line, ok: false, ...claimedIds(raw), code, key_id: null, reason: errorMessage(error) };
  }
}

/** The envelope's own (unsigned) ids, shown for failed lines so operators can find the event. */
function claimedIds(raw: string | Uint8Array): { event_id: string | null; event_type: string | null } {
  try {
    const envelope = parseEnvelope(raw, Number.POSITIVE_INFINITY);
    return { event_id: envelope.event_id, event_type: envelope.event_type };
  } catch {
    return { event_id: null, event_type: null };
  }
}

function printTable(results: VerifyLineResult[]): void {
  // The ids of a failed line are the envelope's unsigned copies: anyone could have written them.
  const rows = results.map((r) =>
    [
      String(r.line),
      r.ok ? 'ok' : 'FAILED',
      r.code ?? r.warning ?? '-',
      r.key_id ?? '-',
      r.event_type ?? '-',
      r.event_id ?? '-',
    ].map(terminalSafe),
  );
  const header = ['LINE', 'RESULT', 'CODE', 'KEY', 'EVENT TYPE', 'EVENT ID'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const format = (row: string[]) =>
    row
      .map((cell, i) => cell.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  writeLine(format(header));
  for (const row of rows) writeLine(format(row));
  const failed = results.filter((r) => !r.ok).length;
  writeLine(`\n${results.length - failed} ok, ${failed} failed`);
}
