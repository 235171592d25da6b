import type { DestinationStream } from 'pino';
import type { SettledReport } from '../consumer/consumer.js';
import type { Outcome } from '../core/outcome.js';
import { redact } from '../core/redact.js';
import type { FiniteSourceProgress, SourceAdapter } from '../core/source-adapter.js';
import { describeUrl } from '../sidecar/forward.js';
import { terminalSafe } from './terminal-safe.js';

/** Where `run` hands the events: a URL (`--forward`) or a module (`--handlers`). */
export type RunDestination = { readonly forward: string } | { readonly handlers: string };

/** The settled deliveries of a run, by outcome (a delivery given back for a retry counts as retried). */
export class RunTally {
  handled = 0;
  duplicates = 0;
  ignored = 0;
  retried = 0;
  dead = 0;

  add(outcome: Outcome): void {
    if (outcome.kind === 'retry') this.retried++;
    else if (outcome.kind === 'dead') this.dead++;
    else if (outcome.result === 'duplicate') this.duplicates++;
    else if (outcome.result === 'ignored') this.ignored++;
    else this.handled++;
  }
}

/**
 * `run`'s exit code once its consumer stopped: a finite source (a file) exits 1 when anything
 * was dead-lettered or it ended short of done (retries still pending, lines not read: a signal
 * came first, or the read failed); 0 otherwise, and always 0 for a queue (it has no end to reach).
 */
export function runExitCode(tally: RunTally, progress: FiniteSourceProgress | undefined): number {
  if (!progress) return 0;
  return tally.dead > 0 || !progress.done ? 1 : 0;
}

/** What `run` reports as it goes: the tally always; on a terminal, lines like `stripe listen`'s. */
export interface RunOutput {
  readonly tally: RunTally;
  /** The source, the destination and the ops endpoints are up. */
  ready(ops: string | undefined): void;
  /** A signal asked the worker to stop. */
  stopping(): void;
  /** The app's HTTP status for an event's forward (`ForwardOptions.onAnswer`). */
  answered(eventId: string, status: number): void;
  /** Pass from the consumer's `onSettled`. */
  settled(report: SettledReport): void;
  /** Prints the summary (on a terminal); the exit code. */
  finish(): number;
}

export interface RunOutputOptions {
  /** Lines for a person (`--pretty`, or a terminal) instead of JSON logs alone. */
  readonly pretty: boolean;
  readonly source: Pick<SourceAdapter, 'name' | 'progress'>;
  readonly destination: RunDestination;
  readonly deadLetterPath: string;
  /** Where the lines go; default standard output. */
  readonly write?: (line: string) => void;
}

/** Quiet time after the last settled delivery before `N pending retries, next in Xs` is shown. */
const PENDING_QUIET_MS = 250;
/** How often the pending line is repeated while the retries still wait. */
const PENDING_REPEAT_MS = 5000;
/** Reasons are cut to this many characters on a terminal (the JSON logs keep them whole). */
const MAX_REASON_CHARS = 200;

export function createRunOutput(options: RunOutputOptions): RunOutput {
  const tally = new RunTally();
  if (!options.pretty) {
    return {
      tally,
      ready: () => undefined,
      stopping: () => undefined,
      answered: () => undefined,
      settled: (report) => tally.add(report.outcome),
      finish: () => runExitCode(tally, options.source.progress),
    };
  }
  return new TerminalReport(tally, options);
}

/**
 * `run` on a terminal: a `Ready!` line, then two lines per settled delivery (`-->` the event,
 * `<--` what became of it), `N pending retries, next in Xs` while a file's retries wait, and a
 * summary at the end. Every line is built from the consumer's settled reports (the same ones the
 * metrics and the JSON logs use); unsigned text goes through `terminalSafe`, URLs through the
 * redaction, and no body is ever printed.
 */
class TerminalReport implements RunOutput {
  readonly tally: RunTally;
  readonly #options: RunOutputOptions;
  readonly #write: (line: string) => void;
  /** The app's status for each event whose forward was answered, until its delivery settles. */
  readonly #statuses = new Map<string, number>();
  #pendingTimer: NodeJS.Timeout | undefined;

  constructor(tally: RunTally, options: RunOutputOptions) {
    this.tally = tally;
    this.#options = options;
    this.#write = options.write ?? ((line) => process.stdout.write(`${line}\n`));
  }

  ready(ops: string | undefined): void {
    const { source, destination } = this.#options;
    const to =
      'forward' in destination
        ? `forwarding to ${describeUrl(destination.forward)}`
        : `handlers ${destination.handlers}`;
    this.#line(`Ready! Consuming ${redact(source.name)} → ${to} (^C to quit)`);
    if (ops) this.#line(`Ops endpoints: ${redact(ops)} (/healthz /readyz /metrics)`);
  }

  stopping(): void {
    this.#line('Stopping: finishing the events in flight…');
  }

  answered(eventId: string, status: number): void {
    this.#statuses.set(eventId, status);
  }

  settled(report: SettledReport): void {
    this.tally.add(report.outcome);
    const status = report.eventId === undefined ? undefined : this.#statuses.get(report.eventId);
    if (report.eventId !== undefined) this.#statuses.delete(report.eventId);
    const what = report.eventType ?? '(not verified)';
    const attempt = report.attempt > 1 ? ` (attempt ${report.attempt})` : '';
    this.#line(`--> ${what} ${report.eventId ?? report.message.id}${attempt}`);
    this.#line(`<-- ${this.#answer(report.outcome, status)}`);
    this.#watchPending();
  }

