import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { SettledReport } from '../consumer/consumer.js';
import { ERROR_CODES, type ErrorCode, REJECTION_CODES } from '../core/errors.js';
import type { RawMessage } from '../core/source-adapter.js';
import type { DedupeStore } from '../dedupe/types.js';

/** What the state gauges read when scraped. */
export interface ConsumerMetricsOptions {
  readonly registry?: Registry;
  readonly inFlight?: () => number;
  /** Size of the messages in flight (the consumer's `status.inFlightBytes`). */
  readonly inFlightBytes?: () => number;
  readonly ready?: () => boolean;
  /** Whether the dedupe store answers (the consumer's `status.dedupeAvailable`). */
  readonly dedupeAvailable?: () => boolean;
}

/** Raised at start-up or by an adapter's own calls: never the outcome of a delivery. */
const NEVER_AN_OUTCOME: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'CONFIG_INVALID',
  'SECRET_INVALID',
  'ADAPTER_ERROR',
]);
/** Codes a delivery is retried with: any outcome's (a dead one too, when its record cannot be written). */
const RETRY_CODES = ERROR_CODES.filter((code) => !NEVER_AN_OUTCOME.has(code));
/** Codes a delivery is dead-lettered with: not IN_PROGRESS and SHUTDOWN, which are only ever retried. */
const DEAD_LETTER_CODES = RETRY_CODES.filter((code) => code !== 'IN_PROGRESS' && code !== 'SHUTDOWN');

/**
 * Prometheus metrics of a consumer, fed by its `onSettled` reports. Label values are bounded:
 * error codes are a fixed set, event types are the signed ones, key ids are the configured ones.
 */
export class ConsumerMetrics {
  readonly registry: Registry;
  readonly #received: Counter;
  readonly #verified: Counter<'key_id'>;
  readonly #rejected: Counter<'code'>;
  readonly #duplicates: Counter;
  readonly #handled: Counter<'event_type'>;
  readonly #ignored: Counter;
  readonly #retried: Counter<'code'>;
  readonly #dead: Counter<'code'>;
  readonly #latency: Histogram<'outcome'>;
  readonly #handlerLatency: Histogram<'outcome'>;
  readonly #age: Histogram;
  readonly #abandoned: Counter;

  constructor(options: ConsumerMetricsOptions = {}) {
    this.registry = options.registry ?? new Registry();
    const registers = [this.registry];
    const counter = <L extends string>(name: string, help: string, labelNames: L[] = []) =>
      new Counter<L>({ name: `partner_events_${name}`, help, labelNames, registers });
    this.#received = counter(
      'received_total',
      'Deliveries settled (each delivery of a message counts once).',
    );
    this.#verified = counter(
      'verified_total',
      'Deliveries whose signature verified, by the matching secret id.',
      ['key_id'],
    );
    this.#rejected = counter(
      'rejected_total',
      'Deliveries that failed verification or validation, by code.',
      ['code'],
    );
    this.#duplicates = counter('duplicates_total', 'Deliveries acked as duplicates of a handled event.');
    this.#handled = counter('handled_total', 'Events whose handlers succeeded.', ['event_type']);
    this.#ignored = counter('ignored_total', 'Events acked without a handler (no route, or unknown type).');
    this.#retried = counter('retried_total', 'Deliveries given back for a retry, by code.', ['code']);
    this.#dead = counter('dead_lettered_total', 'Deliveries written to the dead letters, by code.', ['code']);
    this.#abandoned = counter(
      'abandoned_claims_total',
      'Claims found abandoned: an earlier handling of the event ended without an outcome (its worker died or hung).',
    );
    const histogram = <L extends string>(
      name: string,
      help: string,
      buckets: number[],
      labelNames: L[] = [],
    ) => new Histogram<L>({ name: `partner_events_${name}`, help, labelNames, buckets, registers });
    this.#latency = histogram(
      'processing_seconds',
      'Time from receipt to outcome (verification, dedupe, handlers), by outcome.',
      [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      ['outcome'],
    );
    this.#handlerLatency = histogram(
      'handler_seconds',
      'Time spent in the handlers (or forwarding to the app), by outcome: ok or failed.',
      [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      ['outcome'],
    );
    this.#age = histogram(
      'event_age_seconds',
      'Age of verified events at receipt (now − signed_at): queue lag, or clock skew when negative.',
      // 240 is PartnerEventsEventAgeHigh's threshold: a quantile interpolated across 60..300
      // read any age in it (100 s old events too) as about 290 s.
      [-60, -5, 0, 1, 5, 15, 60, 120, 240, 300, 900, 3600, 21_600, 86_400],
    );
    registerStateGauges(registers, options);
    this.#startAtZero();
  }

  /**
   * Every series whose label values are a fixed set, at 0 from the start. A series that first
   * appears at 1 hides that increment from rate() and increase(), which need two samples: the
   * dashboard then showed nothing for a code's first dead letter, and the alerts missed it.
   */
  #startAtZero(): void {
    for (const code of REJECTION_CODES) this.#rejected.inc({ code }, 0);
    for (const code of RETRY_CODES) this.#retried.inc({ code }, 0);
    for (const code of DEAD_LETTER_CODES) this.#dead.inc({ code }, 0);
    for (const outcome of ['ack', 'retry', 'dead']) this.#latency.zero({ outcome });
    for (const outcome of ['ok', 'failed']) this.#handlerLatency.zero({ outcome });
  }

  /**
   * The store, counting in `abandoned_claims_total` each claim that reports earlier abandoned
   * ones. Claims are where a store learns of them; the consumer's reports do not carry them.
   */
  countAbandonedClaims(store: DedupeStore): DedupeStore {
    const abandoned = this.#abandoned;
    // Delegation, not a prototype: stores keep their state in private fields.
    const counted: DedupeStore = {
      async claim(eventId, leaseMs) {
        const result = await store.claim(eventId, leaseMs);
        if (result.status === 'claimed' && (result.abandoned ?? 0) > 0) abandoned.inc();
        return result;
      },
      extend: (eventId, token, leaseMs) => store.extend(eventId, token, leaseMs),
      complete: (eventId, token, retentionMs) => store.complete(eventId, token, retentionMs),
      release: (eventId, token) => store.release(eventId, token),
      peek: (eventId) => store.peek(eventId),
      close: () => store.close(),
    };
    const { forget } = store;
    if (forget) counted.forget = (eventId) => forget.call(store, eventId);
    // Only a store that reports its connection does; the consumer tracks the others itself.
    if ('available' in store) Object.defineProperty(counted, 'available', { get: () => store.available });
    return counted;
  }

  /** Pass as (or call from) the consumer's `onSettled`. */
  observe(report: SettledReport<RawMessage>, nowMs: number = Date.now()): void {
    const { outcome } = report;
    this.#received.inc();
    if (report.keyId !== undefined) this.#verified.inc({ key_id: report.keyId });
    if (report.signedAt !== undefined && report.attempt === 1)
      this.#age.observe(nowMs / 1000 - report.signedAt);
    this.#latency.observe({ outcome: outcome.kind }, report.durationMs / 1000);
    if (report.handlerDurationMs !== undefined) {
      const ok = outcome.kind === 'ack' && outcome.result === 'handled';
      this.#handlerLatency.observe({ outcome: ok ? 'ok' : 'failed' }, report.handlerDurationMs / 1000);
    }
    if (outcome.kind === 'ack') {
      if (outcome.result === 'handled') this.#handled.inc({ event_type: report.eventType ?? 'unknown' });
      else if (outcome.result === 'duplicate') this.#duplicates.inc();
      else this.#ignored.inc();
      return;
    }
    // Rejected: the message itself is bad; not when verification itself broke (INTERNAL_ERROR,
    // a bug in the kit).
    if (REJECTION_CODES.has(outcome.code)) this.#rejected.inc({ code: outcome.code });
    if (outcome.kind === 'retry') this.#retried.inc({ code: outcome.code });
    else this.#dead.inc({ code: outcome.code });
  }
}

