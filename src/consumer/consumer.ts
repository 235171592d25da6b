import type { Logger } from 'pino';
import { type BackoffOptions, backoff } from '../core/backoff.js';
import { deadLetterRecord } from '../core/dead-letter-record.js';
import { ConfigError, errorMessage } from '../core/errors.js';
import type { UnknownEvent } from '../core/events/schemas.js';
import { createLogger } from '../core/logger.js';
import { type AbortCause, decide } from '../core/outcome.js';
import { Keyring, type SigningSecret, secretsFromEnv } from '../core/secrets.js';
import type { RawMessage, SourceAdapter } from '../core/source-adapter.js';
import { createMemoryDedupe } from '../dedupe/memory.js';
import { type DedupeStore, PUBLISHER_RETRY_WINDOW_MS } from '../dedupe/types.js';
import { createJsonlDeadLetters, type DeadLetterSink } from './dead-letter-sink.js';
import { Pipeline, type ProcessResult } from './pipeline.js';
import { type EventPattern, type EventsFor, type Handler, Router } from './router.js';
import { type ConsumerSettings, type ConsumerSettingsInput, parseSettings } from './settings.js';

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
  /** Called once per settled message, after the adapter applied the outcome. */
  onSettled?: (report: SettledReport<M>) => void;
  /** Clock in ms, for tests. */
  now?: () => number;
}

export interface SettledReport<M extends RawMessage = RawMessage> extends ProcessResult {
  readonly message: M;
}

export type ConsumerState = 'idle' | 'running' | 'stopping' | 'stopped';

export interface ConsumerStatus {
  readonly state: ConsumerState;
  readonly inFlight: number;
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
/** After a failed receive: 0.5 s, doubling to 30 s (exact: one poller per source, nothing to spread). */
const RECEIVE_BACKOFF: BackoffOptions = { baseMs: 500, maxMs: 30_000, jitter: 'none' };

/**
 * Runs the pipeline over a source: receives while it has free capacity (bounded concurrency),
 * processes each message, writes dead events to the dead-letter sink, then settles. Nothing is
 * acked unless its handlers succeeded or it is a proven duplicate; a dead event is acked only
 * after its dead-letter record is durable.
 */
export class Consumer<M extends RawMessage = RawMessage> {
  readonly settings: ConsumerSettings;
  readonly keyring: Keyring;
  readonly logger: Logger;
  readonly #router = new Router();
  readonly #dedupe: DedupeStore;
  readonly #deadLetter: DeadLetterSink;
  readonly #source: SourceAdapter<M> | undefined;
  readonly #pipeline: Pipeline;
  readonly #onSettled: ((report: SettledReport<M>) => void) | undefined;
  #state: ConsumerState = 'idle';
  #inFlight = 0;
  /** Slots promised to `receive` calls still pending (their `max`). */
  #reserved = 0;
  /** Pollers waiting for a free slot. */
  #slotWaiters: (() => void)[] = [];
  #idle: (() => void) | undefined;
  readonly #receiveAbort = new AbortController();
  #loop: Promise<void> | undefined;
  #lastReceiveAt: number | undefined;
  /** Start times of the pending `receive` calls. */
  readonly #receiving = new Set<{ readonly since: number }>();
  #exhausted = false;
  #lastReceiveError: string | undefined;
  /** Set by a DEDUPE_UNAVAILABLE outcome, cleared by the next message the store answered. */
  #dedupeFailing = false;

