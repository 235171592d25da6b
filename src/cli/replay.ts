import { accessSync, constants, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { Logger } from 'pino';
import { errorMessage } from '../core/errors.js';
import { hasCredentials } from '../core/http-answer.js';
import { createLogger } from '../core/logger.js';
import { redact } from '../core/redact.js';
import type { ReplayReader, ReplayReaderContext } from '../core/replay-reader.js';
import type { Keyring } from '../core/secrets.js';
import type { DedupeStore } from '../dedupe/types.js';
import { describeUrl, forwardUrlProblem } from '../sidecar/forward.js';
import { startTraceExport } from '../sidecar/tracing-export.js';
import { describeSpec, transportFor } from '../transports.js';
import {
  checkDeadLetterFile,
  DEFAULT_DEDUPE,
  loadKeyring,
  onStopSignals,
  openDedupe,
  parse,
  parsePositiveInt,
  UsageError,
  writeLine,
} from './common.js';
import { parseFilter, parseTimeMs } from './filters.js';
import { parseRate } from './rate.js';
import { appendReplayAudit, filtersOf, REPLAY_LOG_NAME, replayLogPath } from './replay-audit.js';
import {
  ENV_DEDUPE,
  ENV_FORWARD_URL,
  ENV_MAX_ENVELOPE_BYTES,
  replayEnvelopeLimit,
  type WithheldHeaders,
  withheldHeadersNote,
  workerSettings,
} from './replay-config.js';
import { type DryRunOptions, dryRun } from './replay-dry-run.js';
import type { ReplayEventRow } from './replay-report.js';
import { openReplayReader, REPLAY_FORMS, runReplay } from './replay-run.js';
import { openTarget, TARGET_FORMS, type Target } from './targets.js';

export const REPLAY_USAGE = `Usage: partner-events replay SOURCE (--forward URL | --to TARGET) [options]

Re-drives dead events safely: each is verified again (signature; age only with --check-age,
since dead events are old), checked against the worker's dedupe store, validated, and then
either its signed body POSTed to your app (--forward) or the original envelope put back on a
queue for the worker (--to). Events that still fail go to a new dead-letter file, whose path is
printed, with a report by outcome and by code. Every replay appends one record to the replay log
(${REPLAY_LOG_NAME}) beside that file.

SOURCE: ${REPLAY_FORMS}
  A queue is drained: a message is deleted once its event went through or was already done; one
  that still fails stays on the queue (visible again) and is also written to the dead-letter file;
  one the filters leave out is visible again at once. A hub is read, never consumed.

  --forward URL        POST target (2xx = success) (default: PARTNER_EVENTS_FORWARD_URL unless
                       --to, else the --config file's forward.url)
  --to TARGET          re-inject the original envelopes, byte for byte, into a queue the worker
                       consumes: ${TARGET_FORMS}
  --config FILE        the worker's config file (as for run): the forward URL, timeout and extra
                       headers (e.g. an internal token, never given on the command line), the
                       dedupe store, the secrets file and maxEnvelopeBytes; the flags here win
                       over it, but the file's headers go with --forward URL only to its
                       forward.url's origin
  --send-config-headers  send the --config file's headers to --forward URL on another origin too
  --dedupe SPEC        sqlite:PATH, redis://…, redis-cluster://… or memory; use the worker's store
                       (default: ${ENV_DEDUPE}, else the --config file's, else ${DEFAULT_DEDUPE})
  --force              also re-drive events the dedupe store marks as done (logged loudly)
  --dry-run            verify and look up each event, change nothing, send nothing

Select records (all given criteria must hold; repeat a flag or use commas for "any of"):
  --type TYPE          event type; * is a wildcard (daily.data.*)
  --event-id ID        event id
  --code CODE          the code the record was dead-lettered with (HANDLER_FAILED, …): a file's
                       records, an SQS dead-letter queue's partner_events_code attribute, a poison
                       hub's partner-events-dead-code property
  --since TIME         signed_at at or after TIME (ISO 8601 or Unix seconds); on a hub: read
                       events the hub accepted at or after TIME
  --until TIME         signed_at at or before TIME; on a hub: up to events accepted at TIME

  --max N              read at most N messages: a file's first N records (the rest is left
                       unread, and the report says so), a queue's or hub's first N messages

Queues and hubs:
  --settle-seconds N   a queue's replay ends once nothing new arrived for N s (default 5)
  --visibility-timeout N  seconds a queue message this replay holds stays hidden, renewed while
                       held (default 30; after a crash, held messages return after this)
  --consumer-group CG  the hub's consumer group to read with (default $Default); never writes
                       checkpoints, but give the replay its own group if the worker uses $Default

  --rate N/s           at most N events sent per second (also N/min)
  --check-age          also reject events whose signed_at is older than 5 minutes
  --dead-letter PATH   where still-failing events go (default FILE.failed-<time>.jsonl beside a
                       file, ./replay-<queue>.failed-<time>.jsonl for a queue or hub)
  --attempts N         tries per event before it counts as failed (default 3)
  --concurrency N      events sent at once (default 8)
  --timeout-ms N       per request (default 10000)
  --max-envelope-bytes N  larger messages are rejected as ENVELOPE_TOO_LARGE; give the worker's
                       (default: ${ENV_MAX_ENVELOPE_BYTES}, else the --config file's
                       maxEnvelopeBytes, else 1048576)
  --secrets-file PATH  secrets (default: PARTNER_EVENTS_SECRETS_FILE, else PARTNER_EVENTS_SIGNING_SECRET[_PREVIOUS])
  --json               one JSON line per event, then a summary object as the last line (no progress line)

Exit: 0 when nothing failed or was rejected, 1 otherwise, 2 on usage errors.`;

export async function replayCommand(args: string[]): Promise<number> {
  const startedAt = new Date().toISOString();
  const { values, positionals } = parse(args, REPLAY_OPTIONS);
  if (values.help) {
    writeLine(REPLAY_USAGE);
    return 0;
  }
  const options = replayArgs(values, positionals);
  const keyring = loadKeyring(options.secretsFile);
  const deadLetter = options.deadLetter ?? defaultDeadLetterPath(options.source);
  if (!options.dryRun) await checkDeadLetterFile(deadLetter);
  const logger = createLogger({ level: process.env.LOG_LEVEL ?? 'warn' }, process.stderr);
  if (options.withheldHeaders) process.stderr.write(`${withheldHeadersNote(options.withheldHeaders)}\n`);
  // Opened before the store, so a bad --to fails before anything else is touched.
  const target =
    options.to && !options.dryRun
      ? await openTarget(options.to, { concurrency: options.concurrency })
      : undefined;
  const reader = await openReplayReader(options.source, readerContext(options, logger));
  const dedupe = await openDedupe(options.dedupe, {
    readOnly: options.dryRun,
    logger,
    ...options.dedupeKeys,
  });
  if (options.force) {
    process.stderr.write(
      options.to
        ? 'WARNING --force: events the dedupe store marks as done are forgotten by it and re-injected: the worker will handle them AGAIN\n'
        : 'WARNING --force: events the dedupe store marks as done are forwarded AGAIN: your app may apply them twice\n',
    );
  }
  const audit = { startedAt, deadLetter };
  if (options.dryRun) {
    const run = await dryRun(options, {
      reader,
      keyring,
      dedupe,
      source: describeSpec(options.source, 'replay'),
    });
    await audited(options, audit, run.exitCode, { counts: run.summary, interrupted: false });
    return run.exitCode;
  }
  return replay(options, { keyring, logger, dedupe, target, reader, deadLetter }, audit);
}

const REPLAY_OPTIONS = {
  forward: { type: 'string' },
  to: { type: 'string' },
  config: { type: 'string' },
  'send-config-headers': { type: 'boolean', default: false },
  force: { type: 'boolean', default: false },
  dedupe: { type: 'string' },
  json: { type: 'boolean', default: false },
  'dry-run': { type: 'boolean', default: false },
  'check-age': { type: 'boolean', default: false },
  'dead-letter': { type: 'string' },
  attempts: { type: 'string' },
  concurrency: { type: 'string' },
  'timeout-ms': { type: 'string' },
  'max-envelope-bytes': { type: 'string' },
  'secrets-file': { type: 'string' },
  type: { type: 'string', multiple: true },
  'event-id': { type: 'string', multiple: true },
  code: { type: 'string', multiple: true },
  since: { type: 'string' },
  until: { type: 'string' },
  rate: { type: 'string' },
  max: { type: 'string' },
  'settle-seconds': { type: 'string' },
  'visibility-timeout': { type: 'string' },
  'consumer-group': { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

type ReplayValues = ReturnType<typeof parse<typeof REPLAY_OPTIONS>>['values'];

/** replay's flags, checked. */
interface ReplayArgs extends DryRunOptions {
  /** SOURCE as a spec the registry reads (`file:PATH` for a bare path). */
  readonly source: string;
  readonly dryRun: boolean;
  /** The `--dedupe` spec (or the worker's, from `--config`). */
  readonly dedupe: string;
  /** The worker's dedupe keys and retention, when its config file sets them. */
  readonly dedupeKeys: { tenant?: string; retentionMs?: number };
  /** Extra request headers to the app, from the worker's config file only (never argv). */
  readonly forwardHeaders: Readonly<Record<string, string>>;
  /** The file's headers not sent: `--forward` names another origin than the file's `forward.url`. */
  readonly withheldHeaders: WithheldHeaders | undefined;
  /** `--dead-letter`; default beside FILE, or in the current folder. */
  readonly deadLetter: string | undefined;
  readonly attempts: number;
  readonly concurrency: number;
  readonly timeoutMs: number;
  /** `--rate`, events per second. */
  readonly rate: number | undefined;
  readonly secretsFile: string | undefined;
  readonly max: number | undefined;
  readonly settleSeconds: number;
  readonly visibilityTimeoutSeconds: number;
  readonly consumerGroup: string;
  /** `--since` / `--until` in ms, for a hub's window. */
  readonly window: { readonly since: number | undefined; readonly until: number | undefined };
}

/** Every usage error, before anything is opened. */
function replayArgs(values: ReplayValues, positionals: readonly string[]): ReplayArgs {
  const given = positionals[0];
  if (!given || positionals.length > 1) throw new UsageError('replay needs exactly one SOURCE');
  const source = replaySpec(given);
  if (source.startsWith(FILE_PREFIX)) checkReplayFile(source.slice(FILE_PREFIX.length));
  const worker = fromWorkerConfig(values);
  checkDestination({ ...values, forward: worker.forward });
  return {
    ...worker,
    source,
    to: values.to,
    force: values.force,
    json: values.json,
    checkAge: values['check-age'],
    dryRun: values['dry-run'],
    deadLetter: values['dead-letter'],
    attempts: parsePositiveInt('--attempts', values.attempts, 3),
    concurrency: parsePositiveInt('--concurrency', values.concurrency, 8),
    timeoutMs: parsePositiveInt('--timeout-ms', values['timeout-ms'], worker.timeoutMs),
    maxEnvelopeBytes: replayEnvelopeLimit(values['max-envelope-bytes'], process.env, worker.maxEnvelopeBytes),
    rate: values.rate === undefined ? undefined : parseRate('--rate', values.rate),
    filter: parseFilter({
      type: values.type,
      eventId: values['event-id'],
      code: values.code,
      since: values.since,
      until: values.until,
    }),
    max: values.max === undefined ? undefined : parsePositiveInt('--max', values.max, 0),
    settleSeconds: parsePositiveInt('--settle-seconds', values['settle-seconds'], 5),
    visibilityTimeoutSeconds: parsePositiveInt('--visibility-timeout', values['visibility-timeout'], 30),
    consumerGroup: values['consumer-group'] ?? '$Default',
    window: {
      since: values.since === undefined ? undefined : parseTimeMs('--since', values.since),
      until: values.until === undefined ? undefined : parseTimeMs('--until', values.until),
    },
  };
}

const FILE_PREFIX = 'file:';

/** What the flags and, with `--config`, the worker's config file say; the flags win. */
function fromWorkerConfig(values: ReplayValues) {
  const flags = {
    // As for run: the flag, then the environment (how the console hands the worker's URL to its
    // replay child: its query may hold a key), then the file. Not with --to, which forwards nothing.
    forward:
      values.forward ?? (values.to === undefined ? process.env[ENV_FORWARD_URL] || undefined : undefined),
    to: values.to,
    dedupe: values.dedupe,
    secretsFile: values['secrets-file'],
    sendConfigHeaders: values['send-config-headers'],
  };
  if (flags.sendConfigHeaders && !values.config)
    throw new UsageError('--send-config-headers sends the headers of a --config FILE: give one');
  const worker = values.config ? workerSettings(values.config, flags) : undefined;
  return {
    forward: flags.to === undefined ? (worker?.forward?.url ?? flags.forward) : flags.forward,
    forwardHeaders: worker?.forward?.headers ?? {},
    withheldHeaders: worker?.withheldHeaders,
    timeoutMs: worker?.forward?.timeoutMs ?? 10_000,
    // As for run: the flag, then the environment (how the console hands the worker's store to
    // its replay child: a Redis URL may hold a password, and a command line is public), then the file.
    dedupe: flags.dedupe ?? (process.env[ENV_DEDUPE] || undefined) ?? worker?.dedupe ?? DEFAULT_DEDUPE,
    dedupeKeys: {
      // As for run, PARTNER_EVENTS_TENANT beats the file (openDedupe reads it when none is given).
      ...(worker?.tenant === undefined || process.env.PARTNER_EVENTS_TENANT ? {} : { tenant: worker.tenant }),
      ...(worker?.retentionMs === undefined ? {} : { retentionMs: worker.retentionMs }),
    },
    secretsFile: worker?.secretsFile ?? flags.secretsFile,
    // The file's only: the flag and the environment win over it (replayEnvelopeLimit).
    maxEnvelopeBytes: worker?.maxEnvelopeBytes,
  };
}

/** SOURCE as the registry reads it: a spec a transport names for replay, else a path (`file:PATH`). */
function replaySpec(given: string): string {
  if (transportFor(given, 'replay')) return given;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(given) || /^(azure-[a-z-]+|sqs):/.test(given)) {
    throw new UsageError(`replay cannot read "${redact(given)}": SOURCE is ${REPLAY_FORMS}`);
  }
  return `${FILE_PREFIX}${given}`;
}

/** Exactly one of --forward and --to (or neither with --dry-run), and a --forward URL replay can use. */
function checkDestination(values: {
  readonly forward?: string | undefined;
  readonly to?: string | undefined;
  readonly 'dry-run': boolean;
}): void {
  if (values.forward && values.to) throw new UsageError('give --forward URL or --to TARGET, not both');
  if (!values.forward && !values.to && !values['dry-run'])
    throw new UsageError('replay needs --forward URL or --to TARGET (or --dry-run)');
  const forwardProblem = values.forward ? forwardUrlProblem(values.forward) : undefined;
  if (forwardProblem) {
    // Credentials go in forward.headers of the worker's config file, which replay reads with --config.
    const hint = hasCredentials(values.forward as string)
      ? " (replay sends the worker's forward.headers with --config FILE)"
      : '';
    throw new UsageError(`--forward ${forwardProblem}${hint}`);
  }
}

function readerContext(options: ReplayArgs, logger: Logger): ReplayReaderContext {
  return {
    logger,
    settleMs: options.settleSeconds * 1000,
    max: options.max,
    visibilityTimeoutSeconds: options.visibilityTimeoutSeconds,
    since: options.window.since,
    until: options.window.until,
    consumerGroup: options.consumerGroup,
  };
}

/** What the CLI opened for the run. */
interface ReplayParts {
  readonly keyring: Keyring;
  readonly logger: Logger;
  readonly dedupe: DedupeStore;
  /** With `--to`; else events are forwarded to `--forward`. */
  readonly target: Target | undefined;
  readonly reader: ReplayReader;
  readonly deadLetter: string;
}

/** What the audit record needs besides the run's counts. */
interface AuditFacts {
  readonly startedAt: string;
  readonly deadLetter: string;
}

/**
 * Runs the replay (runReplay) until its source's end or SIGINT / SIGTERM, prints the summary and
 * appends the audit record. Exit code 0 when nothing failed or was rejected, the source was read
 * to its end and the run was not interrupted.
 */
async function replay(options: ReplayArgs, parts: ReplayParts, audit: AuditFacts): Promise<number> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  const unhookSignals = onStopSignals(onSignal);
  // The same OTEL_* variables as run: replay's spans go where the worker's go.
  const traces = await startTraceExport(process.env);
  try {
    const run = await runReplay({
      ...parts,
      filter: options.filter,
      forward: options.forward,
      forwardHeaders: options.forwardHeaders,
      deadLetterPath: parts.deadLetter,
      force: options.force,
      checkAge: options.checkAge,
      attempts: options.attempts,
      concurrency: options.concurrency,
      timeoutMs: options.timeoutMs,
      maxEnvelopeBytes: options.maxEnvelopeBytes,
      rate: options.rate,
      signal: stop.signal,
      json: options.json,
      progress: !options.json,
      ...(options.json ? { onEvent: (row: ReplayEventRow) => writeLine(JSON.stringify(row)) } : {}),
    });
    const { interrupted, report } = run;
    const withheld = options.withheldHeaders?.names;
    const summary = withheld ? { ...run.summary, headers_withheld: [...withheld] } : run.summary;
    report.print(summary, { source: describeSpec(options.source, 'replay'), interrupted });
    const clean = summary.failed === 0 && summary.rejected === 0 && summary.read_failed === undefined;
    const exitCode = clean && !interrupted ? 0 : 1;
    await audited(options, audit, exitCode, { counts: { ...summary }, interrupted });
    return exitCode;
  } finally {
    unhookSignals();
    await traces?.shutdown().catch(() => undefined); // an unreachable collector does not fail a replay
  }
}

/** Appends the run's record to the replay log beside its dead-letter file. */
async function audited(
  options: ReplayArgs,
  audit: AuditFacts,
  exitCode: number,
  run: { counts: Record<string, unknown>; interrupted: boolean },
): Promise<void> {
  await appendReplayAudit(replayLogPath(audit.deadLetter), {
    started_at: audit.startedAt,
    source: describeSpec(options.source, 'replay'),
    target: options.to
      ? describeSpec(options.to, 'target')
      : options.forward
        ? describeUrl(options.forward)
        : null,
    dry_run: options.dryRun,
    force: options.force,
    ...(options.withheldHeaders ? { headers_withheld: [...options.withheldHeaders.names] } : {}),
    filters: filtersOf(options.filter, options.max === undefined ? {} : { max: options.max }),
    exit_code: exitCode,
    interrupted: run.interrupted,
    counts: run.counts,
  });
}

/** `FILE.failed-<time>.jsonl` beside FILE; for a queue or hub, `replay-<queue>.failed-<time>.jsonl` here. */
function defaultDeadLetterPath(source: string): string {
  const time = new Date().toISOString().replace(/[:.]/g, '-');
  if (source.startsWith(FILE_PREFIX)) {
    const file = source.slice(FILE_PREFIX.length);
    return join(dirname(file), `${basename(file, '.jsonl')}.failed-${time}.jsonl`);
  }
  // The queue's or hub's name: the spec's last word, without a query (a SAS token).
  const name = source.split(/[?#]/)[0]?.split(/[:/]/).filter(Boolean).at(-1) ?? 'source';
  return `replay-${name.replace(/[^A-Za-z0-9._-]+/g, '-')}.failed-${time}.jsonl`;
}

/** FILE must be a readable file: a directory or an unreadable path is a usage error, as for verify. */
function checkReplayFile(file: string): void {
  if (!file) throw new UsageError('replay file: needs a path');
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
