import type { Logger } from 'pino';
import type { RawMessage } from '../core/source-adapter.js';
import type { ProcessResult } from './pipeline.js';

/** How often the `events settled` summary is written while events settle. */
export const SETTLED_SUMMARY_INTERVAL_MS = 60_000;

interface Tally {
  handled: number;
  duplicate: number;
  ignored: number;
  retried: number;
  dead_lettered: number;
  /** Verified events per signing key id (to follow a key rotation); a Map, whatever the ids. */
  keyIds: Map<string, number>;
}

function emptyTally(): Tally {
  return { handled: 0, duplicate: 0, ignored: 0, retried: 0, dead_lettered: 0, keyIds: new Map() };
}

/**
 * The log of settled messages. An acked event is the common case and is counted, not written:
 * one `event acked` line per event at debug, and an `events settled` summary at info every minute
 * (and at stop) with the counts by outcome and by key id. A line per event at info cost about a
 * fifth of a forwarding sidecar's CPU and fills log pipelines with what the metrics already
 * count. A retry (warn) or a dead event (error) is written one line per event: each needs an
 * operator's eye.
 */
export class SettledLog {
  readonly #logger: Logger;
  #tally = emptyTally();
  #since = Date.now();
  #timer: NodeJS.Timeout | undefined;

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  /** Writes the summary every `intervalMs` until `stop()`. */
  start(intervalMs = SETTLED_SUMMARY_INTERVAL_MS): void {
    this.#since = Date.now();
    this.#timer ??= setInterval(() => this.summarize(), intervalMs);
    this.#timer.unref();
  }

  /** Stops the timer and writes what was counted since the last summary. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.summarize();
  }

  /** Counts one settled message; `quiet` (a store outage, said once elsewhere) writes no line. */
  note(result: ProcessResult, message: RawMessage, quiet: boolean): void {
    const { outcome, keyId } = result;
    const tally = this.#tally;
    if (keyId !== undefined) tally.keyIds.set(keyId, (tally.keyIds.get(keyId) ?? 0) + 1);
    if (outcome.kind === 'ack') {
      tally[outcome.result]++;
      if (this.#logger.isLevelEnabled('debug')) logSettled(this.#logger, result, message);
      return;
    }
    if (outcome.kind === 'retry') tally.retried++;
    else tally.dead_lettered++;
    if (!quiet || this.#logger.isLevelEnabled('debug')) logSettled(this.#logger, result, message);
  }

  /** Writes the counts since the last summary at info, when something settled. */
  summarize(): void {
    const tally = this.#tally;
    const now = Date.now();
    const settled = tally.handled + tally.duplicate + tally.ignored + tally.retried + tally.dead_lettered;
    if (settled === 0) return;
    this.#tally = emptyTally();
    const seconds = Math.round((now - this.#since) / 100) / 10;
    this.#since = now;
    const { keyIds, ...counts } = tally;
    this.#logger.info({ ...counts, key_ids: Object.fromEntries(keyIds), settled, seconds }, 'events settled');
  }
}

/** One line for one settled message: debug for an ack, warn for a retry, error for a dead event. */
function logSettled(logger: Logger, result: ProcessResult, message: RawMessage): void {
  const { outcome } = result;
  const fields = {
    event_id: result.eventId,
    event_type: result.eventType,
    key_id: result.keyId,
    message_id: message.id,
    attempt: result.attempt,
    latency_ms: Math.round(result.durationMs * 100) / 100,
  };
  if (outcome.kind === 'ack') {
    logger.debug({ ...fields, outcome: outcome.result }, 'event acked');
  } else if (outcome.kind === 'retry') {
    const { code, reason, delayMs } = outcome;
    logger.warn({ ...fields, outcome: 'retry', code, reason, delay_ms: delayMs }, 'event will be retried');
  } else {
    const { code, reason } = outcome;
    logger.error({ ...fields, outcome: 'dead', code, reason }, 'event dead-lettered');
  }
}
