import { errorMessage, isPartnerEventsError, VerificationError } from '../core/errors.js';
import { validateEvent } from '../core/events/validate.js';
import { redact } from '../core/redact.js';
import type { ReplayReader } from '../core/replay-reader.js';
import type { Keyring } from '../core/secrets.js';
import { type VerifiedMessage, verifyMessage } from '../core/verify.js';
import type { DedupeStore } from '../dedupe/types.js';
import { describeUrl } from '../sidecar/forward.js';
import { describeSpec } from '../transports.js';
import { writeLine } from './common.js';
import type { ReplayFilter } from './filters.js';
import { checkCanForget } from './replay-dedupe.js';
import {
  maxStopFields,
  readFailedField,
  readFailedLine,
  stoppedAtMaxLine,
  whereRead,
} from './replay-report.js';
import { type ReplayMessage, ReplaySource, recordedCode } from './replay-source.js';
import { terminalSafe, terminalSafeLines } from './terminal-safe.js';

/** What the dry run reads of replay's flags. */
export interface DryRunOptions {
  readonly forward: string | undefined;
  readonly to: string | undefined;
  readonly force: boolean;
  readonly json: boolean;
  readonly checkAge: boolean;
  /** The largest envelope accepted: the replay's own limit, so the dry run judges as it will. */
  readonly maxEnvelopeBytes: number;
  readonly filter: ReplayFilter;
}

/**
 * What the replay would do with one record (docs/cli.md, "--dry-run output"); `error`: the kit
 * could not judge it (a bug, or the dedupe store did not answer), which is not the record's fault.
 */
type DryRunAction = 'forward' | 'inject' | 'skip-duplicate' | 'wait-in-progress' | 'reject' | 'error';

/** One record's line (`--json`), without its line number, recorded code and target. */
interface DryRunRow {
  readonly event_id: string | null;
  readonly event_type: string | null;
  readonly key_id?: string;
  readonly action: DryRunAction;
  readonly code: string | null;
  readonly reason?: string;
  readonly forced?: true;
}

interface DryRunCounts {
  total: number;
  would_forward: number;
  would_inject: number;
  duplicates: number;
  in_progress: number;
  rejected: number;
  errors: number;
  forced: number;
}

/** What the dry run reads from and judges with. */
export interface DryRunParts {
  readonly reader: ReplayReader;
  readonly keyring: Keyring;
  /** Only looked up, then closed. */
  readonly dedupe: DedupeStore;
  /** SOURCE as printed. */
  readonly source: string;
}

/**
 * `replay --dry-run`: verifies each selected record and looks it up in the dedupe store (without
 * claiming), prints what the replay would do with it, then the counts. Changes nothing: a queue's
 * messages are held hidden while the run looks at them and made visible again, unchanged, at the
 * end. Closes the reader and the store. Exit code 1 when a record would be rejected or could not
 * be judged, or the source could not be read to its end.
 */
export async function dryRun(
  options: DryRunOptions,
  { reader, keyring, dedupe, source: sourceName }: DryRunParts,
): Promise<{ exitCode: number; summary: Record<string, unknown> }> {
  const source = new ReplaySource({
    reader,
    filter:
      reader.kind === 'hub' ? { ...options.filter, since: undefined, until: undefined } : options.filter,
  });
  const target = describeTarget(options);
  const counts: DryRunCounts = {
    total: 0,
    would_forward: 0,
    would_inject: 0,
    duplicates: 0,
    in_progress: 0,
    rejected: 0,
    errors: 0,
    forced: 0,
  };
  const judging: Judge = { options, keyring, dedupe, reporter: new ErrorReporter(), sent: new Set() };
  try {
    // Refused as the replay itself refuses it, before a line is judged.
    if (options.to !== undefined && options.force) checkCanForget(dedupe);
    for await (const message of records(source, reader)) {
      const row = await judge(message, judging);
      count(counts, row);
      await source.hold(message);
      printRow(message, row, target, options.json);
    }
  } finally {
    await source.close();
    await dedupe.close();
  }
  const stopped = maxStopFields(reader.stoppedAtMax);
  const readFailed = readFailedField(reader.failure ?? reader.progress?.failure);
  const summary = {
    ...counts,
    filtered_out: source.filteredOut,
    ...stopped,
    ...readFailed,
    source: sourceName,
    target,
    dry_run: true,
  };
  writeLine(
    options.json
      ? JSON.stringify(summary)
      : `dry run: ${JSON.stringify({ ...counts, filtered_out: source.filteredOut, ...stopped })} (nothing was changed)`,
  );
  if (stopped.stopped_at_max && !options.json) writeLine(stoppedAtMaxLine(reader.kind, stopped));
  if (readFailed.read_failed !== undefined && !options.json) writeLine(readFailedLine(readFailed));
  const clean = counts.rejected === 0 && counts.errors === 0 && readFailed.read_failed === undefined;
  return { exitCode: clean ? 0 : 1, summary };
}

