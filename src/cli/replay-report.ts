import type { SettledReport } from '../consumer/consumer.js';
import { type ErrorCode, errorMessage, VERIFICATION_CODES } from '../core/errors.js';
import type { MaxStop, ReplayReader } from '../core/replay-reader.js';
import { writeLine } from './common.js';
import { Progress } from './progress.js';
import { type ReplayMessage, recordedCode } from './replay-source.js';
import { terminalSafe } from './terminal-safe.js';

/** What became of one replayed record. */
export type ReplayOutcome = 'forwarded' | 'injected' | 'duplicate' | 'rejected' | 'failed';

const OUTCOMES: readonly ReplayOutcome[] = ['forwarded', 'injected', 'duplicate', 'rejected', 'failed'];

/** The key for records that were bare envelopes, not dead-letter records (they have no code). */
export const NO_CODE = 'none';

export type OutcomeCounts = Record<ReplayOutcome, number>;

function zero(): OutcomeCounts {
  return { forwarded: 0, injected: 0, duplicate: 0, rejected: 0, failed: 0 };
}

/** Where a message was read: a file's line, or a broker message's id and the order it was read in. */
export function whereRead(
  message: ReplayMessage,
): { line: number } | { message_id: string; position: number } {
  return message.line !== undefined
    ? { line: message.line }
    : { message_id: message.id, position: message.position };
}

/** One line of `replay --json` per message (docs/cli.md). */
export interface ReplayEventRow {
  readonly line?: number;
  readonly message_id?: string;
  readonly position?: number;
  readonly event_id: string | null;
  readonly event_type: string | null;
  readonly recorded_code: string | null;
  readonly outcome: ReplayOutcome | 'dead';
  readonly code: string | null;
  readonly reason: string | null;
  readonly forced?: true;
}

/**
 * The end-of-run counts: by outcome, by the code each record was dead-lettered with (so "of the
 * 120 HANDLER_FAILED, 118 went through" reads straight off), and by the code of what still fails.
 */
export class ReplayTally {
  total = 0;
  readonly byOutcome: OutcomeCounts = zero();
  readonly byCode: Record<string, OutcomeCounts> = {};
  readonly failureCodes: Record<string, number> = {};

  add(outcome: ReplayOutcome, recordedCode: string | undefined, failureCode?: string): void {
    this.total++;
    this.byOutcome[outcome]++;
    const key = recordedCode ?? NO_CODE;
    this.byCode[key] ??= zero();
    this.byCode[key][outcome]++;
    if (failureCode !== undefined) this.failureCodes[failureCode] = (this.failureCodes[failureCode] ?? 0) + 1;
  }

  /** `forwarded 2 duplicates 1 …`, for the progress line. */
  brief(): string {
    const o = this.byOutcome;
    const sent = o.injected > 0 ? `injected ${o.injected}` : `forwarded ${o.forwarded}`;
    return `${sent} duplicates ${o.duplicate} rejected ${o.rejected} failed ${o.failed}`;
  }

  /** A table per recorded code, then the codes that still fail; one string per line. */
  table(): string[] {
    const columns = OUTCOMES.filter((o) => this.byOutcome[o] > 0 || o === 'duplicate' || o === 'failed');
    const header = ['RECORDED CODE', 'EVENTS', ...columns.map((c) => c.toUpperCase())];
    const rows = Object.entries(this.byCode)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([code, counts]) => [
        code,
        String(OUTCOMES.reduce((n, o) => n + counts[o], 0)),
        ...columns.map((c) => String(counts[c])),
      ]);
    const lines = ['by recorded code:', ...formatTable([header, ...rows]).map((l) => `  ${l}`)];
    const failing = Object.entries(this.failureCodes).sort(([, a], [, b]) => b - a);
    if (failing.length > 0) {
      lines.push('still failing, by code:');
      lines.push(...formatTable(failing.map(([code, n]) => [code, String(n)])).map((l) => `  ${l}`));
    }
    return lines;
  }
}

/** The event itself is invalid (as opposed to: the app or queue did not take it). */
const REJECTED_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  ...VERIFICATION_CODES,
  'SCHEMA_INVALID',
  'UNKNOWN_EVENT_TYPE',
]);

