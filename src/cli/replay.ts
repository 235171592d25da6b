import { accessSync, constants, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { createConsumer, type SettledReport } from '../consumer/consumer.js';
import { createJsonlDeadLetters } from '../consumer/dead-letter-sink.js';
import type { HandlerContext } from '../consumer/router.js';
import {
  DeadLetterError,
  type ErrorCode,
  errorMessage,
  ForwardError,
  RetryLaterError,
  VERIFICATION_CODES,
} from '../core/errors.js';
import { hasCredentials } from '../core/http-answer.js';
import { createLogger } from '../core/logger.js';
import { createForwarder, describeUrl, forwardUrlProblem } from '../sidecar/forward.js';
import {
  DEFAULT_DEDUPE,
  loadKeyring,
  openDedupe,
  parse,
  parsePositiveInt,
  UsageError,
  writeLine,
} from './common.js';
import { parseFilter } from './filters.js';
import { countLines, Progress } from './progress.js';
import { Pacer, parseRate } from './rate.js';
import { forcingDedupe, injectingDedupe } from './replay-dedupe.js';
import { type DryRunOptions, dryRun } from './replay-dry-run.js';
import { type ReplayOutcome, ReplayTally } from './replay-report.js';
import { type ReplayMessage, ReplaySource, recordedCode } from './replay-source.js';
import { openTarget, TARGET_FORMS, type Target } from './targets.js';
import { terminalSafe } from './terminal-safe.js';

export const REPLAY_USAGE = `Usage: partner-events replay FILE (--forward URL | --to TARGET) [options]

Re-drives envelopes or dead-letter records (JSONL) safely: each is verified again (signature;
age only with --check-age, since dead events are old), checked against the worker's dedupe
store, validated, and then either its signed body POSTed to your app (--forward) or the original
envelope put back on a queue for the worker (--to). Events that still fail go to a new
dead-letter file, whose path is printed, with a report by outcome and by code.

  --forward URL        POST target (2xx = success)
  --to TARGET          re-inject the original envelopes, byte for byte, into a queue the worker
                       consumes: ${TARGET_FORMS}
  --dedupe SPEC        sqlite:PATH (default ${DEFAULT_DEDUPE}), redis://… or memory; use the worker's store
  --force              also re-drive events the dedupe store marks as done (logged loudly)
  --dry-run            verify and look up each event, change nothing, send nothing

Select records (all given criteria must hold; repeat a flag or use commas for "any of"):
  --type TYPE          event type; * is a wildcard (daily.data.*)
  --event-id ID        event id
  --code CODE          the code the record was dead-lettered with (HANDLER_FAILED, …)
  --since TIME         signed_at at or after TIME (ISO 8601 or Unix seconds)
  --until TIME         signed_at at or before TIME (ISO 8601 or Unix seconds)

  --rate N/s           at most N events sent per second (also N/min)
  --check-age          also reject events whose signed_at is older than 5 minutes
  --dead-letter PATH   where still-failing events go (default FILE.failed-<time>.jsonl)
  --attempts N         tries per event before it counts as failed (default 3)
  --concurrency N      events sent at once (default 8)
  --timeout-ms N       per request (default 10000)
  --secrets-file PATH  secrets (default: PARTNER_EVENTS_SECRETS_FILE, else PARTNER_EVENTS_SIGNING_SECRET[_PREVIOUS])
  --json               one JSON line per event, then a summary object as the last line

Exit: 0 when nothing failed or was rejected, 1 otherwise, 2 on usage errors.`;

/** The event itself is invalid (as opposed to: the app or queue did not take it). */
const REJECTED_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  ...VERIFICATION_CODES,
  'SCHEMA_INVALID',
  'UNKNOWN_EVENT_TYPE',
]);

export interface ReplaySummary {
  total: number;
  forwarded: number;
  injected: number;
  duplicates: number;
  rejected: number;
  failed: number;
  /** Records the filters left out (still in FILE, not in the new dead-letter file). */
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
}

type ReplayArgs = DryRunOptions;