/**
 * prom-client's gauges whose names end in `_total`: each is the total of its namesake without the
 * suffix, which has the same by type. Prometheus keeps `_total` for counters, and `promtool check
 * metrics` rejects them.
 */
const MISNAMED_DEFAULT_METRICS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

/**
 * The process's own metrics on `registry` (prom-client's defaults): CPU, memory, heap, garbage
 * collections, event-loop delay, open files. `run` exports them beside the consumer's, so that
 * what the worker costs, and whether the garbage collector or a blocked event loop limits it,
 * shows on the same scrape (docs/observability.md). Library users call prom-client's
 * `collectDefaultMetrics()` on their own registry, if they want them.
 */
export function collectProcessMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry });
  for (const name of MISNAMED_DEFAULT_METRICS) registry.removeSingleMetric(name);
}

/**
 * Gauges read when scraped: when counting started, messages in flight and their size, whether /readyz would
 * answer 200, the store's state.
 */
function registerStateGauges(
  registers: Registry[],
  { inFlight, inFlightBytes, ready, dedupeAvailable }: ConsumerMetricsOptions,
): void {
  // Ours, not process_start_time_seconds: a partner's collectDefaultMetrics() registers that name,
  // and prom-client throws on a second one in a registry (or in Registry.merge). It is also the
  // fact PartnerEventsDeadLettered needs: when these counters started, not when the process did.
  const startedAt = Date.now() / 1000;
  new Gauge({
    name: 'partner_events_start_time_seconds',
    help: 'When these counters started (Unix time, seconds): tells a new worker from a gap in scrapes.',
    registers,
    collect() {
      this.set(startedAt); // set at each scrape, so that registry.resetMetrics() cannot zero it
    },
  });
  new Gauge({
    name: 'partner_events_in_flight',
    help: 'Messages being processed now.',
    registers,
    collect() {
      this.set(inFlight?.() ?? 0);
    },
  });
  new Gauge({
    name: 'partner_events_in_flight_bytes',
    help: 'Size of the messages being processed now (bytes; characters of text bodies), bounded by maxInFlightBytes.',
    registers,
    collect() {
      this.set(inFlightBytes?.() ?? 0);
    },
  });
  new Gauge({
    name: 'partner_events_ready',
    help: '1 when /readyz would answer 200.',
    registers,
    collect() {
      this.set(ready?.() ? 1 : 0);
    },
  });
  new Gauge({
    name: 'partner_events_dedupe_available',
    help: '1 while the dedupe store answers; 0 during an outage (nothing is acked then).',
    registers,
    collect() {
      this.set((dedupeAvailable?.() ?? true) ? 1 : 0);
    },
  });
}
