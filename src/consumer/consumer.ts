import type { Logger } from 'pino';
import { type DeadLetterRecord, deadLetterRecord } from '../core/dead-letter-record.js';
import { ConfigError, errorMessage } from '../core/errors.js';
import type { UnknownEvent } from '../core/events/schemas.js';
import { createLogger } from '../core/logger.js';
import { boundRetryPolicy, type DeadOutcome, decide } from '../core/outcome.js';
import { Keyring, type SigningSecret, secretsFromEnv } from '../core/secrets.js';
import type { RawMessage, SourceAdapter } from '../core/source-adapter.js';
import {
  type DeliveryTrace,
  type DeliveryTracer,
  deliveryTracer,
  type TraceAttributes,
} from '../core/tracing.js';
import { createMemoryDedupe } from '../dedupe/memory.js';
import { type DedupeStore, PUBLISHER_RETRY_WINDOW_MS } from '../dedupe/types.js';
import { createJsonlDeadLetters, type DeadLetterSink } from './dead-letter-sink.js';
import { Pipeline, type ProcessResult } from './pipeline.js';
import { ReceiveLoop } from './receive-loop.js';
import { type EventPattern, type EventsFor, type Handler, Router } from './router.js';
import { type ConsumerSettings, type ConsumerSettingsInput, parseSettings } from './settings.js';
import { SettledLog } from './settled-log.js';
import { StoreHealth } from './store-health.js';
import { type HeartbeatWatch, VisibilityHeartbeats } from './visibility-heartbeats.js';

export interface ConsumerOptions<M extends RawMessage = RawMessage> extends ConsumerSettingsInput {
  /** Where messages come from. Optional when you only call `process()` from your own loop. */
  source?: SourceAdapter<M>;
  /** Signing secrets, or a `Keyring` you reload yourself. Default: from the environment. */
  secrets?: readonly SigningSecret[] | Keyring;
  /** Default: in memory (state lost on restart; a warning is logged). */
  dedupe?: DedupeStore;
  /** Default: `./partner-events-dead-letters.jsonl`, created on the first dead event. */
  deadLetter?: DeadLetterSink | string;
  /** A pino logger. Default: pino at `LOG_LEVEL` (info). */
  logger?: Logger;
  /**
   * Called once per settled message, after the adapter applied the outcome. An exception it
   * throws is logged and changes nothing else.
   */
  onSettled?: (report: SettledReport<M>) => void;
  /** Clock in ms, for tests. */
  now?: () => number;
  /**
   * Spans per delivery through `@opentelemetry/api` when it is installed and an SDK is
   * registered (docs/observability.md#traces). Default true; false runs no tracing code.
   */
  tracing?: boolean;
  /** Extra attributes of every delivery span (replay marks its spans with these). */
  traceAttributes?: TraceAttributes;
}

export interface SettledReport<M extends RawMessage = RawMessage> extends ProcessResult {
  readonly message: M;
}

/** The ids of a verified event, for its dead-letter record. */
export interface DeadLetterIds {
  readonly eventId?: string | undefined;
  readonly eventType?: string | undefined;
}

export type ConsumerState = 'idle' | 'running' | 'stopping' | 'stopped';

export interface ConsumerStatus {
  readonly state: ConsumerState;
  readonly inFlight: number;
  /** Their size (bytes of binary bodies, characters of text ones), bounded by `maxInFlightBytes`. */
  readonly inFlightBytes: number;
  /** Last time `receive` returned (ms). */
  readonly lastReceiveAt: number | undefined;
  /** Since when the oldest pending `receive` call has been waiting (ms); a hung poller shows here. */
  readonly receivingSince: number | undefined;
  readonly lastReceiveError: string | undefined;
  /** False while the dedupe store is unreachable (nothing is acked then). */
  readonly dedupeAvailable: boolean;
  readonly keyIds: readonly string[];
}

const DEFAULT_DEAD_LETTER_PATH = 'partner-events-dead-letters.jsonl';

/**
 * Runs the pipeline over a source: receives while it has free capacity (bounded concurrency,
 * `ReceiveLoop`), keeps each message invisible while it is handled (`VisibilityHeartbeats`),
 * processes it, writes dead events to the dead-letter sink, then settles and reports it. Nothing
 * is acked unless its handlers succeeded or it is a proven duplicate; a dead event is acked only
 * after its dead-letter record is durable.
 *
 * long: the library's face: its public methods (on, start, stop, process, deadLetter, status)
 * over one lifecycle; polling (receive-loop.ts), heartbeats, the pipeline, the settled log and
 * the store's health are their own modules already.
 */
