import { accessSync, constants, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { Logger } from 'pino';
import { type Consumer, createConsumer } from '../consumer/consumer.js';
import { createJsonlDeadLetters, type JsonlDeadLetterSink } from '../consumer/dead-letter-sink.js';
import type { HandlerContext } from '../consumer/router.js';
import { DeadLetterError, errorMessage, ForwardError, RetryLaterError } from '../core/errors.js';
import { hasCredentials } from '../core/http-answer.js';
import { createLogger } from '../core/logger.js';
import type { Keyring } from '../core/secrets.js';
import type { DedupeStore } from '../dedupe/types.js';
import { createForwarder, describeUrl, forwardUrlProblem } from '../sidecar/forward.js';
import {
  checkDeadLetterFile,
  DEFAULT_DEDUPE,
  loadKeyring,
  openDedupe,
  parse,
  parsePositiveInt,
  UsageError,
  writeLine,
} from './common.js';
import { parseFilter } from './filters.js';
import { countLines } from './progress.js';
import { Pacer, parseRate } from './rate.js';
import { forcingDedupe, injectingDedupe } from './replay-dedupe.js';
import { type DryRunOptions, dryRun } from './replay-dry-run.js';
import { ReplayReport } from './replay-report.js';
import { type ReplayMessage, ReplaySource } from './replay-source.js';
import { openTarget, TARGET_FORMS, type Target } from './targets.js';

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

export async function replayCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, REPLAY_OPTIONS);
  if (values.help) {
    writeLine(REPLAY_USAGE);
    return 0;
  }
  const options = replayArgs(values, positionals);
  const keyring = loadKeyring(options.secretsFile);
  if (!options.dryRun) await checkDeadLetterFile(options.deadLetter ?? defaultDeadLetterPath(options.file));
  const logger = createLogger({ level: process.env.LOG_LEVEL ?? 'warn' }, process.stderr);
  // Opened before the store, so a bad --to fails before anything else is touched.
  const target =
    options.to && !options.dryRun
      ? await openTarget(options.to, { concurrency: options.concurrency })
      : undefined;
  const dedupe = await openDedupe(options.dedupe, { readOnly: options.dryRun, logger });
  if (options.force) {
    process.stderr.write(
      options.to
        ? 'WARNING --force: events the dedupe store marks as done are forgotten by it and re-injected: the worker will handle them AGAIN\n'
        : 'WARNING --force: events the dedupe store marks as done are forwarded AGAIN: your app may apply them twice\n',
    );
  }
  if (options.dryRun) return dryRun(options, keyring, dedupe);
  return replay(options, { keyring, logger, dedupe, target });
}

const REPLAY_OPTIONS = {
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
} as const;

type ReplayValues = ReturnType<typeof parse<typeof REPLAY_OPTIONS>>['values'];

/** replay's flags, checked. */
interface ReplayArgs extends DryRunOptions {
  readonly dryRun: boolean;
  /** The `--dedupe` spec. */
  readonly dedupe: string;
  /** `--dead-letter`; default beside FILE. */
  readonly deadLetter: string | undefined;
  readonly attempts: number;
  readonly concurrency: number;
  readonly timeoutMs: number;
  /** `--rate`, events per second. */
  readonly rate: number | undefined;
  readonly secretsFile: string | undefined;
}

/** Every usage error, before anything is opened. */
function replayArgs(values: ReplayValues, positionals: readonly string[]): ReplayArgs {
  const file = positionals[0];
  if (!file || positionals.length > 1) throw new UsageError('replay needs exactly one FILE');
  checkReplayFile(file);
  checkDestination(values);
  return {
    file,
    forward: values.forward,
    to: values.to,
    force: values.force,
    json: values.json,
    checkAge: values['check-age'],
    dryRun: values['dry-run'],
    dedupe: values.dedupe,
    deadLetter: values['dead-letter'],
    attempts: parsePositiveInt('--attempts', values.attempts, 3),
    concurrency: parsePositiveInt('--concurrency', values.concurrency, 8),
    timeoutMs: parsePositiveInt('--timeout-ms', values['timeout-ms'], 10_000),
    rate: values.rate === undefined ? undefined : parseRate('--rate', values.rate),
    filter: parseFilter({
      type: values.type,
      eventId: values['event-id'],
      code: values.code,
      since: values.since,
      until: values.until,
    }),
    secretsFile: values['secrets-file'],
  };
}