/** Printed on every line and in the summary: never the raw value (a SAS URL's sig=, userinfo). */
function describeTarget(options: DryRunOptions): string | null {
  if (options.to) return describeSpec(options.to, 'target');
  return options.forward ? describeUrl(options.forward) : null;
}

/**
 * The file's records the filters select, in order. A read that failed partway (the reader's
 * `progress.failure`) ends them: the summary says so. Any other receive error is thrown.
 */
async function* records(source: ReplaySource, reader: ReplayReader): AsyncGenerator<ReplayMessage> {
  const signal = new AbortController().signal;
  for (;;) {
    let batch: readonly ReplayMessage[] | null;
    try {
      batch = await source.receive(100, signal);
    } catch (error) {
      if (reader.progress?.failure === undefined) throw error;
      continue; // thrown once; what was read before it still comes, then the end
    }
    if (batch === null) return;
    yield* batch;
  }
}

/** What judging a record takes. */
interface Judge {
  readonly options: DryRunOptions;
  readonly keyring: Keyring;
  readonly dedupe: DedupeStore;
  readonly reporter: ErrorReporter;
  /**
   * The events this dry run would send: the replay sends each event once per run (a second
   * record of it in the file is a duplicate then), with `--force` and `--to` too.
   */
  readonly sent: Set<string>;
}

/** One record's row: verified and looked up, rejected, or an error of the kit (told on stderr). */
async function judge(
  message: ReplayMessage,
  { options, keyring, dedupe, reporter, sent }: Judge,
): Promise<DryRunRow> {
  let verified: VerifiedMessage;
  try {
    verified = verifyRecord(message, options, keyring);
  } catch (error) {
    if (error instanceof VerificationError) {
      return {
        event_id: null,
        event_type: null,
        action: 'reject',
        code: error.code,
        reason: errorMessage(error),
      };
    }
    // As in the pipeline (src/core/outcome.ts): a bug in the kit, which the replay would retry.
    const reason = `unexpected exception in verification: ${errorMessage(error)}`;
    reporter.report(message, 'INTERNAL_ERROR', `${reason} (a bug in partner-health-events)`, error);
    return { event_id: null, event_type: null, action: 'error', code: 'INTERNAL_ERROR', reason };
  }
  try {
    const row = await judgeVerified(verified, options, dedupe, sent);
    if (row.action === 'forward' || row.action === 'inject') sent.add(verified.eventId);
    return row;
  } catch (error) {
    // The store's failure (DEDUPE_UNAVAILABLE), or a bug past verification.
    const code = isPartnerEventsError(error) ? error.code : 'INTERNAL_ERROR';
    const reason = errorMessage(error);
    reporter.report(message, code, reason, error);
    const ids = { event_id: verified.eventId, event_type: verified.eventType, key_id: verified.keyId };
    return { ...ids, action: 'error', code, reason };
  }
}

