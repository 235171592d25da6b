/**
 * Overload suite: a backlog sits in SQS (fauxqs, in this process) when the worker starts — a
 * worker that was down for ten minutes. The worker is a separate process (so its memory figures
 * are its own) whose clock is 10 minutes ahead of the enqueue times, with SQLite dedupe.
 *
 *   - nothing is rejected as stale: age is measured from the broker's SentTimestamp, which the
 *     backlog does not change (a control run with --strict-age semantics rejects the same events,
 *     proving the clock was really moved);
 *   - memory stays bounded by what the kit holds (see `memoryBounds`): what the worker still holds
 *     after a full GC may not grow between 10 % of the backlog and its end (a leak of 1 KiB per
 *     event fails it), and its peak RSS stays within a baseline it measured on the Node that runs
 *     it, plus what it may hold in flight and the garbage collector's working room;
 *   - throughput is steady: handled events per interval, from the worker's own stats.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createSqsAdapter, type SqsMessage } from '../../adapters/sqs/index.js';
import { createConsumer, type SettledReport } from '../../src/consumer/consumer.js';
import { silentLogger } from '../../src/core/logger.js';
import { createMemoryDedupe } from '../../src/dedupe/memory.js';
import { createQueue } from '../support/fauxqs.js';
import { fauxqsPerFile } from './support/fauxqs-per-file.js';
import { HandledLog, tail, WorkerProcess } from './support/processes.js';
import { FULL, percentile, report, round, SIZES, seedFor, timeout } from './support/profile.js';
import { envelopeFor, eventIds, sendToSqs, sqsEmpty, until } from './support/queues.js';
import { SecretScan, suiteSecret } from './support/secrets.js';

const TEN_MINUTES = 10 * 60_000;
const CONCURRENCY = 32;
const STATS_INTERVAL_MS = FULL ? 1000 : 250;

const sqs = fauxqsPerFile('phe-overload-');

/**
 * Memory bounds from what the kit holds, on top of a baseline the worker measures on the Node
 * that runs it (its memory before the first receive), rather than constants tuned on one runtime.
 *
 * - Live memory (heap and Buffers after full GCs) between 10 % of the backlog and its end may grow
 *   by at most what can be in flight (the consumer receives only into free capacity: at most
 *   `CONCURRENCY` messages, each held as a few copies of its envelope: raw text, parsed envelope,
 *   body, event, the SDK's message) plus `CODE_ROOM`. A leak of 1 KiB per event grows it by
 *   1 KiB × the events handled in between, which the test checks is more than the bound.
 * - Peak RSS may exceed the baseline RSS by what is in flight, SQLite's page cache (the store
 *   sets 32,000 KiB) and V8's room: after a full GC, V8 lets its heap grow to at most
 *   `V8_MAX_HEAP_GROWING_FACTOR` × what survived before it collects again, so room for that
 *   factor × the running worker's live memory (measured at 10 %).
 */
const ENVELOPE_COPIES_HELD = 16;
/** Code V8 compiles and optimises as the run goes on, and caches that fill once: measured < 1.2 MiB. */
const CODE_ROOM = 2 * 2 ** 20;
/** src/dedupe/sqlite.ts: `cache_size = -32000` (KiB). */
const SQLITE_PAGE_CACHE = 32_000 * 1024;
/** V8's heap controller grows the old generation limit by at most this factor of the live size. */
const V8_MAX_HEAP_GROWING_FACTOR = 4;
const LEAK_PER_EVENT_THAT_MUST_FAIL = 1024;

function memoryBounds(o: { baseline: Stat; runningLive: number; envelopeBytes: number }) {
  const inFlight = CONCURRENCY * ENVELOPE_COPIES_HELD * o.envelopeBytes;
  return {
    liveGrowth: inFlight + CODE_ROOM,
    peakRss: o.baseline.rss + inFlight + SQLITE_PAGE_CACHE + V8_MAX_HEAP_GROWING_FACTOR * o.runningLive,
  };
}

interface Stat {
  readonly t: number;
  readonly handled: number;
  readonly rss: number;
  readonly heap: number;
  readonly in_flight: number;
  readonly max_rss?: number;
  readonly final?: number;
  /** Lines written after a full GC (the worker runs with --expose-gc): before the start, and on SIGUSR2. */
  readonly mark?: 'baseline' | 'live';
  readonly live_heap?: number;
  readonly live_external?: number;
}

const live = (s: Stat) => (s.live_heap ?? 0) + (s.live_external ?? 0);

function readStats(path: string): Stat[] {
  try {
    return readFileSync(path, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Stat);
  } catch {
    return [];
  }
}