export async function replayCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    forward: { type: 'string' },
    to: { type: 'string' },
    force: { type: 'boolean', default: false },
    dedupe: { type: 'string', default: DEFAULT_DEDUPE },
    json: { type: 'boolean', default: false },
    'dry-run': { type: 'boolean', default: false },
    'check-age': { type: 'boolean', default: false },
    'dead-letter': { type: 'string' },
    attempts: { type: 'string' },
    concurrency: { type: 'string' },
    'timeout-ms': { type: 'string' },
    'secrets-file': { type: 'string' },
    type: { type: 'string', multiple: true },
    'event-id': { type: 'string', multiple: true },
    code: { type: 'string', multiple: true },
    since: { type: 'string' },
    until: { type: 'string' },
    rate: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (values.help) {
    writeLine(REPLAY_USAGE);
    return 0;
  }
  const file = positionals[0];
  if (!file || positionals.length > 1) throw new UsageError('replay needs exactly one FILE');
  checkReplayFile(file);
  if (values.forward && values.to) throw new UsageError('give --forward URL or --to TARGET, not both');
  if (!values.forward && !values.to && !values['dry-run'])
    throw new UsageError('replay needs --forward URL or --to TARGET (or --dry-run)');
  const forwardProblem = values.forward ? forwardUrlProblem(values.forward) : undefined;
  if (forwardProblem) {
    // replay has no option for headers: say so rather than point at a setting it does not read.
    const hint = hasCredentials(values.forward as string)
      ? ' (a worker setting: replay sends no extra headers)'
      : '';
    throw new UsageError(`--forward ${forwardProblem}${hint}`);
  }
  const attempts = parsePositiveInt('--attempts', values.attempts, 3);
  const concurrency = parsePositiveInt('--concurrency', values.concurrency, 8);
  const timeoutMs = parsePositiveInt('--timeout-ms', values['timeout-ms'], 10_000);
  const rate = values.rate === undefined ? undefined : parseRate('--rate', values.rate);
  const options: ReplayArgs = {
    file,
    forward: values.forward,
    to: values.to,
    force: values.force,
    json: values.json,
    checkAge: values['check-age'],
    filter: parseFilter({
      type: values.type,
      eventId: values['event-id'],
      code: values.code,
      since: values.since,
      until: values.until,
    }),
  };
  const keyring = loadKeyring(values['secrets-file']);
  const logger = createLogger({ level: process.env.LOG_LEVEL ?? 'warn' }, process.stderr);
  // Opened before the store, so a bad --to fails before anything else is touched.
  const target = values.to && !values['dry-run'] ? await openTarget(values.to, { concurrency }) : undefined;
  const dedupe = await openDedupe(values.dedupe, { readOnly: values['dry-run'], logger });

  if (options.force) {
    process.stderr.write(
      options.to
        ? 'WARNING --force: events the dedupe store marks as done are forgotten by it and re-injected: the worker will handle them AGAIN\n'
        : 'WARNING --force: events the dedupe store marks as done are forwarded AGAIN: your app may apply them twice\n',
    );
  }
  if (values['dry-run']) return dryRun(options, keyring, dedupe);

  const deadLetterPath =
    values['dead-letter'] ??
    join(
      dirname(file),
      `${basename(file, '.jsonl')}.failed-${new Date().toISOString().replace(/[:.]/g, '-')}.jsonl`,
    );
  const sink = createJsonlDeadLetters(deadLetterPath);
  const tally = new ReplayTally();
  const forced = new Set<string>();
  const progress = new Progress(await countLines(file));
  let lastLine = 0;
  const advance = (line: number) => {
    lastLine = Math.max(lastLine, line);
    progress.update(lastLine, tally.brief());
  };
  const source = new ReplaySource({
    path: file,
    filter: options.filter,
    pacer: rate === undefined ? undefined : new Pacer(rate),
    onFiltered: (message) => advance(message.line),
  });
  const onForced = (eventId: string) => {
    forced.add(eventId);
    logger.warn({ event_id: eventId }, '--force: re-driving an event the dedupe store marks as done');
  };
  const sent: ReplayOutcome = target ? 'injected' : 'forwarded';
  const onSettled = (report: SettledReport<ReplayMessage>) => {
    const { outcome } = report;
    if (outcome.kind === 'retry') return;
    const recorded = recordedCode(report.message);
    let result: ReplayOutcome;
    if (outcome.kind === 'ack') {
      result = outcome.result === 'duplicate' ? 'duplicate' : sent;
      tally.add(result, recorded);
    } else {
      result = REJECTED_CODES.has(outcome.code) ? 'rejected' : 'failed';
      tally.add(result, recorded, outcome.code);
    }
    advance(report.message.line);
    if (options.json) {
      writeLine(
        JSON.stringify({
          line: report.message.line,
          event_id: report.eventId ?? null,
          event_type: report.eventType ?? null,
          recorded_code: recorded ?? null,
          outcome: outcome.kind === 'dead' ? 'dead' : result,
          code: outcome.kind === 'dead' ? outcome.code : null,
          reason: outcome.kind === 'dead' ? outcome.reason : null,
          ...(report.eventId && forced.has(report.eventId) ? { forced: true } : {}),
        }),
      );
    }
  };
  const consumer = createConsumer({
    source,
    secrets: keyring,
    dedupe: target
      ? injectingDedupe(dedupe, { force: options.force, onForced })
      : options.force
        ? forcingDedupe(dedupe, onForced)
        : dedupe,
    deadLetter: sink,
    checkAge: options.checkAge,
    concurrency,
    retry: { maxAttempts: attempts, baseDelayMs: 500, maxDelayMs: 5000 },
    handlerTimeoutMs: timeoutMs + 1000,
    logger,
    onSettled,
  });
  const forwarder = target
    ? undefined
    : createForwarder({ url: options.forward as string, timeoutMs, connections: concurrency });
  const handler = forwarder ?? injector(target as Target, source);
  consumer.on('*', handler).onUnknown(handler);

  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
    void consumer.stop();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  await consumer.start();
  await consumer.stopped;
  await target?.close();
  await forwarder?.close();
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  progress.finish();

  const o = tally.byOutcome;
  const summary: ReplaySummary = {
    total: tally.total,
    forwarded: o.forwarded,
    injected: o.injected,
    duplicates: o.duplicate,
    rejected: o.rejected,
    failed: o.failed,
    filtered_out: source.filteredOut,
    forced: forced.size,
    by_code: tally.byCode,
    failure_codes: tally.failureCodes,
    target: target ? target.name : describeUrl(options.forward as string),
    dead_letter_file: sink.count > 0 ? deadLetterPath : null,
    dry_run: false,
  };
  if (options.json) {
    writeLine(JSON.stringify({ ...summary, ...(interrupted ? { interrupted: true } : {}) }));
  } else {
    const how = target ? `${o.injected} injected into ${target.name}` : `${o.forwarded} forwarded`;
    writeLine(
      terminalSafe(
        `replayed ${summary.total} events from ${file}: ${how}, ${summary.duplicates} duplicates, ` +
          `${summary.rejected} rejected, ${summary.failed} failed${interrupted ? ' (interrupted)' : ''}`,
      ),
    );
    if (summary.filtered_out > 0) writeLine(`left out by the filters: ${summary.filtered_out} records`);
    if (summary.forced > 0) writeLine(`--force re-drove ${summary.forced} events already marked done`);
    if (summary.total > 0) for (const line of tally.table()) writeLine(line);
    if (summary.dead_letter_file)
      writeLine(terminalSafe(`events that still fail: ${summary.dead_letter_file}`));
  }
  return summary.failed === 0 && summary.rejected === 0 && !interrupted ? 0 : 1;
}

