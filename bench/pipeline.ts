/**
 * Section (b): the whole in-process pipeline (MemorySource → Consumer → SQLite dedupe → no-op
 * handler) beside a "floor": a bare loop doing the same work with nothing around it.
 */
import { createHmac, createSecretKey, timingSafeEqual } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMemorySource } from '../adapters/memory/index.js';
import { createConsumer } from '../src/consumer/consumer.js';
import { type EventType, eventSchemas } from '../src/core/events/schemas.js';
import { silentLogger } from '../src/core/logger.js';
import Database from '../src/core/sqlite-driver.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { EVENT_TYPE, makeEnvelopes, OUR_SECRET, sizeByLabel } from './fixtures.js';
import { median } from './stats.js';

export interface PipelineSizeOptions {
  readonly size: string;
  /** Events per timed run. */
  readonly n: number;
  readonly reps: number;
  /** Events of the untimed warm-up run (pipeline and floor each). */
  readonly warmupN: number;
  readonly concurrency: number;
  /** Run only one side (for profiling). */
  readonly only?: 'pipeline' | 'floor' | undefined;
}

export interface RunSeries {
  readonly eventsPerSec: number;
  readonly usPerEvent: number;
  /** events/s of each repetition. */
  readonly runs: readonly number[];
}

export interface PipelineSizeResult {
  readonly size: string;
  readonly bodyBytes: number;
  readonly n: number;
  readonly reps: number;
  readonly concurrency: number;
  readonly pipeline: RunSeries | null;
  /** The brief's floor: parse, HMAC, parse, zod, one INSERT per event (100 per transaction). */
  readonly floor: RunSeries | null;
  /** Informational: the floor plus the second write the pipeline makes (claim + complete). */
  readonly floorClaimComplete: RunSeries | null;
  /** pipeline events/s ÷ floor events/s. */
  readonly ratio: number | null;
  readonly memory: {
    /** Process RSS / heap used after the inputs were built, before any run. */
    readonly rssBeforeBytes: number;
    readonly heapUsedBeforeBytes: number;
    /** Highest values sampled (every 20 ms) while the pipeline runs were in progress. */
    readonly peakRssBytes: number;
    readonly peakHeapUsedBytes: number;
    /** Heap used after the last run and a full GC: what the runs left reachable (leak check). */
    readonly heapUsedAfterGcBytes: number;
    /** Message bytes held by the source during one run (the inputs alone). */
    readonly inputBytes: number;
  };
}

function freshDir(): string {
  return mkdtempSync(join(tmpdir(), 'phe-bench-'));
}

function gc(): void {
  const g = (globalThis as { gc?: () => void }).gc;
  if (g) g();
}

interface Peak {
  rss: number;
  heapUsed: number;
}

/** Samples process memory every 20 ms until stopped (cheap: ~0.1 % of a run); keeps the maxima. */
function sampleMemory(peak: Peak): () => void {
  const take = () => {
    const m = process.memoryUsage();
    if (m.rss > peak.rss) peak.rss = m.rss;
    if (m.heapUsed > peak.heapUsed) peak.heapUsed = m.heapUsed;
  };
  take();
  const timer = setInterval(take, 20);
  return () => {
    clearInterval(timer);
    take();
  };
}

