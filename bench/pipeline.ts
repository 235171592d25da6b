/**
 * Section (b): the whole in-process pipeline (MemorySource → Consumer → SQLite dedupe → no-op
 * handler) beside a "floor": a bare loop doing the same work with nothing around it.
 */
import { createHmac, createSecretKey, timingSafeEqual } from 'node:crypto';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { createMemorySource, type MemoryMessage, type MemorySource } from '../adapters/memory/index.js';
import { type Consumer, type ConsumerOptions, createConsumer } from '../src/consumer/consumer.js';
import { DEFAULT_MAX_IN_FLIGHT_BYTES } from '../src/consumer/settings.js';
import { type EventType, eventSchemas } from '../src/core/events/schemas.js';
import { silentLogger } from '../src/core/logger.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { DEFAULT_RETENTION_MS } from '../src/dedupe/types.js';
import { EVENT_TYPE, makeEnvelopes, OUR_SECRET, type SIZES, sizeByLabel } from './fixtures.js';
import { median, type RatioSummary, repetitionOrder, summariseRatios } from './stats.js';
import { openStoreFileBare, prefilledStoreFile } from './store-file.js';

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
  /** Also run the pipeline with `tracing: false` in each repetition (the cost of the tracing code). */
  readonly compareTracing?: boolean;
  /** Also run the floor a second time in each repetition: the A/A control of the run's spread. */
  readonly control?: boolean;
  /**
   * Start every run (pipeline and floors) on a copy of one file already holding this many done
   * events, as a worker's file does after days of its retention, instead of an empty one.
   */
  readonly prefill?: number;
}

export interface RunSeries {
  readonly eventsPerSec: number;
  readonly usPerEvent: number;
  /** events/s of each repetition. */
  readonly runs: readonly number[];
  /** The process's CPU time (user + system, all threads) per event: median, and each repetition. */
  readonly cpuUsPerEvent: number;
  readonly cpuRuns: readonly number[];
}

/** One timed run: wall ms and CPU µs. */
interface Timed {
  readonly ms: number;
  readonly cpuUs: number;
}

/** What one process measured for one size: each side's repetitions, raw (`summarisePipeline` pools them). */
export interface PipelineSamples {
  readonly size: string;
  readonly bodyBytes: number;
  readonly n: number;
  readonly reps: number;
  readonly concurrency: number;
  /** Events per transaction of the floors: as many as the pipeline can claim at once. */
  readonly floorBatch: number;
  readonly pipeline: RunSeries | null;
  /** The pipeline with `tracing: false` (with `compareTracing`). */
  readonly untraced: RunSeries | null;
  /** The brief's floor: parse, HMAC, parse, zod, one INSERT per event (`floorBatch` per transaction). */
  readonly floor: RunSeries | null;
  /** The floor with the store's own claim and complete statements instead of the one INSERT. */
  readonly floorClaimComplete: RunSeries | null;
  /** The A/A control: the floor run again in the same repetition (with `control`). */
  readonly floorAgain: RunSeries | null;
  readonly memory: PipelineMemory;
}

/** Pipeline ÷ a floor per repetition, by events/s (wall) and by CPU per event (floor CPU ÷ pipeline CPU). */
export interface PairedRatios {
  readonly wall: RatioSummary;
  readonly cpu: RatioSummary;
}

/** One size's figures, pooled over the repetitions of one or more processes (`summarisePipeline`). */
export interface PipelineSizeResult {
  readonly size: string;
  readonly bodyBytes: number;
  readonly n: number;
  /** Repetitions pooled, and the processes they ran in. */
  readonly reps: number;
  readonly processes: number;
  readonly concurrency: number;
  readonly floorBatch: number;
  readonly pipeline: RunSeries | null;
  readonly floor: RunSeries | null;
  readonly floorClaimComplete: RunSeries | null;
  /**
   * Ratios taken within each repetition (the sides run back to back), median with its 95 %
   * interval: pipeline ÷ floor and ÷ floor+c; pipeline ÷ the pipeline with `tracing: false`;
   * floor+c ÷ floor (no kit code in either); the A/A control, floor ÷ the floor run again.
   */
  readonly ratios: {
    readonly floor: PairedRatios;
    readonly floorClaimComplete: PairedRatios;
    readonly untraced?: PairedRatios;
    readonly floorsApart: RatioSummary;
    readonly control?: PairedRatios;
  } | null;
  /** The process whose RSS grew most (the worst case); heap per in-flight event: median of the processes. */
  readonly memory: PipelineMemory;
}

