import { existsSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { type FileMessage, FileSource } from '../../adapters/file/index.js';
import { JsonlDeadLetterSink } from '../dead-letter.js';
import type { DedupeStore } from '../dedupe/types.js';
import { type ErrorCode, VERIFICATION_CODES, VerificationError } from '../errors.js';
import { validateEvent } from '../events/validate.js';
import { createForwarder, describeUrl } from '../forward.js';
import { createLogger } from '../logger.js';
import type { Keyring } from '../secrets.js';
import { verifyMessage } from '../verify.js';
import { createConsumer, type SettledReport } from '../worker.js';
import {
  DEFAULT_DEDUPE,
  loadKeyring,
  openDedupe,
  parse,
  parsePositiveInt,
  UsageError,
  writeLine,
} from './common.js';
import { countLines, Progress } from './progress.js';

export const REPLAY_USAGE = `Usage: partner-events replay FILE --forward URL [options]

Re-drives envelopes or dead-letter records (JSONL) to your app, safely: each is verified again
(signature; age only with --check-age, since dead events are old), de-duplicated against the
worker's store, validated, and its signed body POSTed to URL. Events that still fail go to a new
dead-letter file, whose path is printed.

  --forward URL        POST target (2xx = success)
  --dedupe SPEC        sqlite:PATH (default ${DEFAULT_DEDUPE}) or memory; use the worker's store
  --dry-run            verify and look up each event, change nothing, forward nothing
  --check-age          also reject events whose signed_at is older than 5 minutes
  --dead-letter PATH   where still-failing events go (default FILE.failed-<time>.jsonl)
  --attempts N         tries per event before it counts as failed (default 3)
  --concurrency N      events forwarded at once (default 8)
  --timeout-ms N       per request (default 10000)
  --secrets-file PATH  secrets (default: PARTNER_EVENTS_SECRETS_FILE, else PARTNER_EVENTS_SIGNING_SECRET[_PREVIOUS])
  --json               one JSON line per event, then a summary object as the last line

Exit: 0 when nothing failed or was rejected, 1 otherwise, 2 on usage errors.`;

/** The event itself is invalid (as opposed to: the app did not take it). */
const REJECTED_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  ...VERIFICATION_CODES,
  'SCHEMA_INVALID',
  'UNKNOWN_EVENT_TYPE',
]);

export interface ReplaySummary {
  total: number;
  forwarded: number;
  duplicates: number;
  rejected: number;
  failed: number;
  dead_letter_file: string | null;
  dry_run: boolean;
}

