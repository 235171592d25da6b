import type { SettledReport } from '../../consumer/consumer.js';
import { REJECTION_CODES } from '../../core/errors.js';

/** The outcomes the console charts, one line each. */
export const CHART_OUTCOMES = ['handled', 'duplicate', 'retried', 'dead'] as const;
export type ChartOutcome = (typeof CHART_OUTCOMES)[number];

/** One second of the window. */
interface Bucket {
  second: number;
  counts: Record<ChartOutcome | 'ignored', number>;
  /** Rejections (verification or validation failures) by code. */
  rejected: Map<string, number>;
  /** Verified deliveries by the id of the secret that matched. */
  keyIds: Map<string, number>;
}

export interface LiveSnapshot {
  readonly windowSeconds: number;
  /** Unix second of the last bucket (now). */
  readonly now: number;
  /** Per outcome, one count per second, oldest first (`windowSeconds` values). */
  readonly series: Readonly<Record<ChartOutcome, readonly number[]>>;
  readonly totals: Readonly<Record<ChartOutcome | 'ignored', number>>;
  readonly rejectedByCode: Readonly<Record<string, number>>;
  readonly verifiedByKeyId: Readonly<Record<string, number>>;
  /** Id of the secret that verified the latest verified delivery. */
  readonly lastKeyId: string | undefined;
  /** now − signed_at of the latest first delivery, in seconds (queue lag; negative = clock skew). */
  readonly lastEventAgeSeconds: number | undefined;
  readonly handlerLatencyMs: { readonly p50: number | undefined; readonly p95: number | undefined };
}

const LATENCY_SAMPLES = 1024;

/**
 * The console's numbers, in memory: a ring of one-second buckets over the last 15 minutes (no
 * Prometheus needed), fed by the consumer's `onSettled` reports. Memory is bounded: the window's
 * buckets, the codes and key ids (fixed, configured sets) and the last 1,024 handler latencies.
 */
export class LiveStats {
  readonly windowSeconds: number;
  readonly #buckets: Bucket[];
  readonly #latencies = new Float64Array(LATENCY_SAMPLES);
  #latencyCount = 0;
  #lastKeyId: string | undefined;
  #lastAge: number | undefined;
  readonly #now: () => number;

  constructor(options: { windowSeconds?: number; now?: () => number } = {}) {
    this.windowSeconds = options.windowSeconds ?? 15 * 60;
    this.#now = options.now ?? Date.now;
    this.#buckets = Array.from({ length: this.windowSeconds }, () => emptyBucket(-1));
  }

  observe(report: SettledReport): void {
    const nowMs = this.#now();
    const bucket = this.#bucket(Math.floor(nowMs / 1000));
    const { outcome } = report;
    if (report.keyId !== undefined) {
      this.#lastKeyId = report.keyId;
      bucket.keyIds.set(report.keyId, (bucket.keyIds.get(report.keyId) ?? 0) + 1);
    }
    if (report.signedAt !== undefined && report.attempt === 1) this.#lastAge = nowMs / 1000 - report.signedAt;
    if (report.handlerDurationMs !== undefined) {
      this.#latencies[this.#latencyCount % LATENCY_SAMPLES] = report.handlerDurationMs;
      this.#latencyCount++;
    }
    if (outcome.kind === 'ack') {
      const kind =
        outcome.result === 'handled' ? 'handled' : outcome.result === 'duplicate' ? 'duplicate' : 'ignored';
      bucket.counts[kind]++;
      return;
    }
    bucket.counts[outcome.kind === 'retry' ? 'retried' : 'dead']++;
    // A rejection is about the message (it failed verification, or its body is invalid): the
    // same codes as the metrics' rejected_total.
    if (REJECTION_CODES.has(outcome.code)) {
      bucket.rejected.set(outcome.code, (bucket.rejected.get(outcome.code) ?? 0) + 1);
    }
  }

  snapshot(): LiveSnapshot {
    const now = Math.floor(this.#now() / 1000);
    const first = now - this.windowSeconds + 1;
    const series = Object.fromEntries(
      CHART_OUTCOMES.map((o) => [o, new Array<number>(this.windowSeconds).fill(0)]),
    );
    const totals = { handled: 0, duplicate: 0, retried: 0, dead: 0, ignored: 0 };
    const rejected: Record<string, number> = {};
    const keyIds: Record<string, number> = {};
    for (const bucket of this.#buckets) {
      if (bucket.second < first || bucket.second > now) continue;
      for (const outcome of CHART_OUTCOMES)
        (series[outcome] as number[])[bucket.second - first] = bucket.counts[outcome];
      for (const key of Object.keys(totals) as (keyof typeof totals)[]) totals[key] += bucket.counts[key];
      for (const [code, n] of bucket.rejected) rejected[code] = (rejected[code] ?? 0) + n;
      for (const [id, n] of bucket.keyIds) keyIds[id] = (keyIds[id] ?? 0) + n;
    }
    return {
      windowSeconds: this.windowSeconds,
      now,
      series: series as Record<ChartOutcome, number[]>,
      totals,
      rejectedByCode: rejected,
      verifiedByKeyId: keyIds,
      lastKeyId: this.#lastKeyId,
      lastEventAgeSeconds: this.#lastAge,
      handlerLatencyMs: this.#percentiles(),
    };
  }

  #bucket(second: number): Bucket {
    const index = second % this.windowSeconds;
    let bucket = this.#buckets[index] as Bucket;
    if (bucket.second !== second) {
      bucket = emptyBucket(second);
      this.#buckets[index] = bucket;
    }
    return bucket;
  }

  #percentiles(): { p50: number | undefined; p95: number | undefined } {
    const n = Math.min(this.#latencyCount, LATENCY_SAMPLES);
    if (n === 0) return { p50: undefined, p95: undefined };
    const sorted = this.#latencies.slice(0, n).sort();
    const at = (q: number) => sorted[Math.min(n - 1, Math.floor(q * n))] as number;
    return { p50: at(0.5), p95: at(0.95) };
  }
}

function emptyBucket(second: number): Bucket {
  return {
    second,
    counts: { handled: 0, duplicate: 0, retried: 0, dead: 0, ignored: 0 },
    rejected: new Map(),
    keyIds: new Map(),
  };
}