export interface PipelineMemory {
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
  /** Bytes of one envelope. */
  readonly envelopeBytes: number;
  /** Heap held per in-flight event beyond its input string (`measureHeapPerInFlight`). */
  readonly heapPerInFlightBytes: number;
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

/**
 * The consumer every pipeline bench runs: the memory source, our secret, SQLite dedupe and the
 * dead letters in `dir`, no logs; `settings` on top.
 */
export function benchConsumer(
  source: MemorySource,
  dir: string,
  settings: Omit<ConsumerOptions<MemoryMessage>, 'source' | 'secrets' | 'dedupe' | 'logger' | 'deadLetter'>,
): Consumer<MemoryMessage> {
  return createConsumer({
    source,
    secrets: [{ id: 'current', secret: OUR_SECRET }],
    dedupe: createSqliteDedupe({ path: join(dir, 'dedupe.sqlite') }),
    logger: silentLogger(),
    deadLetter: join(dir, 'dead-letters.jsonl'),
    ...settings,
  });
}

/** One timed pipeline run over `raws`; returns elapsed ms from start() to `stopped`. */
export async function runPipelineOnce(
  raws: readonly string[],
  concurrency: number,
  options: {
    /** Memory peaks of the run, sampled. */
    readonly peak?: Peak | undefined;
    /** Default true. */
    readonly tracing?: boolean;
    /** A store file to start from (a copy), instead of an empty one. */
    readonly template?: string | undefined;
  } = {},
): Promise<Timed> {
  const { peak, tracing = true, template } = options;
  const dir = freshDir();
  try {
    if (template) copyFileSync(template, join(dir, 'dedupe.sqlite'));
    const source = createMemorySource({ endWhenEmpty: true });
    for (const raw of raws) source.send(raw);
    const consumer = benchConsumer(source, dir, { concurrency, tracing });
    consumer.on(EVENT_TYPE, () => {});
    gc();
    const stopSampling = peak ? sampleMemory(peak) : undefined;
    const cpu = process.cpuUsage();
    const started = performance.now();
    await consumer.start();
    await consumer.stopped;
    const elapsed = performance.now() - started;
    const cpuUs = cpuSince(cpu);
    stopSampling?.();

    let handled = 0;
    for (const s of source.settled) if (s.outcome.kind === 'ack' && s.outcome.result === 'handled') handled++;
    if (handled !== raws.length) {
      const other = source.settled.find((s) => !(s.outcome.kind === 'ack' && s.outcome.result === 'handled'));
      throw new Error(
        `pipeline handled ${handled} of ${raws.length} events; e.g. ${JSON.stringify(other?.outcome)}`,
      );
    }
    return { ms: elapsed, cpuUs };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function cpuSince(start: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(start);
  return used.user + used.system;
}

/**
 * How many envelopes `measureHeapPerInFlight` holds: at least `concurrency`, and enough to hold
 * ~8 MiB of envelopes, so that what they hold stands well above the heap's own drift between two
 * full collections (64 events of 300 B hold about 0.2 MB).
 */
const HEAP_SAMPLE_BYTES = 8 * 1024 * 1024;

/**
 * Heap per in-flight event: a consumer whose handler holds every event until released. Its heap
 * after full collections once `held` events are held in their handlers, minus its heap after
 * a first round of `held` other events handled and let go (its code compiled, its store open,
 * what a running worker holds anyway), ÷ `held`. The envelope strings are held by `raws` in both.
 * The baseline is taken after the event loop turned: a stopped consumer used to stay reachable
 * until then (the receive loop's and the SQLite store's callbacks for the next turn, cancelled
 * since), and a bench repetition's 3 MB counted into the baseline made the figure negative.
 */
export async function measureHeapPerInFlight(raws: readonly string[], concurrency: number): Promise<number> {
  const envelopeLength = raws[0]?.length ?? 1;
  const held = Math.min(
    Math.floor(raws.length / 2),
    Math.max(concurrency, Math.ceil(HEAP_SAMPLE_BYTES / envelopeLength)),
  );
  const dir = freshDir();
  try {
    const source = createMemorySource({ endWhenEmpty: false });
    // Every event held, whatever its size (what one event in flight holds is the figure).
    const consumer = benchConsumer(source, dir, { concurrency: held, maxInFlightBytes: 0 });
    let holding = false;
    const releases: (() => void)[] = [];
    let allHeld: () => void = () => {};
    const reached = new Promise<void>((resolve) => {
      allHeld = resolve;
    });
    consumer.on(EVENT_TYPE, () => {
      if (!holding) return;
      const { promise, resolve } = withResolvers();
      releases.push(resolve);
      if (releases.length === held) allHeld();
      return promise;
    });
    await consumer.start();
    for (const raw of raws.slice(held, 2 * held)) source.send(raw);
    await settledCount(source, held);
    const idle = await heapAfterTurns();
    holding = true;
    for (const raw of raws.slice(0, held)) source.send(raw);
    await reached;
    const busy = await heapAfterTurns();
    for (const release of releases) release();
    await settledCount(source, 2 * held);
    await consumer.stop();
    return (busy - idle) / held;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Resolves once `source` has settled `count` messages in all. */
async function settledCount(source: MemorySource, count: number): Promise<void> {
  while (source.settled.length < count) await nextTurn();
}

/** Heap used after two turns of the event loop and two full collections. */
async function heapAfterTurns(): Promise<number> {
  for (let turn = 0; turn < 2; turn++) await nextTurn();
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

function withResolvers(): { promise: Promise<void>; resolve: () => void } {
  let resolve: () => void = () => {};
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const LEASE_MS = 60_000;

/**
 * Events per transaction of the floors run beside a pipeline of `concurrency` over envelopes of
 * `envelopeLength` characters: the most the pipeline can claim in one transaction (its messages
 * in flight: `concurrency`, or fewer where the default `maxInFlightBytes` binds, as with 64 KB
 * bodies; at most one receive of the memory source). A floor that commits more per transaction
 * does less work per event than any pipeline at that concurrency can: at 300 B, 100 per
 * transaction ran 5-9 % faster than 64 (docs/performance-log.md, "The floors' transactions").
 */
export function floorBatchFor(concurrency: number, envelopeLength: number): number {
  const bySize = Math.max(1, Math.floor(DEFAULT_MAX_IN_FLIGHT_BYTES / envelopeLength));
  return Math.min(concurrency, bySize, createMemorySource().maxBatchSize);
}

/**
 * The floor: the same operations as the pipeline with no pipeline around them. The database file
 * is created by the SQLite dedupe store itself (so tables, index, page size and journal mode are
 * exactly the store's), then reopened with the store's connection pragmas. `batch` events per
 * transaction (`floorBatchFor`); timing includes closing the database (as the pipeline's
 * `stopped` does).
 * - `complete: false` (the brief's floor, one write): one INSERT of a row into the dedupe table
 *   per event, the least a durable de-duplication can write.
 * - `complete: true` (floor + complete): the store's own statements (SQLITE_STATEMENTS), bare: its
 *   claim (a lease row), then its complete (the lease deleted, the done record written).
 */
export async function runFloorOnce(
  raws: readonly string[],
  options: { complete: boolean; batch: number; template?: string | undefined },
): Promise<Timed> {
  const dir = freshDir();
  try {
    if (options.template) copyFileSync(options.template, join(dir, 'floor.sqlite'));
    const { db, claimBatch, completeBatch } = await openStoreFileBare(join(dir, 'floor.sqlite'));
    const insert = db.prepare('INSERT INTO dedupe (event_id, done, token, expires_at) VALUES (?, 0, ?, ?)');
    const insertBatch = db.transaction((ids: string[], tokens: string[], now: number) => {
      for (let i = 0; i < ids.length; i++) insert.run(ids[i], tokens[i], now + LEASE_MS);
    });
    const key = createSecretKey(Buffer.from(OUR_SECRET, 'utf8'));
    const tokenPrefix = `${process.pid}.floor.`;
    let seq = 0;
    let ids: string[] = [];
    let tokens: string[] = [];
    const flush = () => {
      const now = Date.now();
      if (options.complete) {
        claimBatch.immediate(ids, tokens, now);
        completeBatch.immediate(ids, tokens, now + DEFAULT_RETENTION_MS);
      } else {
        insertBatch.immediate(ids, tokens, now);
      }
      ids = [];
      tokens = [];
    };

    gc();
    const cpu = process.cpuUsage();
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
      if (ids.length === options.batch) flush();
    }
    if (ids.length > 0) flush();
    db.close();
    const ms = performance.now() - started;
    return { ms, cpuUs: cpuSince(cpu) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function series(n: number, timed: readonly Timed[]): RunSeries | null {
  if (timed.length === 0) return null;
  const runs = timed.map((t) => (n / t.ms) * 1000);
  const cpuRuns = timed.map((t) => t.cpuUs / n);
  const eventsPerSec = median(runs);
  return { eventsPerSec, usPerEvent: 1e6 / eventsPerSec, runs, cpuUsPerEvent: median(cpuRuns), cpuRuns };
}

/** Warm-up, then `reps` interleaved repetitions of pipeline, floor and floor+complete. */
export async function runPipelineSize(options: PipelineSizeOptions): Promise<PipelineSamples> {
  const size = sizeByLabel(options.size);
  const raws = makeEnvelopes(size.bytes, options.n);
  const inputBytes = raws.reduce((sum, r) => sum + r.length, 0);

  const templateDir = options.prefill ? freshDir() : undefined;
  const template = templateDir ? join(templateDir, 'prefilled.sqlite') : undefined;
  if (template) await prefilledStoreFile(template, options.prefill ?? 0);
  try {
    return await runSides(options, size, raws, inputBytes, template);
  } finally {
    if (templateDir) rmSync(templateDir, { recursive: true, force: true });
  }
}

/** `runPipelineSize` once its inputs (and the prefilled file) are ready. */
async function runSides(
  options: PipelineSizeOptions,
  size: (typeof SIZES)[number],
  raws: readonly string[],
  inputBytes: number,
  template: string | undefined,
): Promise<PipelineSamples> {
  const doPipeline = options.only !== 'floor';
  const doFloor = options.only !== 'pipeline';
  const batch = floorBatchFor(options.concurrency, (raws[0] as string).length);
  gc();
  const before = process.memoryUsage();
  const warmRaws = raws.slice(0, Math.min(options.warmupN, raws.length));
  if (doPipeline) await runPipelineOnce(warmRaws, options.concurrency, { template });
  if (doFloor) {
    await runFloorOnce(warmRaws, { complete: false, batch, template });
    await runFloorOnce(warmRaws, { complete: true, batch, template });
  }

  const peak: Peak = { rss: 0, heapUsed: 0 };
  const pipelineMs: Timed[] = [];
  const floorMs: Timed[] = [];
  const floor2Ms: Timed[] = [];
  const untracedMs: Timed[] = [];
  const floorAgainMs: Timed[] = [];
  if (options.compareTracing)
    await runPipelineOnce(warmRaws, options.concurrency, { tracing: false, template });
  // The sides of one repetition run back to back, in `repetitionOrder` (measured: the floor ran
  // ~15 % slower right after the pipeline than after floor+c).
  const sides: (() => Promise<void>)[] = [];
  if (doPipeline)
    sides.push(
      async () => void pipelineMs.push(await runPipelineOnce(raws, options.concurrency, { peak, template })),
    );
  if (options.compareTracing) {
    sides.push(
      async () =>
        void untracedMs.push(await runPipelineOnce(raws, options.concurrency, { tracing: false, template })),
    );
  }
  if (doFloor) {
    sides.push(async () => void floorMs.push(await runFloorOnce(raws, { complete: false, batch, template })));
    sides.push(async () => void floor2Ms.push(await runFloorOnce(raws, { complete: true, batch, template })));
    if (options.control) {
      sides.push(
        async () => void floorAgainMs.push(await runFloorOnce(raws, { complete: false, batch, template })),
      );
    }
  }
  for (let r = 0; r < options.reps; r++) {
    for (const side of repetitionOrder(sides, r)) await side();
  }
  gc();
  const after = process.memoryUsage();
  const heapPerInFlightBytes = doPipeline ? await measureHeapPerInFlight(raws, options.concurrency) : 0;
  return {
    size: size.label,
    bodyBytes: size.bytes,
    n: options.n,
    reps: options.reps,
    concurrency: options.concurrency,
    floorBatch: batch,
    pipeline: series(options.n, pipelineMs),
    untraced: series(options.n, untracedMs),
    floor: series(options.n, floorMs),
    floorClaimComplete: series(options.n, floor2Ms),
    floorAgain: series(options.n, floorAgainMs),
    memory: {
      rssBeforeBytes: before.rss,
      heapUsedBeforeBytes: before.heapUsed,
      peakRssBytes: peak.rss,
      peakHeapUsedBytes: peak.heapUsed,
      heapUsedAfterGcBytes: after.heapUsed,
      inputBytes,
      envelopeBytes: raws[0]?.length ?? 0,
      heapPerInFlightBytes,
    },
  };
}

/**
 * Pools one size's repetitions from one or more processes (`bench/run.ts` forks a few per size:
 * between processes a run moves by more than within one). Every ratio is taken within one
 * repetition, between sides that ran back to back, and only then pooled.
 */
export function summarisePipeline(parts: readonly PipelineSamples[]): PipelineSizeResult {
  const first = parts[0];
  if (!first || parts.some((p) => p.size !== first.size || p.n !== first.n))
    throw new Error('summarisePipeline: one size and run length, at least one part');
  const pooled = (side: (p: PipelineSamples) => RunSeries | null): RunSeries | null => {
    const all = parts.map(side);
    if (all.some((s) => s === null)) return null;
    const present = all as RunSeries[];
    const runs = present.flatMap((s) => s.runs);
    const cpuRuns = present.flatMap((s) => s.cpuRuns);
    const eventsPerSec = median(runs);
    return { eventsPerSec, usPerEvent: 1e6 / eventsPerSec, runs, cpuUsPerEvent: median(cpuRuns), cpuRuns };
  };
  const pipeline = pooled((p) => p.pipeline);
  const floor = pooled((p) => p.floor);
  const floorClaimComplete = pooled((p) => p.floorClaimComplete);
  const untraced = pooled((p) => p.untraced);
  const floorAgain = pooled((p) => p.floorAgain);
  const worst = parts.reduce((a, b) =>
    b.memory.peakRssBytes - b.memory.rssBeforeBytes > a.memory.peakRssBytes - a.memory.rssBeforeBytes ? b : a,
  );
  return {
    size: first.size,
    bodyBytes: first.bodyBytes,
    n: first.n,
    reps: parts.reduce((sum, p) => sum + p.reps, 0),
    processes: parts.length,
    concurrency: first.concurrency,
    floorBatch: first.floorBatch,
    pipeline,
    floor,
    floorClaimComplete,
    ratios:
      pipeline && floor && floorClaimComplete
        ? {
            floor: pairedRatios(pipeline, floor),
            floorClaimComplete: pairedRatios(pipeline, floorClaimComplete),
            ...(untraced ? { untraced: pairedRatios(pipeline, untraced) } : {}),
            floorsApart: summariseRatios(
              floorClaimComplete.runs.map((x, i) => x / (floor.runs[i] as number)),
            ),
            ...(floorAgain ? { control: pairedRatios(floor, floorAgain) } : {}),
          }
        : null,
    memory: {
      ...worst.memory,
      heapPerInFlightBytes: median(parts.map((p) => p.memory.heapPerInFlightBytes)),
    },
  };
}

/** Per repetition, `a` ÷ `b` by events/s and by CPU per event (b's CPU ÷ a's). */
function pairedRatios(a: RunSeries, b: RunSeries): PairedRatios {
  return {
    wall: summariseRatios(a.runs.map((x, i) => x / (b.runs[i] as number))),
    cpu: summariseRatios(a.cpuRuns.map((x, i) => (b.cpuRuns[i] as number) / x)),
  };
}