/** One timed pipeline run over `raws`; returns elapsed ms from start() to `stopped`. */
export async function runPipelineOnce(
  raws: readonly string[],
  concurrency: number,
  peak?: Peak,
): Promise<number> {
  const dir = freshDir();
  try {
    const source = createMemorySource({ endWhenEmpty: true });
    for (const raw of raws) source.send(raw);
    const consumer = createConsumer({
      source,
      secrets: [{ id: 'current', secret: OUR_SECRET }],
      dedupe: createSqliteDedupe({ path: join(dir, 'dedupe.sqlite') }),
      logger: silentLogger(),
      deadLetter: join(dir, 'dead-letters.jsonl'),
      concurrency,
    });
    consumer.on(EVENT_TYPE, () => {});
    gc();
    const stopSampling = peak ? sampleMemory(peak) : undefined;
    const started = performance.now();
    await consumer.start();
    await consumer.stopped;
    const elapsed = performance.now() - started;
    stopSampling?.();

    let handled = 0;
    for (const s of source.settled) if (s.outcome.kind === 'ack' && s.outcome.result === 'handled') handled++;
    if (handled !== raws.length) {
      const other = source.settled.find((s) => !(s.outcome.kind === 'ack' && s.outcome.result === 'handled'));
      throw new Error(
        `pipeline handled ${handled} of ${raws.length} events; e.g. ${JSON.stringify(other?.outcome)}`,
      );
    }
    return elapsed;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const FLOOR_BATCH = 100;
const LEASE_MS = 60_000;

/**
 * The floor: the same operations as the pipeline with no pipeline around them. The database file
 * is created by the SQLite dedupe store itself (so table, index, page size and journal mode are
 * exactly the store's), then reopened with the store's connection pragmas. One INSERT per event,
 * 100 per transaction; timing includes closing the database (as the pipeline's `stopped` does).
 */
export async function runFloorOnce(raws: readonly string[], options: { complete: boolean }): Promise<number> {
  const dir = freshDir();
  try {
    const path = join(dir, 'floor.sqlite');
    await createSqliteDedupe({ path }).close();
    const db = new Database(path);
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('wal_autocheckpoint = 10000');
    db.pragma('cache_size = -32000');
    const insert = db.prepare('INSERT INTO dedupe (event_id, done, token, expires_at) VALUES (?, 0, ?, ?)');
    const complete = db.prepare(
      'UPDATE dedupe SET done = 1, expires_at = ? WHERE event_id = ? AND token = ? AND done = 0',
    );
    const insertBatch = db.transaction((ids: string[], tokens: string[], expiresAt: number) => {
      for (let i = 0; i < ids.length; i++) insert.run(ids[i], tokens[i], expiresAt);
    });
    const completeBatch = db.transaction((ids: string[], tokens: string[], expiresAt: number) => {
      for (let i = 0; i < ids.length; i++) {
        if (complete.run(expiresAt, ids[i], tokens[i]).changes !== 1) throw new Error('complete missed');
      }
    });
    const key = createSecretKey(Buffer.from(OUR_SECRET, 'utf8'));
    const tokenPrefix = `${process.pid}.floor.`;
    let seq = 0;
    let ids: string[] = [];
    let tokens: string[] = [];
    const flush = () => {
      const now = Date.now();
      insertBatch.immediate(ids, tokens, now + LEASE_MS);
      if (options.complete) completeBatch.immediate(ids, tokens, now + 7 * 24 * 3600_000);
      ids = [];
      tokens = [];
    };

    gc();
    const started = performance.now();
    for (const raw of raws) {
      const env = JSON.parse(raw) as {
        event_type: string;
        signed_at: number;
        signature: string;
        body: string;
      };
      const mac = createHmac('sha256', key).update(`${env.signed_at}.`).update(env.body).digest();
      if (!timingSafeEqual(mac, Buffer.from(env.signature, 'hex'))) throw new Error('floor: bad signature');
      const body: unknown = JSON.parse(env.body);
      const event = eventSchemas[env.event_type as EventType].parse(body) as { event_id: string };
      ids.push(event.event_id);
      tokens.push(tokenPrefix + (++seq).toString(36));
      if (ids.length === FLOOR_BATCH) flush();
    }
    if (ids.length > 0) flush();
    db.close();
    return performance.now() - started;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function series(n: number, msRuns: readonly number[]): RunSeries | null {
  if (msRuns.length === 0) return null;
  const runs = msRuns.map((ms) => (n / ms) * 1000);
  const eventsPerSec = median(runs);
  return { eventsPerSec, usPerEvent: 1e6 / eventsPerSec, runs };
}

/** Warm-up, then `reps` interleaved repetitions of pipeline, floor and floor+complete. */
export async function runPipelineSize(options: PipelineSizeOptions): Promise<PipelineSizeResult> {
  const size = sizeByLabel(options.size);
  const raws = makeEnvelopes(size.bytes, options.n);
  const inputBytes = raws.reduce((sum, r) => sum + r.length, 0);
  const doPipeline = options.only !== 'floor';
  const doFloor = options.only !== 'pipeline';

  gc();
  const before = process.memoryUsage();
  const warmRaws = raws.slice(0, Math.min(options.warmupN, raws.length));
  if (doPipeline) await runPipelineOnce(warmRaws, options.concurrency);
  if (doFloor) {
    await runFloorOnce(warmRaws, { complete: false });
    await runFloorOnce(warmRaws, { complete: true });
  }

  const peak: Peak = { rss: 0, heapUsed: 0 };
  const pipelineMs: number[] = [];
  const floorMs: number[] = [];
  const floor2Ms: number[] = [];
  for (let r = 0; r < options.reps; r++) {
    if (doPipeline) pipelineMs.push(await runPipelineOnce(raws, options.concurrency, peak));
    if (doFloor) {
      floorMs.push(await runFloorOnce(raws, { complete: false }));
      floor2Ms.push(await runFloorOnce(raws, { complete: true }));
    }
  }
  gc();
  const after = process.memoryUsage();
  const pipeline = series(options.n, pipelineMs);
  const floor = series(options.n, floorMs);
  return {
    size: size.label,
    bodyBytes: size.bytes,
    n: options.n,
    reps: options.reps,
    concurrency: options.concurrency,
    pipeline,
    floor,
    floorClaimComplete: series(options.n, floor2Ms),
    ratio: pipeline && floor ? pipeline.eventsPerSec / floor.eventsPerSec : null,
    memory: {
      rssBeforeBytes: before.rss,
      heapUsedBeforeBytes: before.heapUsed,
      peakRssBytes: peak.rss,
      peakHeapUsedBytes: peak.heapUsed,
      heapUsedAfterGcBytes: after.heapUsed,
      inputBytes,
    },
  };
}