export class Consumer<M extends RawMessage = RawMessage> {
  readonly settings: ConsumerSettings;
  readonly keyring: Keyring;
  readonly logger: Logger;
  readonly #router = new Router();
  /** The dedupe store (a serverless wrapper checks that it outlives the instance). */
  readonly dedupeStore: DedupeStore;
  readonly #storeHealth: StoreHealth;
  readonly #deadLetter: DeadLetterSink;
  readonly #source: SourceAdapter<M> | undefined;
  readonly #heartbeats: VisibilityHeartbeats<M> | undefined;
  readonly #pipeline: Pipeline;
  /** Spans per delivery (src/core/tracing.ts); undefined: no tracing code runs. */
  readonly #tracer: DeliveryTracer | undefined;
  readonly #onSettled: ((report: SettledReport<M>) => void) | undefined;
  readonly #settledLog: SettledLog;
  #state: ConsumerState = 'idle';
  #receiver: ReceiveLoop<M> | undefined;
  #loop: Promise<void> | undefined;

  constructor(options: ConsumerOptions<M>) {
    const {
      source,
      secrets,
      dedupe,
      deadLetter,
      logger,
      onSettled,
      now,
      tracing,
      traceAttributes,
      ...settings
    } = options;
    const parsed = parseSettings(settings);
    // A source that cannot wait long (a file) caps the retries: see `SourceAdapter.retryBound`.
    this.settings = { ...parsed, retry: boundRetryPolicy(parsed.retry, source?.retryBound) };
    this.logger = logger ?? createLogger();
    this.keyring = secrets instanceof Keyring ? secrets : new Keyring(secrets ?? secretsFromEnv());
    this.dedupeStore = dedupe ?? this.#memoryDedupe();
    this.#storeHealth = new StoreHealth(this.dedupeStore, this.logger);
    this.#deadLetter =
      typeof deadLetter === 'object'
        ? deadLetter
        : createJsonlDeadLetters(deadLetter ?? DEFAULT_DEAD_LETTER_PATH);
    if (this.settings.retentionMs < PUBLISHER_RETRY_WINDOW_MS) {
      this.logger.warn(
        { retention_ms: this.settings.retentionMs },
        'dedupe retention is shorter than the publisher’s 48 h retry window: a late retry may run handlers twice',
      );
    }
    this.#source = source;
    if (source?.heartbeat && source.heartbeatIntervalMs) {
      const beat = source.heartbeat.bind(source);
      this.#heartbeats = new VisibilityHeartbeats(beat, source.heartbeatIntervalMs, this.logger);
    }
    this.#onSettled = onSettled;
    this.#settledLog = new SettledLog(this.logger);
    this.#pipeline = new Pipeline(this.settings, {
      keyring: this.keyring,
      dedupe: this.dedupeStore,
      router: this.#router,
      logger: this.logger,
      ...(now ? { now } : {}),
    });
    this.#tracer = deliveryTracer(tracing, source, traceAttributes);
  }

  /** Registers a handler for a catalog type, a dotted wildcard (`daily.data.*`) or `*`. */
  on<P extends EventPattern>(pattern: P, handler: Handler<EventsFor<P>>): this {
    this.#router.on(pattern, handler);
    return this;
  }

  /** Handles types outside this version's catalog (otherwise acked with a warning, or dead-lettered). */
  onUnknown(handler: Handler<UnknownEvent>): this {
    this.#router.onUnknown(handler);
    return this;
  }

  get status(): ConsumerStatus {
    const receiver = this.#receiver;
    return {
      state: this.#state,
      inFlight: receiver?.inFlight ?? 0,
      inFlightBytes: receiver?.inFlightBytes ?? 0,
      lastReceiveAt: receiver?.lastReceiveAt,
      receivingSince: receiver?.receivingSince,
      lastReceiveError: receiver?.lastReceiveError,
      dedupeAvailable: this.#storeHealth.available,
      keyIds: this.keyring.ids,
    };
  }

  /**
   * Runs one message through the pipeline and, when it is dead, writes its dead-letter record.
   * For consumers with their own receive loop: apply `result.outcome` to your broker yourself.
   * Never throws; if the dead-letter write fails the outcome becomes a retry.
   */
  async process(message: M, signal?: AbortSignal): Promise<ProcessResult> {
    const trace = this.#tracer?.begin(message);
    return this.#final(message, await this.#pipeline.process(message, signal, trace), trace);
  }

  /**
   * A result made final: a dead event's record written (or, when that failed, the outcome made a
   * retry). The delivery span ends with the final outcome.
   */
  async #final(message: M, result: ProcessResult, trace: DeliveryTrace | undefined): Promise<ProcessResult> {
    const final =
      result.outcome.kind === 'dead' ? await this.#deadLettered(message, result, result.outcome) : result;
    trace?.end(final.outcome);
    return final;
  }

  /** Writes the record of a dead result; when that fails, the outcome becomes a retry. */
  async #deadLettered(message: M, result: ProcessResult, dead: DeadOutcome): Promise<ProcessResult> {
    try {
      await this.deadLetter(message, dead, result);
      return result;
    } catch (error) {
      this.logger.error(
        { err: errorMessage(error), message_id: message.id },
        'dead-letter write failed: will retry',
      );
      const failed = { kind: 'dead-letter-failed', dead } as const;
      return { ...result, outcome: decide(failed, message.attempt, this.settings).outcome };
    }
  }

  /**
   * Writes the dead-letter record of `message` to the sink (throws when that fails): for every
   * dead outcome of `process()`, and for a message a serverless wrapper gives up on itself.
   */
  deadLetter(message: M, dead: DeadOutcome, ids: DeadLetterIds = {}): Promise<void> {
    const source = this.#source?.name ?? 'library';
    return this.#deadLetter.write(recordOf(message, dead, ids, source, this.settings));
  }

  /** Starts receiving. Resolves once the loop runs; use `stopped` to wait for the end. */
  async start(): Promise<void> {
    const source = this.#source;
    if (!source) throw new ConfigError('start() needs a source; without one, call process() yourself');
    if (this.#state !== 'idle') throw new ConfigError(`consumer cannot start: it is ${this.#state}`);
    this.#state = 'running';
    this.logger.info(
      { source: source.name, concurrency: this.settings.concurrency, key_ids: this.keyring.ids },
      'consumer started',
    );
    const receiver = new ReceiveLoop({
      source,
      concurrency: this.settings.concurrency,
      maxInFlightBytes: this.settings.maxInFlightBytes,
      logger: this.logger,
      handle: (batch, settled) => this.#handleBatch(source, batch, settled),
    });
    this.#receiver = receiver;
    this.#settledLog.start();
    this.#loop = this.#run(receiver);
  }

  /** Resolves when the consumer has stopped (after `stop()`, or when a finite source ran out). */
  get stopped(): Promise<void> {
    return this.#loop ?? Promise.resolve();
  }

  /**
   * Stops receiving, waits up to `shutdownTimeoutMs` for in-flight handlers, then aborts the
   * rest (their messages are released for redelivery, never acked). Closes source and dedupe.
   */
  async stop(): Promise<void> {
    if (this.#state === 'idle') {
      this.#state = 'stopped';
      await this.#closeAll();
      return;
    }
    if (this.#state === 'running') {
      this.#state = 'stopping';
      this.#receiver?.stop();
    }
    await this.#loop;
  }

  async #run(receiver: ReceiveLoop<M>): Promise<void> {
    await receiver.run();
    if (this.#state === 'running') this.#state = 'stopping';
    await receiver.drain(this.settings.shutdownTimeoutMs, () => {
      this.logger.warn(
        { in_flight: receiver.inFlight },
        'shutdown deadline reached: aborting in-flight handlers',
      );
      this.#pipeline.abortAll();
    });
    this.#state = 'stopped';
    this.#settledLog.stop();
    await this.#closeAll();
    this.logger.info('consumer stopped');
  }

  /**
   * One receive's messages: processed together (each kept invisible meanwhile), then each one
   * settled and reported as soon as its result is final; `settled` is called once per message.
   */
  #handleBatch(source: SourceAdapter<M>, batch: readonly M[], settled: (message: M) => void): void {
    const heartbeats = this.#heartbeats;
    const tracer = this.#tracer;
    const watches = heartbeats ? batch.map((m) => heartbeats.watch(m)) : undefined;
    const traces = tracer ? batch.map((m) => tracer.begin(m)) : undefined;
    const reported = new Uint8Array(batch.length);
    // processBatch reports each message once (BatchInFlight): no second guard here.
    const onResult = (i: number, result: ProcessResult) => {
      reported[i] = 1;
      const watch = watches?.[i];
      this.#settle(source, batch[i] as M, result, traces?.[i], watch, settled);
    };
    this.#pipeline
      .processBatch(
        batch,
        onResult,
        watches?.map((w) => w.signal),
        traces,
      )
      .catch((error) => {
        // processBatch never rejects (a failure of the batch gives each message INTERNAL_ERROR once
        // all its work ended); this is the last net, for a throw while reporting those: the
        // messages not reported are left unsettled (the broker redelivers them) and their slots freed.
        this.logger.error({ err: errorMessage(error) }, 'unexpected exception while processing a batch');
        for (let i = 0; i < batch.length; i++) {
          if (reported[i]) continue;
          const watch = watches?.[i];
          if (watch) heartbeats?.unwatch(watch);
          settled(batch[i] as M);
        }
      });
  }

  /**
   * One message's result: made final, applied to the broker, counted and reported; its slot is
   * freed (`settled`) whatever happens. A result that is not dead is final as it is: it goes to
   * the broker at once, without the async frames a dead-letter write needs (the common case
   * costs one promise, the source's own).
   */
  #settle(
    source: SourceAdapter<M>,
    message: M,
    processed: ProcessResult,
    trace: DeliveryTrace | undefined,
    watch: HeartbeatWatch<M> | undefined,
    settled: (message: M) => void,
  ): void {
    if (processed.outcome.kind === 'dead') {
      this.#final(message, processed, trace).then(
        (result) => this.#apply(source, message, result, watch, settled),
        // #final never rejects; this only keeps a bug of the kit from holding a slot forever
        // (the message, not settled, is redelivered by the broker).
        (error: unknown) => {
          if (watch) this.#heartbeats?.unwatch(watch);
          this.logger.error(
            { message_id: message.id, err: errorMessage(error) },
            'unexpected exception while settling a message',
          );
          settled(message);
        },
      );
      return;
    }
    trace?.end(processed.outcome);
    this.#apply(source, message, processed, watch, settled);
  }

  /** Applies a final result to the broker, then counts and reports it. */
  #apply(
    source: SourceAdapter<M>,
    message: M,
    result: ProcessResult,
    watch: HeartbeatWatch<M> | undefined,
    settled: (message: M) => void,
  ): void {
    if (watch) this.#heartbeats?.unwatch(watch);
    let applying: Promise<void>;
    try {
      // Promise.resolve: a custom source that answers no promise must not hold the slot forever.
      applying = Promise.resolve(source.settle(message, result.outcome));
    } catch (error) {
      applying = Promise.reject(error);
    }
    applying.then(
      () => this.#report(message, result, settled),
      (error: unknown) => {
        // The broker will redeliver (visibility expiry); the dedupe store makes that safe.
        this.logger.error(
          { message_id: message.id, err: errorMessage(error), outcome: result.outcome.kind },
          'settle failed',
        );
        this.#report(message, result, settled);
      },
    );
  }

  /**
   * Counts and reports a settled message, then frees its slot. Nothing thrown here escapes (it
   * would be an unhandled rejection, which ends the process): an `onSettled` that throws is
   * logged.
   */
  #report(message: M, result: ProcessResult, settled: (message: M) => void): void {
    try {
      // A store outage fails every message the same way: said once (StoreHealth), not per message.
      this.#settledLog.note(result, message, this.#storeHealth.note(result));
    } catch (error) {
      this.logger.error(
        { message_id: message.id, err: errorMessage(error) },
        'unexpected exception while counting a settled message (a bug in partner-health-events)',
      );
    }
    const onSettled = this.#onSettled;
    if (onSettled) {
      try {
        onSettled({ ...result, message });
      } catch (error) {
        this.logger.error({ message_id: message.id, err: errorMessage(error) }, 'onSettled threw');
      }
    }
    settled(message);
  }

  #memoryDedupe(): DedupeStore {
    this.logger.warn(
      'no dedupe store given: using memory, so duplicates are caught only until this process exits',
    );
    return createMemoryDedupe();
  }

  async #closeAll(): Promise<void> {
    const closers: Promise<void>[] = [this.dedupeStore.close(), this.#deadLetter.close()];
    if (this.#source) closers.push(this.#source.close());
    const results = await Promise.allSettled(closers);
    for (const r of results) {
      if (r.status === 'rejected') this.logger.warn({ err: errorMessage(r.reason) }, 'close failed');
    }
  }
}

/** The dead-letter record of `message`, dead with `dead`. */
function recordOf(
  message: RawMessage,
  dead: DeadOutcome,
  ids: DeadLetterIds,
  source: string,
  settings: ConsumerSettings,
): DeadLetterRecord {
  const facts = { code: dead.code, reason: dead.reason, eventId: ids.eventId, eventType: ids.eventType };
  const limits = { maxUnverifiedBytes: settings.deadLetterMaxUnverifiedBytes };
  return deadLetterRecord(message, facts, source, new Date(), limits);
}

export function createConsumer<M extends RawMessage = RawMessage>(options: ConsumerOptions<M>): Consumer<M> {
  return new Consumer(options);
}