  constructor(options: ConsumerOptions<M>) {
    const { source, secrets, dedupe, deadLetter, logger, onSettled, now, ...settings } = options;
    this.settings = parseSettings(settings);
    this.logger = logger ?? createLogger();
    this.keyring = secrets instanceof Keyring ? secrets : new Keyring(secrets ?? secretsFromEnv());
    if (dedupe) {
      this.#dedupe = dedupe;
    } else {
      this.#dedupe = createMemoryDedupe();
      this.logger.warn(
        'no dedupe store given: using memory, so duplicates are caught only until this process exits',
      );
    }
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
    this.#onSettled = onSettled;
    this.#pipeline = new Pipeline(this.settings, {
      keyring: this.keyring,
      dedupe: this.#dedupe,
      router: this.#router,
      logger: this.logger,
      ...(now ? { now } : {}),
    });
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
    return {
      state: this.#state,
      inFlight: this.#inFlight,
      lastReceiveAt: this.#lastReceiveAt,
      receivingSince: this.#oldestReceive(),
      lastReceiveError: this.#lastReceiveError,
      // A store that reports its connection is trusted; otherwise the last outcomes tell.
      dedupeAvailable: this.#dedupe.available ?? !this.#dedupeFailing,
      keyIds: this.keyring.ids,
    };
  }

  /**
   * Runs one message through the pipeline and, when it is dead, writes its dead-letter record.
   * For consumers with their own receive loop: apply `result.outcome` to your broker yourself.
   * Never throws; if the dead-letter write fails the outcome becomes a retry.
   */
  async process(message: M, signal?: AbortSignal): Promise<ProcessResult> {
    const result = await this.#pipeline.process(message, signal);
    if (result.outcome.kind !== 'dead') return result;
    try {
      await this.#deadLetter.write(
        deadLetterRecord(
          message,
          {
            code: result.outcome.code,
            reason: result.outcome.reason,
            eventId: result.eventId,
            eventType: result.eventType,
          },
          this.#source?.name ?? 'library',
          new Date(),
          { maxUnverifiedBytes: this.settings.deadLetterMaxUnverifiedBytes },
        ),
      );
      return result;
    } catch (error) {
      this.logger.error(
        { err: errorMessage(error), message_id: message.id },
        'dead-letter write failed: will retry',
      );
      const facts = { kind: 'dead-letter-failed', dead: result.outcome } as const;
      return { ...result, outcome: decide(facts, message.attempt, this.settings).outcome };
    }
  }

  /** Starts receiving. Resolves once the loop runs; use `stopped` to wait for the end. */
  async start(): Promise<void> {
    if (!this.#source) throw new ConfigError('start() needs a source; without one, call process() yourself');
    if (this.#state !== 'idle') throw new ConfigError(`consumer cannot start: it is ${this.#state}`);
    this.#state = 'running';
    this.logger.info(
      { source: this.#source.name, concurrency: this.settings.concurrency, key_ids: this.keyring.ids },
      'consumer started',
    );
    this.#loop = this.#receiveLoop(this.#source);
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
      this.#receiveAbort.abort();
      this.#wakePollers(); // they may be waiting for a free slot
    }
    await this.#loop;
  }

  async #receiveLoop(source: SourceAdapter<M>): Promise<void> {
    // Several receives at once only when one batch cannot fill the free slots, and the source
    // allows it (an SQS round trip); one poller otherwise.
    const pollers = Math.max(
      1,
      Math.min(source.maxConcurrentReceives ?? 1, Math.ceil(this.settings.concurrency / source.maxBatchSize)),
    );
    await Promise.all(Array.from({ length: pollers }, () => this.#poll(source)));
    if (this.#state === 'running') this.#state = 'stopping';
    await this.#drain();
    this.#state = 'stopped';
    await this.#closeAll();
    this.logger.info('consumer stopped');
  }

  /** One poller: receives into the free slots (minus those promised to other pending receives). */
  async #poll(source: SourceAdapter<M>): Promise<void> {
    const { concurrency } = this.settings;
    let failures = 0;
    while (this.#state === 'running' && !this.#exhausted) {
      const free = concurrency - this.#inFlight - this.#reserved;
      if (free <= 0) {
        await new Promise<void>((resolve) => this.#slotWaiters.push(resolve));
        continue;
      }
      const max = Math.min(free, source.maxBatchSize);
      const pending = { since: Date.now() };
      this.#reserved += max;
      this.#receiving.add(pending);
      let batch: readonly M[] | null = [];
      let failure: { readonly error: unknown } | undefined;
      try {
        batch = await source.receive(max, this.#receiveAbort.signal);
      } catch (error) {
        failure = { error };
      }
      this.#reserved -= max;
      this.#receiving.delete(pending);
      // Slots promised to this receive and left unused are free for the other pollers. (They run
      // after this synchronous stretch, so they see the messages dispatched below.)
      if (batch === null || batch.length < max) this.#wakePollers();
      if (failure) {
        if (this.#receiveAbort.signal.aborted) break;
        failures++;
        this.#lastReceiveError = errorMessage(failure.error);
        const delay = backoff(failures, RECEIVE_BACKOFF);
        this.logger.error(
          { source: source.name, err: this.#lastReceiveError, retry_in_ms: delay },
          'receive failed',
        );
        await sleep(delay, this.#receiveAbort.signal);
        continue;
      }
      this.#lastReceiveAt = Date.now();
      this.#lastReceiveError = undefined;
      failures = 0;
      if (batch === null) {
        this.logger.info({ source: source.name }, 'source exhausted');
        this.#exhausted = true;
        break;
      }
      for (const message of batch) this.#dispatch(source, message);
    }
  }

  #wakePollers(): void {
    if (this.#slotWaiters.length === 0) return;
    const waiters = this.#slotWaiters;
    this.#slotWaiters = [];
    for (const wake of waiters) wake();
  }

  #oldestReceive(): number | undefined {
    let oldest: number | undefined;
    for (const { since } of this.#receiving) if (oldest === undefined || since < oldest) oldest = since;
    return oldest;
  }

  #dispatch(source: SourceAdapter<M>, message: M): void {
    this.#inFlight++;
    void this.#handle(source, message).finally(() => {
      this.#inFlight--;
      this.#wakePollers();
      if (this.#inFlight === 0) this.#idle?.();
    });
  }

  async #handle(source: SourceAdapter<M>, message: M): Promise<void> {
    let result: ProcessResult;
    if (source.heartbeat && source.heartbeatIntervalMs) {
      // Keep the message invisible while its handlers run; if that fails, abort them. Each beat
      // is scheduled after the previous one finished, so beats never overlap (receipts rotate).
      const lost = new AbortController();
      const heartbeat = source.heartbeat.bind(source);
      const interval = source.heartbeatIntervalMs;
      let timer: NodeJS.Timeout | undefined;
      let running = true;
      const beat = () => {
        heartbeat(message).then(
          () => {
            if (running) timer = setTimeout(beat, interval);
          },
          (error: unknown) => {
            if (!running) return;
            this.logger.warn(
              { message_id: message.id, err: errorMessage(error) },
              'visibility heartbeat failed: aborting handler',
            );
            lost.abort('visibility-lost' satisfies AbortCause);
          },
        );
      };
      timer = setTimeout(beat, interval);
      try {
        result = await this.process(message, lost.signal);
      } finally {
        running = false;
        clearTimeout(timer);
      }
    } else {
      result = await this.process(message);
    }
    const { outcome } = result;
    try {
      await source.settle(message, outcome);
    } catch (error) {
      // The broker will redeliver (visibility expiry); the dedupe store makes that safe.
      this.logger.error(
        { message_id: message.id, err: errorMessage(error), outcome: outcome.kind },
        'settle failed',
      );
    }
    this.#log(result, message);
    this.#onSettled?.({ ...result, message });
  }

  #log(result: ProcessResult, message: M): void {
    const { outcome } = result;
    // A store outage fails every message the same way: say so once, not once per message.
    const storeDown = this.#trackStore(result);
    if (storeDown && !this.logger.isLevelEnabled('debug')) return;
    const level = outcome.kind === 'ack' ? 'info' : outcome.kind === 'retry' ? 'warn' : 'error';
    if (!this.logger.isLevelEnabled(level)) return; // build nothing for a quiet logger
    const fields = {
      event_id: result.eventId,
      event_type: result.eventType,
      key_id: result.keyId,
      message_id: message.id,
      attempt: result.attempt,
      latency_ms: Math.round(result.durationMs * 100) / 100,
    };
    if (outcome.kind === 'ack') {
      this.logger.info({ ...fields, outcome: outcome.result }, 'event acked');
    } else if (outcome.kind === 'retry') {
      const { code, reason, delayMs } = outcome;
      this.logger.warn(
        { ...fields, outcome: 'retry', code, reason, delay_ms: delayMs },
        'event will be retried',
      );
    } else {
      this.logger.error(
        { ...fields, outcome: 'dead', code: outcome.code, reason: outcome.reason },
        'event dead-lettered',
      );
    }
  }

  /** Notes whether the dedupe store answered for this message; logs outage start and end once. */
  #trackStore(result: ProcessResult): boolean {
    const down = result.store === 'unavailable';
    const answered = result.store === 'answered';
    if (down && !this.#dedupeFailing) {
      this.#dedupeFailing = true;
      this.logger.error(
        { reason: result.outcome.kind === 'ack' ? undefined : result.outcome.reason },
        'dedupe store unavailable: events are not acked; they are retried until it answers',
      );
    } else if (!down && answered && this.#dedupeFailing) {
      this.#dedupeFailing = false;
      this.logger.warn('dedupe store answering again');
    }
    return down;
  }

  async #drain(): Promise<void> {
    if (this.#inFlight === 0) return;
    const idle = new Promise<void>((resolve) => {
      this.#idle = resolve;
    });
    const deadline = setTimeout(() => {
      this.logger.warn(
        { in_flight: this.#inFlight },
        'shutdown deadline reached: aborting in-flight handlers',
      );
      this.#pipeline.abortAll();
    }, this.settings.shutdownTimeoutMs);
    await idle;
    clearTimeout(deadline);
  }

  async #closeAll(): Promise<void> {
    const closers: Promise<void>[] = [this.#dedupe.close(), this.#deadLetter.close()];
    if (this.#source) closers.push(this.#source.close());
    const results = await Promise.allSettled(closers);
    for (const r of results) {
      if (r.status === 'rejected') this.logger.warn({ err: errorMessage(r.reason) }, 'close failed');
    }
  }
}

export function createConsumer<M extends RawMessage = RawMessage>(options: ConsumerOptions<M>): Consumer<M> {
  return new Consumer(options);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