describe('overload: a backlog ten minutes old', () => {
  const { events } = SIZES.overload;

  it(
    `${events} backlogged SQS events through one worker: none stale, memory bounded, throughput steady`,
    async () => {
      const secret = suiteSecret('overload');
      const queue = await createQueue(sqs.client, 'overload');
      const ids = eventIds('evt-overload', events);
      const filled = Date.now();
      // Built and sent in slices, so the test process never holds the whole backlog twice.
      for (let i = 0; i < ids.length; i += 5000) {
        await sendToSqs(
          sqs.client,
          queue.url,
          ids.slice(i, i + 5000).map((id) => envelopeFor(id, secret)),
        );
      }
      const fillMs = Date.now() - filled;

      const paths = {
        handled: join(sqs.dir, 'handled.log'),
        stats: join(sqs.dir, 'stats.jsonl'),
        log: join(sqs.dir, 'worker.log'),
        deadLetters: join(sqs.dir, 'dead.jsonl'),
      };
      const worker = await WorkerProcess.start(
        {
          source: { kind: 'sqs', queueUrl: queue.url, endpoint: sqs.endpoint, visibilitySeconds: 30 },
          dedupe: `sqlite:${join(sqs.dir, 'dedupe.db')}`,
          handledPath: paths.handled,
          deadLetterPath: paths.deadLetters,
          concurrency: CONCURRENCY,
          leaseMs: 60_000,
          handlerDelayMs: [0, 0],
          clockOffsetMs: TEN_MINUTES,
          retry: { maxAttempts: 10, baseDelayMs: 100, maxDelayMs: 1000 },
          statsPath: paths.stats,
          statsIntervalMs: STATS_INTERVAL_MS,
          seed: seedFor('overload'),
        },
        { secret, logPath: paths.log, env: { LOG_LEVEL: 'warn' }, nodeArgs: ['--expose-gc'] },
      );
      const log = new HandledLog(paths.handled);
      /** Asks the worker for a `live` line (a full GC, then its memory) and waits for it. */
      const sampleLive = async () => {
        const before = readStats(paths.stats).filter((s) => s.mark === 'live').length;
        worker.child.kill('SIGUSR2');
        await until(() => readStats(paths.stats).filter((s) => s.mark === 'live').length > before, {
          timeoutMs: 30_000,
          intervalMs: 50,
          describe: () => tail(paths.log),
        });
      };
      try {
        const progress = { timeoutMs: timeout(60_000, 480_000), intervalMs: 100 };
        await until(() => log.refresh().unique >= events * 0.1, {
          ...progress,
          describe: () => `${log.unique} of ${events} handled\n${tail(paths.log)}`,
        });
        await sampleLive();
        await until(() => log.refresh().unique >= events, {
          ...progress,
          describe: () => `${log.unique} of ${events} handled\n${tail(paths.log)}`,
        });
        await until(() => sqsEmpty(sqs.client, queue.url), { timeoutMs: 30_000, intervalMs: 100 });
        await sampleLive();
        const exit = await worker.stop();
        expect(exit.code, tail(paths.log)).toBe(0);
      } finally {
        await worker.kill();
      }

      const stats = readStats(paths.stats);
      const final = stats.find((s) => s.final === 1);
      const samples = stats.filter((s) => s.final !== 1 && s.mark === undefined);
      const baseline = stats.find((s) => s.mark === 'baseline');
      const [liveAt10, liveAtEnd] = stats.filter((s) => s.mark === 'live');
      if (!baseline || !liveAt10 || !liveAtEnd)
        throw new Error(`no baseline or live samples in ${paths.stats}`);
      // Per-interval rates between the first sample with progress and the last before the end.
      const rates: number[] = [];
      const gcPausesEnded = stats.filter((s) => s.mark === 'live').map((s) => s.t);
      for (let i = 1; i < samples.length; i++) {
        const a = samples[i - 1] as Stat;
        const b = samples[i] as Stat;
        if (a.handled === 0 || b.handled >= events) continue; // start-up and the tail are partial
        if (gcPausesEnded.some((t) => a.t < t && t <= b.t)) continue; // our full GCs, not the kit
        rates.push(((b.handled - a.handled) * 1000) / (b.t - a.t));
      }
      const at10 = samples.find((s) => s.handled >= events * 0.1);
      const peakRss = final?.max_rss ?? Math.max(...samples.map((s) => s.rss));
      const maxSampledRss = Math.max(...samples.map((s) => s.rss));
      const first = samples.find((s) => s.handled > 0);
      const last = samples.at(-1) as Stat;
      let deadLetters = 0;
      try {
        deadLetters = readFileSync(paths.deadLetters, 'utf8').split('\n').filter(Boolean).length;
      } catch {
        deadLetters = 0;
      }
      const scan = new SecretScan([secret]);
      scan.scanFile('worker logs', paths.log);
      scan.scanFile('dead letters', paths.deadLetters);

      const envelopeBytes = Buffer.byteLength(envelopeFor(ids[0] as string, secret));
      const bounds = memoryBounds({ baseline, runningLive: live(liveAt10), envelopeBytes });
      const liveGrowth = live(liveAtEnd) - live(liveAt10);
      const eventsBetween = liveAtEnd.handled - liveAt10.handled;

      const median = percentile(rates, 50);
      const mb = (bytes: number) => round(bytes / 2 ** 20);
      const figures = {
        node: process.versions.node,
        queue: 'sqs (fauxqs)',
        dedupe: 'sqlite',
        events,
        concurrency: CONCURRENCY,
        clock_ahead_of_enqueue_s: TEN_MINUTES / 1000,
        fill_s: round(fillMs / 1000),
        handled: ids.filter((id) => log.counts.has(id)).length,
        lost: ids.filter((id) => !log.counts.has(id)).length,
        repeated_runs: log.repeats,
        dead_letters: deadLetters,
        envelope_bytes: envelopeBytes,
        baseline_rss_mb: mb(baseline.rss),
        baseline_live_mb: mb(live(baseline)),
        live_at_10pct_mb: mb(live(liveAt10)),
        live_at_end_mb: mb(live(liveAtEnd)),
        live_growth_mb: mb(liveGrowth),
        live_heap_growth_mb: mb((liveAtEnd.live_heap ?? 0) - (liveAt10.live_heap ?? 0)),
        live_external_growth_mb: mb((liveAtEnd.live_external ?? 0) - (liveAt10.live_external ?? 0)),
        live_growth_per_event_bytes: Math.round(liveGrowth / Math.max(1, eventsBetween)),
        live_growth_bound_mb: mb(bounds.liveGrowth),
        peak_rss_mb: mb(peakRss),
        peak_rss_bound_mb: mb(bounds.peakRss),
        rss_at_10pct_mb: at10 ? mb(at10.rss) : null,
        rss_growth_after_10pct_mb: at10 ? mb(maxSampledRss - at10.rss) : null,
        heap_at_end_mb: mb(last.heap),
        interval_ms: STATS_INTERVAL_MS,
        rate_per_s: {
          intervals: rates.length,
          min: Math.round(Math.min(...rates)),
          p10: Math.round(percentile(rates, 10)),
          median: Math.round(median),
          max: Math.round(Math.max(...rates)),
        },
        rates_per_interval: FULL ? rates.map((r) => Math.round(r)) : undefined,
        overall_rate_per_s: first
          ? Math.round(((last.handled - first.handled) * 1000) / (last.t - first.t))
          : null,
        ...scan.figures,
      };
      report('overload', figures);

      expect(figures.lost).toBe(0);
      expect(deadLetters, 'dead letters (TIMESTAMP_TOO_OLD would be the backlog mistaken for a replay)').toBe(
        0,
      );
      expect(figures.repeated_runs).toBe(0);
      // The window is long enough for a leak of 1 KiB per event to exceed the bound.
      expect(eventsBetween * LEAK_PER_EVENT_THAT_MUST_FAIL).toBeGreaterThan(bounds.liveGrowth);
      expect(liveGrowth, 'live memory (after full GCs) grew between 10 % and the end').toBeLessThan(
        bounds.liveGrowth,
      );
      expect(peakRss, 'peak RSS over the baseline plus what the kit may hold').toBeLessThan(bounds.peakRss);
      // Steady: no interval collapses (generous: the test process runs fauxqs on the same 2 cores).
      if (rates.length >= 3) expect(percentile(rates, 10)).toBeGreaterThan(median * 0.25);
      expect(scan.hits).toEqual([]);
    },
    timeout(90_000, 900_000),
  );

  it('control: with strict age (the clock, not the enqueue time) the same backlog is stale', async () => {
    const secret = suiteSecret('overload-control');
    const queue = await createQueue(sqs.client, 'overload-control');
    const ids = eventIds('evt-overload-control', 50);
    await sendToSqs(
      sqs.client,
      queue.url,
      ids.map((id) => envelopeFor(id, secret)),
    );
    const reports: SettledReport<SqsMessage>[] = [];
    const handled: string[] = [];
    const consumer = createConsumer<SqsMessage>({
      source: createSqsAdapter({ queueUrl: queue.url, client: sqs.client, waitTimeSeconds: 1 }),
      secrets: [{ id: 'current', secret }],
      dedupe: createMemoryDedupe(),
      deadLetter: join(sqs.dir, 'control-dead.jsonl'),
      logger: silentLogger(),
      strictAge: true,
      now: () => Date.now() + TEN_MINUTES,
      onSettled: (r) => reports.push(r),
    });
    consumer.on('*', (event) => void handled.push(event.event_id));
    await consumer.start();
    try {
      await until(() => reports.length >= ids.length, { timeoutMs: 15_000 });
    } finally {
      await consumer.stop();
    }
    const codes = new Set(reports.map((r) => (r.outcome.kind === 'ack' ? 'ack' : r.outcome.code)));
    report('overload-control', {
      events: ids.length,
      strict_age: true,
      outcomes: [...codes],
      handled: handled.length,
    });
    expect(handled).toEqual([]);
    expect([...codes]).toEqual(['TIMESTAMP_TOO_OLD']);
  });
});