/** Exactly one of --forward and --to (or neither with --dry-run), and a --forward URL replay can use. */
function checkDestination(values: ReplayValues): void {
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
}

/** What the replay runs with, opened by replayCommand. */
interface ReplayParts {
  readonly keyring: Keyring;
  readonly logger: Logger;
  readonly dedupe: DedupeStore;
  /** With `--to`; else events are forwarded to `--forward`. */
  readonly target: Target | undefined;
}

/**
 * Re-drives the file through a consumer (verification, dedupe, validation, retries, dead letters
 * to a new file) until its end or SIGINT / SIGTERM, then prints the summary. Exit code 0 when
 * nothing failed or was rejected and the run was not interrupted.
 */
async function replay(options: ReplayArgs, parts: ReplayParts): Promise<number> {
  const deadLetterPath = options.deadLetter ?? defaultDeadLetterPath(options.file);
  const sink = createJsonlDeadLetters(deadLetterPath);
  const report = new ReplayReport({
    lines: await countLines(options.file),
    sent: parts.target ? 'injected' : 'forwarded',
    json: options.json,
  });
  const source = new ReplaySource({
    path: options.file,
    filter: options.filter,
    pacer: options.rate === undefined ? undefined : new Pacer(options.rate),
    onFiltered: (message) => report.filtered(message.line),
  });
  const { consumer, close } = replayConsumer(options, parts, { source, sink, report });
  const interrupted = await runUntilStopped(consumer, close);
  report.finish();
  const summary = report.summary({
    filteredOut: source.filteredOut,
    target: parts.target ? parts.target.name : describeUrl(options.forward as string),
    deadLetterFile: sink.count > 0 ? deadLetterPath : null,
  });
  report.print(summary, { file: options.file, interrupted });
  return summary.failed === 0 && summary.rejected === 0 && !interrupted ? 0 : 1;
}

/** `FILE.failed-<time>.jsonl`, beside FILE. */
function defaultDeadLetterPath(file: string): string {
  const time = new Date().toISOString().replace(/[:.]/g, '-');
  return join(dirname(file), `${basename(file, '.jsonl')}.failed-${time}.jsonl`);
}

/**
 * The consumer that re-drives the records, with its handler (the forwarder, or the injector for
 * `--to`) and a `close` for the handler's connections once it has stopped.
 */
function replayConsumer(
  options: ReplayArgs,
  parts: ReplayParts,
  { source, sink, report }: { source: ReplaySource; sink: JsonlDeadLetterSink; report: ReplayReport },
): { consumer: Consumer<ReplayMessage>; close(): Promise<void> } {
  const { target, logger } = parts;
  const onForced = (eventId: string) => {
    report.forced.add(eventId);
    logger.warn({ event_id: eventId }, '--force: re-driving an event the dedupe store marks as done');
  };
  const consumer = createConsumer({
    source,
    secrets: parts.keyring,
    dedupe: target
      ? injectingDedupe(parts.dedupe, { force: options.force, onForced })
      : options.force
        ? forcingDedupe(parts.dedupe, onForced)
        : parts.dedupe,
    deadLetter: sink,
    checkAge: options.checkAge,
    concurrency: options.concurrency,
    retry: { maxAttempts: options.attempts, baseDelayMs: 500, maxDelayMs: 5000 },
    handlerTimeoutMs: options.timeoutMs + 1000,
    logger,
    onSettled: (settled) => report.settled(settled),
  });
  const forwarder = target
    ? undefined
    : createForwarder({
        url: options.forward as string,
        timeoutMs: options.timeoutMs,
        connections: options.concurrency,
      });
  const handler = forwarder ?? injector(target as Target, source);
  consumer.on('*', handler).onUnknown(handler);
  const close = async () => {
    await target?.close();
    await forwarder?.close();
  };
  return { consumer, close };
}

/**
 * Runs the consumer to the end of the file, or until SIGINT / SIGTERM (which drain it), then
 * closes the handler's connections (a signal meanwhile is still caught). True when interrupted.
 */
async function runUntilStopped(
  consumer: Consumer<ReplayMessage>,
  close: () => Promise<void>,
): Promise<boolean> {
  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
    void consumer.stop();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  await consumer.start();
  await consumer.stopped;
  await close();
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  return interrupted;
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
