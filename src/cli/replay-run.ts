/**
 * The replay engine, usable from code (the CLI's `replay` and, later, a console are its callers):
 * re-drives what a `ReplayReader` reads through a consumer (verification again, the worker's
 * dedupe store, validation, retries, still-failing events to a new dead-letter file), forwarding
 * each event's signed body to a URL or putting the original envelope on a target queue.
 */
import type { Logger } from 'pino';
import { type Consumer, createConsumer } from '../consumer/consumer.js';
import { createJsonlDeadLetters, type JsonlDeadLetterSink } from '../consumer/dead-letter-sink.js';
import type { HandlerContext } from '../consumer/router.js';
import { DeadLetterError, ForwardError, RetryLaterError } from '../core/errors.js';
import { redact } from '../core/redact.js';
import type { ReplayReader, ReplayReaderContext } from '../core/replay-reader.js';
import type { Keyring } from '../core/secrets.js';
import type { Target } from '../core/target.js';
import type { DedupeStore } from '../dedupe/types.js';
import { createForwarder, describeUrl } from '../sidecar/forward.js';
import { specForms, transportFor } from '../transports.js';
import { UsageError } from './common.js';
import type { ReplayFilter } from './filters.js';
import { Pacer } from './rate.js';
import { forcingDedupe, injectingDedupe } from './replay-dedupe.js';
import { type ReplayEventRow, ReplayReport, type ReplaySummary } from './replay-report.js';
import { type ReplayMessage, ReplaySource } from './replay-source.js';

/**
 * What the new dead-letter file keeps of a message that did not verify: all of it. The worker
 * bounds such records (`deadLetterMaxUnverifiedBytes`) because anyone who can reach its source
 * can send one; a replay's input is already stored (the operator's file, a broker's dead-letter
 * channel), and its new file is the operator's copy of what is left to fix and replay again. A
 * prefix there would lose an event that was whole in the input. Such a message is still stored
 * in at most 4/3 of its bytes (base64 when JSON escaping would cost more), so the new file stays
 * bounded by what the replay read.
 */
const KEEP_WHOLE = Number.MAX_SAFE_INTEGER;

/** Every form a replay SOURCE takes, from the transport registry. */
export const REPLAY_FORMS = specForms('replay');

/** Opens what SOURCE names through the transport registry (its SDK is loaded only then). */
export async function openReplayReader(spec: string, context: ReplayReaderContext): Promise<ReplayReader> {
  const transport = transportFor(spec, 'replay');
  if (!transport?.replay)
    throw new UsageError(`replay cannot read "${redact(spec)}": SOURCE is ${REPLAY_FORMS}`);
  return transport.replay.open(spec, context);
}

export interface ReplayRunOptions {
  /** What to read (opened through the transport registry: `openReplayReader`). Closed by the run. */
  readonly reader: ReplayReader;
  readonly filter: ReplayFilter;
  /** POST each event's signed body here; or give `target`. */
  readonly forward?: string | undefined;
  /** Extra request headers with each forward (the worker's `forward.headers`, e.g. an internal token). */
  readonly forwardHeaders?: Readonly<Record<string, string>> | undefined;
  /** Put each original envelope on this queue (closed by the run); or give `forward`. */
  readonly target?: Target | undefined;
  readonly keyring: Keyring;
  /** The worker's store (closed by the run). */
  readonly dedupe: DedupeStore;
  readonly logger: Logger;
  /** Where still-failing events go (created only when there is one). */
  readonly deadLetterPath: string;
  /** Also re-drive events the store marks as done. */
  readonly force?: boolean;
  readonly checkAge?: boolean;
  /** Tries per event (default 3). */
  readonly attempts?: number;
  /** Events sent at once (default 8). */
  readonly concurrency?: number;
  /** Per request (default 10000). */
  readonly timeoutMs?: number;
  /** Larger messages are rejected as ENVELOPE_TOO_LARGE (default 1 MiB): give the worker's. */
  readonly maxEnvelopeBytes?: number | undefined;
  /** At most this many events per second. */
  readonly rate?: number | undefined;
  /** Stops the run (the events in flight finish first); the result says `interrupted`. */
  readonly signal?: AbortSignal;
  /** Each message's final outcome. */
  readonly onEvent?: (row: ReplayEventRow) => void;
  /** The summary as a JSON line when printed (`ReplayReport.print`). */
  readonly json?: boolean;
  /** A progress line on stderr (default false). */
  readonly progress?: boolean;
}

export interface ReplayRunResult {
  readonly summary: ReplaySummary;
  readonly interrupted: boolean;
  /** For printing the summary (`report.print`). */
  readonly report: ReplayReport;
}