export async function replayCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    forward: { type: 'string' },
    dedupe: { type: 'string', default: DEFAULT_DEDUPE },
    json: { type: 'boolean', default: false },
    'dry-run': { type: 'boolean', default: false },
    'check-age': { type: 'boolean', default: false },
    'dead-letter': { type: 'string' },
    attempts: { type: 'string' },
    concurrency: { type: 'string' },
    'timeout-ms': { type: 'string' },
    'secrets-file': { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (values.help) {
    writeLine(REPLAY_USAGE);
    return 0;
  }
  const file = positionals[0];
  if (!file || positionals.length > 1) throw new UsageError('replay needs exactly one FILE');
  if (!existsSync(file)) throw new UsageError(`no such file: ${file}`);
  if (!values.forward && !values['dry-run'])
    throw new UsageError('replay needs --forward URL (or --dry-run)');
  if (values.forward) {
    try {
      new URL(values.forward);
    } catch {
      throw new UsageError(`--forward is not a URL: ${describeUrl(values.forward)}`);
    }
  }
  const attempts = parsePositiveInt('--attempts', values.attempts, 3);
  const concurrency = parsePositiveInt('--concurrency', values.concurrency, 8);
  const timeoutMs = parsePositiveInt('--timeout-ms', values['timeout-ms'], 10_000);
  const keyring = loadKeyring(values['secrets-file']);
  const logger = createLogger({ level: process.env.LOG_LEVEL ?? 'warn' }, process.stderr);
  const dedupe = await openDedupe(values.dedupe, { readOnly: values['dry-run'], logger });
  const checkAge = values['check-age'];

  if (values['dry-run']) return dryRun(file, keyring, dedupe, { checkAge, json: values.json });

  const deadLetterPath =
    values['dead-letter'] ??
    join(
      dirname(file),
      `${basename(file, '.jsonl')}.failed-${new Date().toISOString().replace(/[:.]/g, '-')}.jsonl`,
    );
  const sink = new JsonlDeadLetterSink(deadLetterPath);
  const source = new FileSource({ path: file });
  const summary: ReplaySummary = {
    total: 0,
    forwarded: 0,
    duplicates: 0,
    rejected: 0,
    failed: 0,
    dead_letter_file: null,
    dry_run: false,
  };
  const progress = new Progress(await countLines(file));
  const onSettled = (report: SettledReport<FileMessage>) => {
    const { outcome } = report;
    if (outcome.kind === 'retry') return;
    summary.total++;
    if (outcome.kind === 'ack') {
      if (outcome.result === 'duplicate') summary.duplicates++;
      else summary.forwarded++;
    } else if (REJECTED_CODES.has(outcome.code)) {
      summary.rejected++;
    } else {
      summary.failed++;
    }
    progress.update(
      report.message.line,
      `forwarded ${summary.forwarded} duplicates ${summary.duplicates} rejected ${summary.rejected} failed ${summary.failed}`,
    );
    if (values.json) {
      writeLine(
        JSON.stringify({
          line: report.message.line,
          event_id: report.eventId ?? null,
          event_type: report.eventType ?? null,
          outcome:
            outcome.kind === 'ack' ? (outcome.result === 'duplicate' ? 'duplicate' : 'forwarded') : 'dead',
          code: outcome.kind === 'dead' ? outcome.code : null,
          reason: outcome.kind === 'dead' ? outcome.reason : null,
        }),
      );
    }
  };
  const consumer = createConsumer({
    source,
    secrets: keyring,
    dedupe,
    deadLetter: sink,
    checkAge,
    concurrency,
    retry: { maxAttempts: attempts, baseDelayMs: 500, maxDelayMs: 5000 },
    handlerTimeoutMs: timeoutMs + 1000,
    logger,
    onSettled,
  });
  const forward = createForwarder({ url: values.forward as string, timeoutMs });
  consumer.on('*', forward).onUnknown(forward);

  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
    void consumer.stop();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  await consumer.start();
  await consumer.stopped;
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  progress.finish();

  if (sink.count > 0) summary.dead_letter_file = deadLetterPath;
  if (!values.json) {
    writeLine(
      `replayed ${summary.total} events from ${file}: ${summary.forwarded} forwarded, ${summary.duplicates} duplicates, ` +
        `${summary.rejected} rejected, ${summary.failed} failed${interrupted ? ' (interrupted)' : ''}`,
    );
    if (summary.dead_letter_file) writeLine(`events that still fail: ${summary.dead_letter_file}`);
  }
  if (values.json) writeLine(JSON.stringify({ ...summary, ...(interrupted ? { interrupted: true } : {}) }));
  return summary.failed === 0 && summary.rejected === 0 && !interrupted ? 0 : 1;
}

async function dryRun(
  file: string,
  keyring: Keyring,
  dedupe: DedupeStore,
  options: { checkAge: boolean; json: boolean },
): Promise<number> {
  const source = new FileSource({ path: file });
  const signal = new AbortController().signal;
  const counts = { total: 0, would_forward: 0, duplicates: 0, in_progress: 0, rejected: 0 };
  for (;;) {
    const batch = await source.receive(100, signal);
    if (batch === null) break;
    for (const message of batch) {
      counts.total++;
      let row: Record<string, unknown>;
      try {
        const verified = verifyMessage(message.body, {
          keyring,
          checkAge: options.checkAge,
          enqueuedAt: message.enqueuedAt,
        });
        const validation = validateEvent(verified.eventType, verified.payload);
        const ids = { event_id: verified.eventId, event_type: verified.eventType, key_id: verified.keyId };
        if (!validation.ok) {
          counts.rejected++;
          row = { ...ids, action: 'reject', code: validation.code, reason: validation.reason };
        } else {
          const state = await dedupe.peek(verified.eventId);
          const action =
            state === 'done' ? 'skip-duplicate' : state === 'in_progress' ? 'wait-in-progress' : 'forward';
          if (state === 'done') counts.duplicates++;
          else if (state === 'in_progress') counts.in_progress++;
          else counts.would_forward++;
          row = { ...ids, action, code: null };
        }
      } catch (error) {
        counts.rejected++;
        const code = error instanceof VerificationError ? error.code : 'MALFORMED_ENVELOPE';
        row = { event_id: null, event_type: null, action: 'reject', code, reason: (error as Error).message };
      }
      await source.settle(message, { kind: 'ack', result: 'ignored' });
      if (options.json) writeLine(JSON.stringify({ line: message.line, ...row }));
      else
        writeLine(
          `line ${message.line}: ${row.action}${row.code ? ` ${row.code}` : ''} ${row.event_type ?? ''} ${row.event_id ?? ''}`.trimEnd(),
        );
    }
  }
  await source.close();
  await dedupe.close();
  const summary = { ...counts, dry_run: true };
  writeLine(
    options.json ? JSON.stringify(summary) : `dry run: ${JSON.stringify(counts)} (nothing was changed)`,
  );
  return counts.rejected === 0 ? 0 : 1;
}