/** The last line of `replay --json` (docs/cli.md, "--json summary"). */
export interface ReplaySummary {
  total: number;
  forwarded: number;
  injected: number;
  duplicates: number;
  rejected: number;
  failed: number;
  /** Records the filters left out (still in FILE or on the queue, not in the new dead-letter file). */
  filtered_out: number;
  /** Events the dedupe store marked done that --force re-drove. */
  forced: number;
  /** Counts by the code each record was dead-lettered with (`none` for bare envelopes). */
  by_code: Record<string, Record<ReplayOutcome, number>>;
  /** Counts by the code of what still fails. */
  failure_codes: Record<string, number>;
  target: string | null;
  dead_letter_file: string | null;
  dry_run: boolean;
  /** Present when `--max` ended the read while messages remained unread, or may have. */
  stopped_at_max?: true;
  /** With `stopped_at_max`: `remain` (the reader saw unread messages) or `may-remain` (it cannot tell). */
  unread?: MaxStop['unread'];
  /** With `stopped_at_max`, from a hub: where the read stopped and the `--since` to read on with. */
  resume?: { since: string | null; sequence_numbers: Record<string, number> };
  /** The `--config` file's header names not sent, `--forward` being another origin (set by the CLI). */
  headers_withheld?: string[];
  /** Present when the source could not be read on (a hub that refuses the reader, a file's I/O error): why. */
  read_failed?: string;
}

/** The summary's fields for where `--max` stopped the read (none when it did not). */
export function maxStopFields(
  stop: MaxStop | undefined,
): Pick<ReplaySummary, 'stopped_at_max' | 'unread' | 'resume'> {
  if (!stop) return {};
  const { resume } = stop;
  return {
    stopped_at_max: true,
    unread: stop.unread,
    ...(resume
      ? {
          resume: {
            since: resume.since === undefined ? null : new Date(resume.since).toISOString(),
            sequence_numbers: { ...resume.sequenceNumbers },
          },
        }
      : {}),
  };
}

/** The summary's field for a read the source ended early (none when it did not). */
export function readFailedField(failure: Error | string | undefined): Pick<ReplaySummary, 'read_failed'> {
  if (failure === undefined) return {};
  return { read_failed: typeof failure === 'string' ? failure : errorMessage(failure) };
}

/** Said when the source could not be read on: the run fails (exit code 1). */
export function readFailedLine(summary: Pick<ReplaySummary, 'read_failed'>): string {
  return terminalSafe(`reading stopped early, the rest was not read: ${summary.read_failed}`);
}

/** Said when `--max` left records of a file unread. */
export const STOPPED_AT_MAX =
  'stopped at --max: the rest of the file was not read (run again without --max: events done now are duplicates then)';

/**
 * Said when `--max` stopped the read, in the source's terms: a queue keeps what was not read
 * (run again); a hub says where to read on from.
 */
export function stoppedAtMaxLine(
  kind: ReplayReader['kind'],
  summary: Pick<ReplaySummary, 'unread' | 'resume'>,
): string {
  const may = summary.unread === 'remain' ? '' : 'may ';
  if (kind === 'file') return STOPPED_AT_MAX;
  if (kind === 'queue')
    return `stopped at --max: messages ${may}remain in the queue (those not read were left there, untouched): run again`;
  const { resume } = summary;
  const reached = Object.entries(resume?.sequence_numbers ?? {})
    .map(([partition, sequence]) => `partition ${partition} at ${sequence}`)
    .join(', ');
  const from = resume?.since ? `with --since ${resume.since}` : 'without --since (from the oldest event)';
  return terminalSafe(
    `stopped at --max: events ${may}remain on the hub after those read (last sequence number read: ${reached || 'none'}): ` +
      `to read on, run again ${from}, keeping any --until (events done now are duplicates then)`,
  );
}

/**
 * Follows a replay as records settle: tallies each final outcome (a retry is not final), keeps
 * the progress line on stderr current and, with `--json`, prints one line per event; at the end,
 * the summary.
 */
export class ReplayReport {
  readonly tally = new ReplayTally();
  /** Events the dedupe store marked done that --force re-drove. */
  readonly forced = new Set<string>();
  readonly #progress: Progress | undefined;
  /** What a record that went through counts as: `forwarded`, or `injected` with `--to`. */
  readonly #sent: ReplayOutcome;
  readonly #json: boolean;
  readonly #sourceKind: ReplayReader['kind'];
  readonly #onEvent: ((row: ReplayEventRow) => void) | undefined;
  #lastPosition = 0;

  constructor(options: {
    /** Messages to read, when known (a file's lines, a queue's size, a hub's ranges). */
    total: number | undefined;
    /** What the messages are read from (the wording of `stopped_at_max`). */
    sourceKind: ReplayReader['kind'];
    sent: ReplayOutcome;
    /** Print the summary as a JSON line (the per-event lines go to `onEvent`). */
    json: boolean;
    /** Each message's final outcome, as `--json` prints it. */
    onEvent?: ((row: ReplayEventRow) => void) | undefined;
    /** A progress line on stderr (default: yes). */
    progress?: boolean;
  }) {
    this.#progress = options.progress === false ? undefined : new Progress(options.total);
    this.#sent = options.sent;
    this.#json = options.json;
    this.#sourceKind = options.sourceKind;
    this.#onEvent = options.onEvent;
  }