/**
 * Says on stderr why a record could not be judged; the first unexpected exception with its stack
 * (for a bug report), the others by their message only.
 */
class ErrorReporter {
  #stackShown = false;

  report(message: ReplayMessage, code: string, reason: string, error: unknown): void {
    let text = `partner-events replay: ${whereText(message)}: [${code}] ${reason}`;
    if (code === 'INTERNAL_ERROR' && !this.#stackShown && error instanceof Error && error.stack) {
      this.#stackShown = true;
      text += `\n${error.stack}`;
    }
    // Not only our words: an exception's message may quote a URL or a server's answer.
    process.stderr.write(`${terminalSafeLines(redact(text))}\n`);
  }
}

/** The replay's verification; a record the file source already refused (a truncated dead letter) is never verified. */
function verifyRecord(message: ReplayMessage, options: DryRunOptions, keyring: Keyring): VerifiedMessage {
  if (message.rejection) throw new VerificationError(message.rejection.code, message.rejection.reason);
  return verifyMessage(message.body, {
    keyring,
    checkAge: options.checkAge,
    enqueuedAt: message.enqueuedAt,
    maxEnvelopeBytes: options.maxEnvelopeBytes,
  });
}

/** A verified record: rejected by the schema, or what its state in the dedupe store makes of it. */
async function judgeVerified(
  verified: VerifiedMessage,
  options: DryRunOptions,
  dedupe: DedupeStore,
  sent: ReadonlySet<string>,
): Promise<DryRunRow> {
  const ids = { event_id: verified.eventId, event_type: verified.eventType, key_id: verified.keyId };
  const validation = validateEvent(verified.eventType, verified.payload);
  if (!validation.ok) return { ...ids, action: 'reject', code: validation.code, reason: validation.reason };
  if (sent.has(verified.eventId)) {
    return {
      ...ids,
      action: 'skip-duplicate',
      code: null,
      reason: 'an earlier record of this run sends this event',
    };
  }
  const injecting = options.to !== undefined;
  const state = await dedupe.peek(verified.eventId);
  if (state === 'done' && !options.force) return { ...ids, action: 'skip-duplicate', code: null };
  // The replay waits for the worker's lease; an injected copy is de-duplicated by the worker.
  if (state === 'in_progress' && !injecting) return { ...ids, action: 'wait-in-progress', code: null };
  const action = injecting ? 'inject' : 'forward';
  return { ...ids, action, code: null, ...(state === 'done' ? { forced: true as const } : {}) };
}

/** `line 3` for a file's record, `message ID` for a broker's. */
function whereText(message: ReplayMessage): string {
  return message.line !== undefined ? `line ${message.line}` : `message ${message.id}`;
}

function count(counts: DryRunCounts, row: DryRunRow): void {
  counts.total++;
  if (row.forced) counts.forced++;
  switch (row.action) {
    case 'forward':
      counts.would_forward++;
      break;
    case 'inject':
      counts.would_inject++;
      break;
    case 'skip-duplicate':
      counts.duplicates++;
      break;
    case 'wait-in-progress':
      counts.in_progress++;
      break;
    case 'reject':
      counts.rejected++;
      break;
    case 'error':
      counts.errors++;
      break;
  }
}

function printRow(message: ReplayMessage, row: DryRunRow, target: string | null, json: boolean): void {
  if (json) {
    const recorded = recordedCode(message) ?? null;
    const to = target && row.action !== 'reject' && row.action !== 'error' ? { target } : {};
    writeLine(JSON.stringify({ ...whereRead(message), ...row, recorded_code: recorded, ...to }));
    return;
  }
  const to = target && (row.action === 'forward' || row.action === 'inject') ? ` -> ${target}` : '';
  const text = `${whereText(message)}: ${row.action}${row.forced ? ' (forced)' : ''}${row.code ? ` ${row.code}` : ''} ${row.event_type ?? ''} ${row.event_id ?? ''}`;
  writeLine(terminalSafe(text.trimEnd() + to));
}