  finish(): number {
    clearTimeout(this.#pendingTimer);
    const { tally } = this;
    const parts = [`${tally.handled} handled`, plural(tally.duplicates, 'duplicate', 'duplicates')];
    if (tally.ignored > 0) parts.push(`${tally.ignored} ignored`);
    parts.push(`${tally.retried} retried`, `${tally.dead} dead-lettered`);
    const deadLetters = tally.dead > 0 ? ` (in ${this.#options.deadLetterPath})` : '';
    this.#line(`Summary: ${parts.join(', ')}${deadLetters}`);
    const progress = this.#options.source.progress;
    if (progress && !progress.done) {
      const pending = progress.pendingRetries;
      this.#line(
        progress.failure !== undefined
          ? `Not finished: ${progress.failure}`
          : pending > 0
            ? `Not finished: ${plural(pending, 'retry', 'retries')} still pending (not acked; run again or replay)`
            : 'Not finished: stopped before the end of the source',
      );
    }
    return runExitCode(tally, progress);
  }

  /** After `<--`: the app's status for a forward, else the outcome and its code. */
  #answer(outcome: Outcome, status: number | undefined): string {
    const { destination } = this.#options;
    const post =
      status !== undefined && 'forward' in destination
        ? `[${status}] POST ${describeUrl(destination.forward)}`
        : undefined;
    if (outcome.kind === 'ack') {
      if (outcome.result === 'duplicate') return '[duplicate] already handled: acked, not handed over again';
      if (outcome.result === 'ignored') return '[ignored] no handler for this type: acked';
      return post ?? '[handled]';
    }
    const failed = post ? `${post} (${outcome.code})` : `[${outcome.code}] ${shorten(outcome.reason)}`;
    return outcome.kind === 'retry'
      ? `${failed} → retry in ${seconds(outcome.delayMs)}`
      : `${failed} → dead-lettered`;
  }

  /** Shows `N pending retries, next in Xs` once deliveries stop settling while retries wait. */
  #watchPending(): void {
    clearTimeout(this.#pendingTimer);
    if (!this.#options.source.progress?.pendingRetries) return;
    const show = (after: number) => {
      this.#pendingTimer = setTimeout(() => {
        const progress = this.#options.source.progress;
        if (!progress?.pendingRetries) return;
        const next =
          progress.nextRetryAt === undefined ? '' : `, next in ${seconds(progress.nextRetryAt - Date.now())}`;
        this.#line(`${plural(progress.pendingRetries, 'pending retry', 'pending retries')}${next}`);
        show(PENDING_REPEAT_MS);
      }, after).unref();
    };
    show(PENDING_QUIET_MS);
  }

  #line(text: string): void {
    this.#write(terminalSafe(text));
  }
}

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** `0.7s`, `12s`, `3m05s`: a delay as a person reads it. */
function seconds(ms: number): string {
  const s = Math.max(0, ms) / 1000;
  if (s < 10) return `${s.toFixed(1)}s`;
  if (s < 120) return `${Math.round(s)}s`;
  const whole = Math.round(s);
  return `${Math.floor(whole / 60)}m${String(whole % 60).padStart(2, '0')}s`;
}

function shorten(text: string): string {
  return text.length > MAX_REASON_CHARS ? `${text.slice(0, MAX_REASON_CHARS - 1)}…` : text;
}

/** Log lines the terminal report says in its own way (docs/sidecar.md, "Logs"). */
const SAID_BY_THE_REPORT: ReadonlySet<string> = new Set([
  'event acked',
  'event will be retried',
  'event dead-lettered',
  'events settled',
  'consumer started',
  'consumer stopped',
  'source exhausted',
  'forwarding verified events',
  'operations endpoints: /healthz /readyz /metrics',
  'stopping: draining in-flight events',
]);

const LEVEL_NAMES: Readonly<Record<number, string>> = {
  10: 'trace',
  20: 'debug',
  30: 'info',
  40: 'warn',
  50: 'error',
  60: 'fatal',
};
const LOG_FRAME = new Set(['level', 'time', 'pid', 'hostname', 'name', 'msg']);

/**
 * pino's destination on a terminal: each JSON log line as `warn: msg (key=value, …)` on standard
 * error, terminal-safe and redacted, minus the lines the report already says (one per event,
 * start, stop).
 */
export function terminalLogDestination(
  write: (text: string) => void = (text) => process.stderr.write(text),
): DestinationStream {
  return {
    write(line: string) {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        write(`${terminalSafe(redact(line.trimEnd()))}\n`);
        return;
      }
      const msg = String(entry.msg ?? '');
      if (SAID_BY_THE_REPORT.has(msg)) return;
      const fields = Object.entries(entry)
        .filter(([key]) => !LOG_FRAME.has(key))
        .map(([key, value]) => `${key}=${typeof value === 'string' ? value : JSON.stringify(value)}`);
      const level = LEVEL_NAMES[Number(entry.level)] ?? 'log';
      const text = `${level}: ${msg}${fields.length > 0 ? ` (${fields.join(', ')})` : ''}`;
      write(`${terminalSafe(redact(text))}\n`);
    },
  };
}