/**
 * Runs a replay to the end of what the reader reads (a file's end, a queue quiet for the settle
 * period, a hub's end at start, `--max`), or until `signal` aborts; then closes the reader, the
 * store and the target. A hub's `since`/`until` were the reader's window, so they do not select
 * again on `signed_at`.
 */
export async function runReplay(options: ReplayRunOptions): Promise<ReplayRunResult> {
  const sink = createJsonlDeadLetters(options.deadLetterPath);
  const report = new ReplayReport({
    total: await options.reader.total().catch(() => undefined),
    sourceKind: options.reader.kind,
    sent: options.target ? 'injected' : 'forwarded',
    json: options.json ?? false,
    onEvent: options.onEvent,
    progress: options.progress ?? false,
  });
  const filter =
    options.reader.kind === 'hub'
      ? { ...options.filter, since: undefined, until: undefined }
      : options.filter;
  const source = new ReplaySource({
    reader: options.reader,
    filter,
    pacer: options.rate === undefined ? undefined : new Pacer(options.rate),
    onFiltered: (message) => report.filtered(message),
  });
  const { consumer, close } = replayConsumer(options, { source, sink, report });
  const interrupted = await runUntilStopped(consumer, close, options.signal);
  report.finish();
  const summary = report.summary({
    filteredOut: source.filteredOut,
    target: options.target ? options.target.name : describeUrl(options.forward as string),
    deadLetterFile: sink.count > 0 ? options.deadLetterPath : null,
    stoppedAtMax: options.reader.stoppedAtMax,
    readFailure: options.reader.failure ?? options.reader.progress?.failure,
  });
  return { summary, interrupted, report };
}

/**
 * The consumer that re-drives the records, with its handler (the forwarder, or the injector for
 * a target) and a `close` for the handler's connections once it has stopped.
 */
function replayConsumer(
  options: ReplayRunOptions,
  { source, sink, report }: { source: ReplaySource; sink: JsonlDeadLetterSink; report: ReplayReport },
): { consumer: Consumer<ReplayMessage>; close(): Promise<void> } {
  const { target, logger } = options;
  const force = options.force ?? false;
  const concurrency = options.concurrency ?? 8;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const onForced = (eventId: string) => {
    report.forced.add(eventId);
    logger.warn({ event_id: eventId }, '--force: re-driving an event the dedupe store marks as done');
  };
  const consumer = createConsumer({
    source,
    secrets: options.keyring,
    dedupe: target
      ? injectingDedupe(options.dedupe, { force, onForced })
      : force
        ? forcingDedupe(options.dedupe, onForced)
        : options.dedupe,
    deadLetter: sink,
    ...(options.maxEnvelopeBytes === undefined ? {} : { maxEnvelopeBytes: options.maxEnvelopeBytes }),
    deadLetterMaxUnverifiedBytes: KEEP_WHOLE,
    checkAge: options.checkAge ?? false,
    concurrency,
    retry: { maxAttempts: options.attempts ?? 3, baseDelayMs: 500, maxDelayMs: 5000 },
    handlerTimeoutMs: timeoutMs + 1000,
    logger,
    onSettled: (settled) => report.settled(settled),
    // Replay's spans say so: an operator's re-drive, not the queue's delivery.
    traceAttributes: {
      'partner_events.replay': true,
      'partner_events.replay.force': force,
      'partner_events.replay.target': target ? target.name : describeUrl(options.forward as string),
    },
  });
  const forwarder = target
    ? undefined
    : createForwarder({
        url: options.forward as string,
        timeoutMs,
        connections: concurrency,
        ...(options.forwardHeaders ? { headers: options.forwardHeaders } : {}),
      });
  const handler = forwarder ?? injector(target as Target, source);
  consumer.on('*', handler).onUnknown(handler);
  const close = async () => {
    await target?.close();
    await forwarder?.close();
  };
  return { consumer, close };
}

/** Runs the consumer to its source's end or until `signal` aborts (which drains it); true when aborted. */
async function runUntilStopped(
  consumer: Consumer<ReplayMessage>,
  close: () => Promise<void>,
  signal: AbortSignal | undefined,
): Promise<boolean> {
  let interrupted = false;
  const onAbort = () => {
    interrupted = true;
    void consumer.stop();
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  if (signal?.aborted) onAbort();
  await consumer.start();
  await consumer.stopped;
  await close();
  signal?.removeEventListener('abort', onAbort);
  return interrupted;
}

/**
 * The target handler: puts the record's original message, byte for byte, on the target. An HTTP
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