/** FILE must be a readable file: a directory or an unreadable path is a usage error, as for verify. */
function checkReplayFile(file: string): void {
  let isDirectory: boolean;
  try {
    isDirectory = statSync(file).isDirectory();
  } catch {
    throw new UsageError(`no such file: ${file}`);
  }
  if (isDirectory) throw new UsageError(`${file} is a directory: replay reads one JSONL file`);
  try {
    accessSync(file, constants.R_OK);
  } catch (error) {
    throw new UsageError(`cannot read ${file}: ${errorMessage(error)}`);
  }
}

/**
 * The `--to` handler: puts the record's original message, byte for byte, on the target. An HTTP
 * ingress that answers 4xx has judged the event (dead now); a redirect is FORWARD_REDIRECTED;
 * anything else is retried.
 */
function injector(target: Target, source: ReplaySource) {
  return async (_event: unknown, context: HandlerContext): Promise<void> => {
    const body = source.bodyOf(context.messageId);
    if (body === undefined) throw new Error(`no message kept for ${context.messageId}`);
    const delivery = await target.send({ body, eventId: context.eventId, eventType: context.eventType });
    if (delivery.accepted) return;
    const reason = `${target.name} answered ${delivery.detail}`;
    const status = delivery.status ?? 0;
    if (status >= 300 && status < 400) throw new ForwardError('FORWARD_REDIRECTED', reason);
    if (status >= 400 && status < 500 && status !== 408 && status !== 429) throw new DeadLetterError(reason);
    throw new RetryLaterError(
      reason,
      delivery.retryAfterSeconds === undefined ? {} : { delayMs: delivery.retryAfterSeconds * 1000 },
    );
  };
}