  /** A message the filters left out (it only moves the progress on). */
  filtered(message: ReplayMessage): void {
    this.#advance(message.position);
  }

  /** Pass as the consumer's `onSettled`. */
  settled(report: SettledReport<ReplayMessage>): void {
    const { outcome } = report;
    if (outcome.kind === 'retry') return;
    const recorded = recordedCode(report.message);
    let result: ReplayOutcome;
    if (outcome.kind === 'ack') {
      result = outcome.result === 'duplicate' ? 'duplicate' : this.#sent;
      this.tally.add(result, recorded);
    } else {
      result = REJECTED_CODES.has(outcome.code) ? 'rejected' : 'failed';
      this.tally.add(result, recorded, outcome.code);
    }
    this.#advance(report.message.position);
    this.#onEvent?.({
      ...whereRead(report.message),
      event_id: report.eventId ?? null,
      event_type: report.eventType ?? null,
      recorded_code: recorded ?? null,
      outcome: outcome.kind === 'dead' ? 'dead' : result,
      code: outcome.kind === 'dead' ? outcome.code : null,
      reason: outcome.kind === 'dead' ? outcome.reason : null,
      ...(report.eventId && this.forced.has(report.eventId) ? { forced: true } : {}),
    });
  }

  /** Stops the progress line. */
  finish(): void {
    this.#progress?.finish();
  }

  summary(facts: {
    filteredOut: number;
    target: string;
    deadLetterFile: string | null;
    stoppedAtMax: MaxStop | undefined;
    readFailure: Error | string | undefined;
  }): ReplaySummary {
    const o = this.tally.byOutcome;
    return {
      total: this.tally.total,
      forwarded: o.forwarded,
      injected: o.injected,
      duplicates: o.duplicate,
      rejected: o.rejected,
      failed: o.failed,
      filtered_out: facts.filteredOut,
      forced: this.forced.size,
      by_code: this.tally.byCode,
      failure_codes: this.tally.failureCodes,
      target: facts.target,
      dead_letter_file: facts.deadLetterFile,
      dry_run: false,
      ...maxStopFields(facts.stoppedAtMax),
      ...readFailedField(facts.readFailure),
    };
  }

  /** The summary as the last JSON line, or as text with the table by recorded code. */
  print(summary: ReplaySummary, run: { source: string; interrupted: boolean }): void {
    if (this.#json) {
      writeLine(JSON.stringify({ ...summary, ...(run.interrupted ? { interrupted: true } : {}) }));
      return;
    }
    const how =
      this.#sent === 'injected'
        ? `${summary.injected} injected into ${summary.target}`
        : `${summary.forwarded} forwarded`;
    writeLine(
      terminalSafe(
        `replayed ${summary.total} events from ${run.source}: ${how}, ${summary.duplicates} duplicates, ` +
          `${summary.rejected} rejected, ${summary.failed} failed${run.interrupted ? ' (interrupted)' : ''}`,
      ),
    );
    if (summary.filtered_out > 0) writeLine(`left out by the filters: ${summary.filtered_out} records`);
    if (summary.forced > 0) writeLine(`--force re-drove ${summary.forced} events already marked done`);
    if (summary.stopped_at_max) writeLine(stoppedAtMaxLine(this.#sourceKind, summary));
    if (summary.read_failed !== undefined) writeLine(readFailedLine(summary));
    if (summary.headers_withheld)
      writeLine(
        terminalSafe(
          `not sent (another origin): the --config file's headers ${summary.headers_withheld.join(', ')}`,
        ),
      );
    if (summary.total > 0) for (const line of this.tally.table()) writeLine(line);
    if (summary.dead_letter_file)
      writeLine(terminalSafe(`events that still fail: ${summary.dead_letter_file}`));
  }

  #advance(position: number): void {
    this.#lastPosition = Math.max(this.#lastPosition, position);
    this.#progress?.update(this.#lastPosition, this.tally.brief());
  }
}

/** Rows as aligned lines; cells are made terminal-safe first (a recorded code is the record's word). */
export function formatTable(rows: readonly (readonly string[])[]): string[] {
  const safe = rows.map((row) => row.map(terminalSafe));
  const widths: number[] = [];
  for (const row of safe) {
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, cell.length);
    });
  }
  return safe.map((row) =>
    row
      .map((cell, i) => cell.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd(),
  );
}
