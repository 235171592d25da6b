/**
 * Overload suite: a backlog sits in SQS (fauxqs, in this process) when the worker starts — a
 * worker that was down for ten minutes. The worker is a separate process (so its memory figures
 * are its own) whose clock is 10 minutes ahead of the enqueue times, with SQLite dedupe.
 *
 *   - nothing is rejected as stale: age is measured from the broker's SentTimestamp, which the
 *     backlog does not change (a control run with --strict-age semantics rejects the same events,
 *     proving the clock was really moved);
 *   - memory stays bounded: peak RSS of the worker, and its growth after the first 10 %;
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
/** A worker's RSS with the SQS SDK, SQLite and pino loaded is ~100 MB; the bound leaves room, not a leak. */
const PEAK_RSS_BOUND = 320 * 1024 * 1024;
/** RSS may not grow by more than this between 10 % of the backlog and its end. */
const GROWTH_BOUND = 64 * 1024 * 1024;

const sqs = fauxqsPerFile('phe-overload-');

interface Stat {
  readonly t: number;
  readonly handled: number;
  readonly rss: number;
  readonly heap: number;
  readonly max_rss?: number;
  readonly final?: number;
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
        { secret, logPath: paths.log, env: { LOG_LEVEL: 'warn' } },
      );
      const log = new HandledLog(paths.handled);
      try {
        await until(() => log.refresh().unique >= events, {
          timeoutMs: timeout(60_000, 480_000),
          intervalMs: 100,
          describe: () => `${log.unique} of ${events} handled\n${tail(paths.log)}`,
        });
        await until(() => sqsEmpty(sqs.client, queue.url), { timeoutMs: 30_000, intervalMs: 100 });
        const exit = await worker.stop();
        expect(exit.code, tail(paths.log)).toBe(0);
      } finally {
        await worker.kill();
      }

      const stats = readFileSync(paths.stats, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Stat);
      const final = stats.find((s) => s.final === 1);
      const samples = stats.filter((s) => s.final !== 1);
      // Per-interval rates between the first sample with progress and the last before the end.
      const rates: number[] = [];
      for (let i = 1; i < samples.length; i++) {
        const a = samples[i - 1] as Stat;
        const b = samples[i] as Stat;
        if (a.handled === 0 || b.handled >= events) continue; // start-up and the tail are partial
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

      const median = percentile(rates, 50);
      const figures = {
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
        peak_rss_mb: round(peakRss / 2 ** 20),
        rss_at_10pct_mb: at10 ? round(at10.rss / 2 ** 20) : null,
        rss_growth_after_10pct_mb: at10 ? round((maxSampledRss - at10.rss) / 2 ** 20) : null,
        heap_at_end_mb: round(last.heap / 2 ** 20),
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
      expect(peakRss).toBeLessThan(PEAK_RSS_BOUND);
      if (at10) expect(maxSampledRss - at10.rss).toBeLessThan(GROWTH_BOUND);
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
