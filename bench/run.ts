/**
 * `npm run bench` — the benchmark suite.
 *
 *   (a) verify step alone: `verifyMessage` beside Stripe's `constructEvent` and svix's `verify`
 *       on the same body bytes (300 B, 2 KB, 64 KB);
 *   (b) the whole in-process pipeline (MemorySource → Consumer → SQLite dedupe → no-op handler)
 *       beside a bare-loop floor doing the same work, with memory figures, and once more at 300 B
 *       on a file already holding 500,000 done events (as after a week of a worker's retention);
 *   (c) the dedupe stores alone;
 *   (d) the sidecar: `partner-events run --forward` to an app in its own process, from a file and
 *       from the HTTP ingress, beside floors doing the same operations bare (bench/sidecar.ts);
 *   (f) the serverless subpaths' cold start: import and first event in fresh processes (bench/serverless.ts).
 *   (g) the console's dead-letter table over a 100,000-line file (bench/console.ts).
 *
 * Prints a table per section, then one JSON line with every figure (the last line of output).
 *
 *   npm run bench                       full run (~1 minute on 2 cores)
 *   npm run bench -- --quick            smoke test (a few seconds)
 *   npm run bench -- --only verify      some sections, comma-separated (verify, pipeline, dedupe, sidecar, redis, serverless, console)
 *   npm run bench -- --sizes 300B,2KB   some sizes (the sidecar section: 300 B unless given)
 *   npm run bench -- --only sidecar --app-delay-ms 20 --sidecar-concurrency 16
 *                                       the sidecar section against a slow app
 */
import { fork } from 'node:child_process';
import { availableParallelism, cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type ConsoleBenchResult, consoleJson, runConsoleSection } from './console.js';
import { type DedupeBenchRow, runDedupeBench } from './dedupe.js';
import { SIZES, sizeByLabel } from './fixtures.js';
import {
  type PipelineSamples,
  type PipelineSizeResult,
  type RunSeries,
  summarisePipeline,
} from './pipeline.js';
import { type RedisBenchResult, redisJson, runRedisSection } from './redis.js';
import { printServerlessRows, runServerlessBench, type ServerlessRow } from './serverless.js';
import { runSidecarBench, type SidecarRow } from './sidecar.js';
import { fmtFixed, fmtInt, fmtMiB, type RatioSummary, sig, spansGoal, table } from './stats.js';
import { summariseVerify, type VerifySamples, type VerifySizeResult, type VerifyTiming } from './verify.js';
import { VERIFY_FLOOR_GOAL } from './verify-floor.js';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    sizes: { type: 'string' },
    /** Sidecar section: the app's answer delay and the sidecar's --concurrency. */
    'app-delay-ms': { type: 'string', default: '0' },
    'sidecar-concurrency': { type: 'string' },
  },
});
const quick = values.quick;
const sizes = values.sizes ? values.sizes.split(',').map((s) => sizeByLabel(s.trim()).label) : undefined;
const SECTIONS = ['verify', 'pipeline', 'dedupe', 'sidecar', 'redis', 'serverless', 'console'];
const only = values.only?.split(',').map((s) => s.trim());
const unknownSection = only?.find((s) => !SECTIONS.includes(s));
if (unknownSection !== undefined) {
  throw new Error(`--only: unknown section '${unknownSection}' (sections: ${SECTIONS.join(', ')})`);
}
const runVerify = only === undefined || only.includes('verify');
const runPipeline = only === undefined || only.includes('pipeline');
const runDedupe = only === undefined || only.includes('dedupe');
const runSidecar = only === undefined || only.includes('sidecar');
const runRedis = only === undefined || only.includes('redis');
const runServerless = only === undefined || only.includes('serverless');
const runConsole = only === undefined || only.includes('console');

const VERIFY_GOAL = 1; // ours at least as fast as Stripe's
const TRACING_GOAL = 0.97; // the tracing code with no SDK registered costs nothing measurable (issue 16)
const PIPELINE_GOAL = 0.7; // pipeline ÷ floor (one write) at every size
/** pipeline ÷ floor+complete (two writes), by body size (issue 15). */
const PIPELINE_CLAIM_COMPLETE_GOAL: Record<string, number> = { '300 B': 0.85, '2 KB': 0.85, '64 KB': 0.9 };
const SIDECAR_FILE_GOAL = 0.7; // run --forward from a file at least 0.7× its floor
const SIDECAR_INGRESS_GOAL = 0.6; // ingress → forward at least 0.6× its floor
const SIDECAR_PER_CORE_GOAL = 10_000; // run --forward from a file, events/s per core of CPU at 300 B

/** Per size: `processes` fresh processes of `rounds` paired rounds each, pooled (bench/verify.ts). */
const verifyOptions = quick
  ? { processes: 1, warmupMs: 40, rounds: 4, roundMs: 20, pool: 16 }
  : { processes: 3, warmupMs: 200, rounds: 16, roundMs: 25, pool: 64 };

interface PipelinePlan {
  readonly n: number;
  readonly warmup: number;
  readonly reps: number;
}

/** "95 % 0.93–0.98, rounds 0.71–1.12": where the median lies, and how far single rounds strayed. */
function interval(r: RatioSummary): string {
  return `95 % ${fmtFixed(r.low, 2)}–${fmtFixed(r.high, 2)}, rounds ${fmtFixed(r.min, 2)}–${fmtFixed(r.max, 2)}`;
}

/** The arguments of `bench/pipeline-child.ts` for one size and plan, at the bench's concurrency. */
function pipelineChildArgs(size: string, plan: PipelinePlan, extra: readonly string[]): string[] {
  const { n, reps, warmup } = plan;
  return [
    '--size',
    size,
    '--n',
    String(n),
    '--reps',
    String(reps),
    '--warmup',
    String(warmup),
    '--concurrency',
    String(CONCURRENCY),
    ...extra,
  ];
}

/** Events per timed run, per size; fewer for 64 KB bodies (memory, and each costs ~100×). */
const pipelinePlan: Record<string, PipelinePlan> = quick
  ? {
      '300 B': { n: 3000, warmup: 1000, reps: 1 },
      '2 KB': { n: 3000, warmup: 1000, reps: 1 },
      '64 KB': { n: 300, warmup: 100, reps: 1 },
    }
  : {
      // An even number of repetitions: each order of the sides runs as often (see runPipelineSize).
      '300 B': { n: 20_000, warmup: 4000, reps: 6 },
      '2 KB': { n: 10_000, warmup: 3000, reps: 6 },
      // 64 KB: runs of 1,000 events (~0.6 s) after 250 warm-up events left ratios 0.70–1.06 apart
      // between single runs; 2,000 after 500 narrowed them (docs/performance-log.md).
      '64 KB': { n: 2000, warmup: 500, reps: 6 },
    };
/**
 * Fresh processes per size, whose repetitions are pooled: one process's 8 repetitions gave 300 B
 * ÷ floor 0.70 in one run and 0.83 in the next (docs/performance-log.md).
 */
const PIPELINE_PROCESSES = quick ? 1 : 3;
const CONCURRENCY = 64;

const t0 = performance.now();
const cpu = cpus()[0]?.model ?? 'unknown cpu';
console.log(
  `partner-health-events bench${quick ? ' (--quick)' : ''} — node ${process.version}, ${availableParallelism()} cpu (${cpu}), ${process.platform}/${process.arch}`,
);

// ── (a) verify step ─────────────────────────────────────────────────────────────────────────────
const verifyResults: VerifySizeResult[] = [];
if (runVerify) {
  console.log(
    `\n(a) Verify step alone, same body bytes — median of ${verifyOptions.processes} process${verifyOptions.processes === 1 ? '' : 'es'} × ${verifyOptions.rounds} rounds ` +
      `of ~${verifyOptions.roundMs} ms, ${verifyOptions.pool} distinct messages cycled`,
  );
  console.log(
    '    ours = verifyMessage(raw, { keyring }): parse envelope, age, HMAC (hex) + timingSafeEqual, parse body',
  );
  console.log(
    '    stripe = stripe.webhooks.constructEvent(body, header, secret)   svix = new Webhook(secret).verify(body, headers)',
  );
  for (const size of SIZES) {
    if (sizes && !sizes.includes(size.label)) continue;
    const parts: VerifySamples[] = [];
    for (let p = 0; p < verifyOptions.processes; p++) parts.push(await runVerifyChild(size.label));
    verifyResults.push(summariseVerify(parts));
  }
  const rows: string[][] = [['body', 'verifier', 'ops/s', 'µs/op', 'ours ÷ this', '']];
  for (const r of verifyResults) {
    const line = (name: string, t: VerifyTiming, ratio: number | undefined, note = '') =>
      rows.push([
        r.size,
        name,
        fmtInt(t.opsPerSec),
        fmtFixed(t.usPerOp, 2),
        ratio === undefined ? '' : `${fmtFixed(ratio, 2)}×`,
        note,
      ]);
    line('ours', r.ours, undefined);
    line(
      'stripe',
      r.stripe,
      r.oursOverStripe,
      r.oursOverStripe >= VERIFY_GOAL ? 'goal met (≥ 1×)' : 'BELOW GOAL (< 1×)',
    );
    line('svix', r.svix, r.oursOverSvix);
    const f = r.oursOverFloor;
    const c = r.oursOverFloorCpu;
    const a = r.floorOverFloor;
    const spans = spansGoal(f, VERIFY_FLOOR_GOAL) ? ', the interval spans the goal' : '';
    line(
      'floor',
      r.floor,
      f.median,
      `${f.median >= VERIFY_FLOOR_GOAL ? 'goal met' : 'BELOW GOAL'} (≥ ${VERIFY_FLOOR_GOAL}${spans}); ${interval(f)}; ` +
        `by CPU ${fmtFixed(c.median, 2)} (${interval(c)}); A/A ${fmtFixed(a.median, 2)} (${interval(a)})`,
    );
  }
  console.log(table(rows));
  console.log('    ours ÷ this = ours ops/s ÷ that verifier ops/s (> 1 means ours is faster)');
  console.log(
    '    floor = bare: JSON.parse envelope, HMAC (KeyObject) + timingSafeEqual, JSON.parse body; ours ÷ floor = median of the rounds',
  );
  console.log(
    '    95 % = where the median of such rounds lies, 19 times in 20; A/A = the floor ÷ the floor timed again in the same slots',
  );
  console.log(
    '    (this run can tell ratios apart by about as much as the A/A median and interval stray from 1)',
  );
}

/** The verify section's rounds of one size in a fresh process (bench/verify-child.ts). */
function runVerifyChild(size: string): Promise<VerifySamples> {
  const { rounds, roundMs, warmupMs, pool } = verifyOptions;
  const args = [
    '--size',
    size,
    '--rounds',
    `${rounds}`,
    '--round-ms',
    `${roundMs}`,
    '--warmup-ms',
    `${warmupMs}`,
  ];
  return runChild<VerifySamples>('./verify-child.ts', [...args, '--pool', `${pool}`], 'verify bench');
}

/** Runs section (b) for one size in its own process (bench/pipeline-child.ts). */
function runPipelineChild(args: readonly string[]): Promise<PipelineSamples> {
  return runChild<PipelineSamples>('./pipeline-child.ts', args, 'pipeline bench');
}

/** Forks `script` (beside this file) with `args` and resolves with the one message it sends. */
function runChild<T>(script: string, args: readonly string[], what: string): Promise<T> {
  const childPath = fileURLToPath(new URL(script, import.meta.url));
  return new Promise<T>((resolve, reject) => {
    const child = fork(childPath, [...args], {
      execArgv: [...process.execArgv, '--expose-gc'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let got: T | undefined;
    child.on('message', (m) => {
      got = m as T;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (got) resolve(got);
      else reject(new Error(`${what} (${args.join(' ')}) exited with code ${code} and no result`));
    });
  });
}

// ── (b) pipeline vs floor ───────────────────────────────────────────────────────────────────────
const pipelineResults: PipelineSizeResult[] = [];
/** Done events already in the file of the pipeline's aged-table line. */
const AGED_TABLE_ROWS = 500_000;
let agedTable: PipelineSizeResult | undefined;
if (runPipeline) {
  console.log(
    `\n(b) Whole pipeline vs floor — events/s, median of ${PIPELINE_PROCESSES} process${PIPELINE_PROCESSES === 1 ? '' : 'es'} × the repetitions, ` +
      `fresh temp dir per run, concurrency ${CONCURRENCY}`,
  );
  console.log(
    '    pipeline = MemorySource({ endWhenEmpty }) → createConsumer(createSqliteDedupe, no-op handler), start() → stopped',
  );
  console.log(
    '    floor    = bare loop: JSON.parse, HMAC (KeyObject) + timingSafeEqual, JSON.parse, zod parse, INSERT ×N/tx',
  );
  console.log(
    "               (into a file the SQLite dedupe store created: same tables, index, page size, WAL; store's pragmas;",
  );
  console.log(
    '               N = as many events per transaction as the pipeline holds in flight, the most it can claim at once:',
  );
  console.log(
    `               ${CONCURRENCY}, or fewer where the default maxInFlightBytes (2 MiB) binds; printed below the table)`,
  );
  console.log(
    "    floor+c  = floor with the store's own claim and complete statements instead of the INSERT (SQLITE_STATEMENTS)",
  );
  for (const size of SIZES) {
    if (sizes && !sizes.includes(size.label)) continue;
    const plan = pipelinePlan[size.label] as PipelinePlan;
    const parts: PipelineSamples[] = [];
    for (let p = 0; p < PIPELINE_PROCESSES; p++) {
      parts.push(
        await runPipelineChild(
          pipelineChildArgs(size.label, plan, [
            '--control',
            // The tracing code's cost (OpenTelemetry API installed, no SDK): issue 16's 300 B row.
            ...(size.label === '300 B' ? ['--compare-tracing'] : []),
          ]),
        ),
      );
    }
    pipelineResults.push(summarisePipeline(parts));
  }
  const ev = (s: RunSeries | null) => (s ? fmtInt(s.eventsPerSec) : '—');
  const cpuUs = (s: RunSeries | null) => (s ? fmtFixed(s.cpuUsPerEvent, 1) : '—');
  /** "0.83 (0.78–0.88)": the median and its 95 % interval. */
  const ratioCell = (r: RatioSummary) =>
    `${fmtFixed(r.median, 2)} (${fmtFixed(r.low, 2)}–${fmtFixed(r.high, 2)})`;
  /** "met (≥ 0.7)", with a warning when the interval reaches across the goal. */
  const verdictOf = (r: RatioSummary, goal: number) =>
    `${r.median >= goal ? 'met' : 'BELOW'} (≥ ${goal}${spansGoal(r, goal) ? ', the interval spans it' : ''})`;
  const rows: string[][] = [
    [
      'body',
      'N × reps',
      'pipeline ev/s',
      'CPU µs/ev',
      'floor ev/s',
      'CPU µs/ev',
      'floor+c ev/s',
      'CPU µs/ev',
      '÷ floor (95 %)',
      'by CPU',
      '÷ floor+c (95 %)',
      'by CPU',
      'goals',
    ],
  ];
  for (const r of pipelineResults) {
    const q = r.ratios;
    const goalC = PIPELINE_CLAIM_COMPLETE_GOAL[r.size] ?? 0.85;
    rows.push([
      r.size,
      `${fmtInt(r.n)} × ${r.reps}`,
      ev(r.pipeline),
      cpuUs(r.pipeline),
      ev(r.floor),
      cpuUs(r.floor),
      ev(r.floorClaimComplete),
      cpuUs(r.floorClaimComplete),
      q ? ratioCell(q.floor.wall) : '—',
      q ? ratioCell(q.floor.cpu) : '—',
      q ? ratioCell(q.floorClaimComplete.wall) : '—',
      q ? ratioCell(q.floorClaimComplete.cpu) : '—',
      q ? `${verdictOf(q.floor.wall, PIPELINE_GOAL)} / ${verdictOf(q.floorClaimComplete.wall, goalC)}` : '',
    ]);
  }
  console.log(table(rows));
  for (const r of pipelineResults) {
    const t = r.ratios?.untraced;
    if (!t) continue;
    // Judged by CPU: the two runs do the same work, and events/s swings far more on a shared machine.
    console.log(
      `    tracing code at ${r.size} (OpenTelemetry API installed, no SDK): pipeline ÷ pipeline with tracing: false = ` +
        `${ratioCell(t.wall)}, by CPU ${ratioCell(t.cpu)}; goal by CPU: ${verdictOf(t.cpu, TRACING_GOAL)}`,
    );
  }
  const perSize = (cell: (r: PipelineSizeResult) => string | undefined) =>
    pipelineResults.flatMap((r) => {
      const text = cell(r);
      return text === undefined ? [] : [`${r.size} ${text}`];
    });
  const transactions = perSize((r) => `×${r.floorBatch}`);
  if (transactions.length > 0) console.log(`    the floors' transactions (N): ${transactions.join(', ')}`);
  // The floors run no code of the kit: how far their ratios stray is how far the machine's speed
  // moved during the run, which no change of the kit can cause or cure.
  const control = perSize((r) => (r.ratios?.control ? ratioCell(r.ratios.control.wall) : undefined));
  if (control.length > 0) {
    console.log(`    A/A control, floor ÷ the floor run again in the same repetition: ${control.join(', ')}`);
  }
  const apart = perSize((r) => (r.ratios ? ratioCell(r.ratios.floorsApart) : undefined));
  if (apart.length > 0) {
    console.log(
      `    the floors against each other, floor+c ÷ floor (no kit code in either): ${apart.join(', ')}`,
    );
  }
  const single = perSize((r) => {
    const q = r.ratios;
    if (!q) return undefined;
    const range = (x: RatioSummary) => `${fmtFixed(x.min, 2)}–${fmtFixed(x.max, 2)}`;
    return `÷ floor ${range(q.floor.wall)}, ÷ floor+c ${range(q.floorClaimComplete.wall)}`;
  });
  if (single.length > 0) console.log(`    single repetitions ranged: ${single.join('; ')}`);
  console.log(
    `    ratios are taken in each repetition (the sides back to back, their order reversed every other repetition) and pooled over ${PIPELINE_PROCESSES} fresh process${PIPELINE_PROCESSES === 1 ? '' : 'es'} per size;`,
  );
  console.log(
    '    median (95 % = where the median of such repetitions lies, 19 times in 20); goals by the median; "by CPU" = floor CPU µs/ev ÷ pipeline CPU µs/ev',
  );
  console.log(
    '    (this run can tell ratios apart by about as much as the A/A median and interval stray from 1)',
  );
  const spreadCell = (s: RunSeries | null) =>
    s ? `${fmtInt(Math.min(...s.runs))}–${fmtInt(Math.max(...s.runs))}` : '—';
  const mrows: string[][] = [
    [
      'body',
      'pipeline runs ev/s',
      'floor runs ev/s',
      'inputs',
      'RSS before',
      'peak RSS',
      'RSS growth',
      'conc × envelope',
      'growth − conc × env',
      'peak heap',
      'heap after GC',
      'heap per in-flight event',
    ],
  ];
  for (const r of pipelineResults) {
    const m = r.memory;
    const growth = m.peakRssBytes - m.rssBeforeBytes;
    const held = r.concurrency * m.envelopeBytes;
    mrows.push([
      r.size,
      spreadCell(r.pipeline),
      spreadCell(r.floor),
      fmtMiB(m.inputBytes),
      fmtMiB(m.rssBeforeBytes),
      fmtMiB(m.peakRssBytes),
      fmtMiB(growth),
      fmtMiB(held),
      fmtMiB(growth - held),
      fmtMiB(m.peakHeapUsedBytes),
      fmtMiB(m.heapUsedAfterGcBytes),
      `${fmtInt(m.heapPerInFlightBytes)} B (${fmtFixed(m.heapPerInFlightBytes / m.envelopeBytes, 2)}× envelope)`,
    ]);
  }
  console.log(
    `\n    Spread and memory (MiB; peaks sampled every 20 ms during the pipeline runs; of the process per size whose RSS grew most; heap per in-flight event: median of the processes; inputs are held by the source)`,
  );
  console.log(
    '    heap per in-flight event: events held in their handlers (≥ concurrency, ~8 MiB of envelopes), full GC, minus the same consumer after as many handled and let go, ÷ events held',
  );
  console.log(table(mrows));

  // Later in a worker's life: its file holds a retention's worth of done events, and each random
  // event id walks a deeper B-tree (docs/performance.md, SQLite dedupe). No goal: a reading.
  if (!quick && (!sizes || sizes.includes('300 B'))) {
    const aged = summarisePipeline([
      await runPipelineChild(
        pipelineChildArgs('300 B', { n: 20_000, warmup: 3000, reps: 4 }, [
          '--prefill',
          String(AGED_TABLE_ROWS),
        ]),
      ),
    ]);
    agedTable = aged;
    const q = aged.ratios;
    // Four repetitions: their extremes, not an interval (it would hold the median 7 times in 8).
    const extremes = (x: RatioSummary) =>
      `${fmtFixed(x.median, 2)} (${fmtFixed(x.min, 2)}–${fmtFixed(x.max, 2)})`;
    console.log(
      `\n    On a file already holding ${fmtInt(AGED_TABLE_ROWS)} done events (a copy per run), 300 B, median (min–max) of ${aged.reps}: ` +
        `pipeline ${ev(aged.pipeline)} ev/s, floor ${ev(aged.floor)}, floor+c ${ev(aged.floorClaimComplete)}; ` +
        `÷ floor ${q ? extremes(q.floor.wall) : '—'}, ÷ floor+c ${q ? extremes(q.floorClaimComplete.wall) : '—'}`,
    );
  }
}

// ── (c) dedupe stores alone ─────────────────────────────────────────────────────────────────────
let dedupeResults: DedupeBenchRow[] = [];
if (runDedupe) {
  console.log(
    '\n(c) Dedupe stores alone — claim + complete pairs/s; 64 in flight = group commit (SQLite) / pipelining (Redis)',
  );
  dedupeResults = await runDedupeBench({ quick });
  const base =
    dedupeResults.find((r) => r.store === 'sqlite' && r.mode === 'one at a time')?.pairsPerSec ?? 1;
  const drows: string[][] = [['store', 'mode', 'pairs/s', 'µs/pair', '÷ sqlite one at a time']];
  for (const r of dedupeResults) {
    drows.push([
      r.store,
      r.mode,
      fmtInt(r.pairsPerSec),
      fmtFixed(1e6 / r.pairsPerSec, 1),
      `${fmtFixed(r.pairsPerSec / base, 2)}×`,
    ]);
  }
  console.log(table(drows));
  if (!dedupeResults.some((r) => r.store === 'redis'))
    console.log('    (redis-server not installed: Redis rows skipped)');
}

// ── (d) the sidecar ─────────────────────────────────────────────────────────────────────────────
const sidecarResults: SidecarRow[] = [];
if (runSidecar) {
  const plan = quick ? { n: 3000, reps: 1 } : { n: 30_000, reps: 3 };
  const appDelayMs = Number(values['app-delay-ms']);
  const sidecarConcurrency = values['sidecar-concurrency']
    ? Number(values['sidecar-concurrency'])
    : CONCURRENCY;
  console.log(
    `\n(d) Sidecar: partner-events run --forward to an app in its own process (answers 200) — ${fmtInt(plan.n)} events, ` +
      `median of ${plan.reps}, --concurrency ${sidecarConcurrency}, SQLite dedupe, default log level` +
      (appDelayMs > 0 ? `, the app answers after ${appDelayMs} ms` : ''),
  );
  console.log(
    '    run file → forward    = run --source file:F (tsx, as a user runs it from the source); log debug: a line per acked event',
  );
  console.log(
    '    run file → handlers   = run --source file:F --handlers a no-op module (no forward; no floor)',
  );
  console.log(
    '    run ingress → forward = run --source http://…, 64 keep-alive senders in their own process, closed loop',
  );
  console.log(
    '    floor                 = the same operations bare: parse, HMAC + timingSafeEqual, parse, zod, SQLite claim,',
  );
  console.log(
    '                            POST over a keep-alive undici Pool, SQLite complete (writes of a turn in one tx)',
  );
  console.log(
    `    measured from the app's ${fmtInt(plan.n / 10)}-th to its ${fmtInt(plan.n)}-th request; CPU = the process's utime+stime`,
  );
  for (const size of SIZES) {
    if (sizes ? !sizes.includes(size.label) : size.label !== '300 B') continue;
    sidecarResults.push(
      ...(await runSidecarBench({
        ...plan,
        bytes: size.bytes,
        size: size.label,
        concurrency: sidecarConcurrency,
        appDelayMs,
      })),
    );
  }
  const floorOf = (r: SidecarRow) =>
    sidecarResults.find(
      (f) => f.size === r.size && f.row === (r.row.includes('file') ? 'floor file' : 'floor ingress'),
    );
  const srows: string[][] = [
    ['body', 'row', 'ev/s', 'CPU µs/ev', 'ev/s per core', '÷ floor', 'goal', '÷ floor by CPU', 'runs ev/s'],
  ];
  for (const r of sidecarResults) {
    const floor = floorOf(r);
    const isFloor = r.row.startsWith('floor') || r.row.includes('handlers');
    const ratio = !isFloor && floor ? r.eventsPerSec / floor.eventsPerSec : undefined;
    const goal = r.row.includes('file') ? SIDECAR_FILE_GOAL : SIDECAR_INGRESS_GOAL;
    srows.push([
      r.size,
      r.row,
      fmtInt(r.eventsPerSec),
      fmtFixed(r.cpuUsPerEvent, 1),
      fmtInt(1e6 / r.cpuUsPerEvent),
      ratio === undefined ? '' : fmtFixed(ratio, 2),
      ratio === undefined ? '' : `${ratio >= goal ? 'met' : 'BELOW'} (≥ ${goal})`,
      ratio === undefined || !floor ? '' : fmtFixed(floor.cpuUsPerEvent / r.cpuUsPerEvent, 2),
      r.runs.map((x) => fmtInt(x.eventsPerSec)).join(' / '),
    ]);
  }
  console.log(table(srows));
  const file300 = sidecarResults.find((r) => r.size === '300 B' && r.row === 'run file → forward');
  if (file300) {
    const perCore = 1e6 / file300.cpuUsPerEvent;
    console.log(
      `    run file → forward at 300 B: ${fmtInt(perCore)} events/s per core of CPU — ${perCore >= SIDECAR_PER_CORE_GOAL ? 'goal met' : 'BELOW GOAL'} (≥ ${fmtInt(SIDECAR_PER_CORE_GOAL)}); ` +
        `whole command incl. start and exit: ${fmtFixed((file300.wallMs ?? 0) / 1000, 2)} s`,
    );
  }
}

// ── (e) the Redis path (bench/redis.ts) ──────────────────────────────────────────────────────────
let redisResult: RedisBenchResult | undefined;
if (runRedis) redisResult = await runRedisSection({ quick });

// ── (f) serverless cold start ───────────────────────────────────────────────────────────────────
let serverlessResults: ServerlessRow[] = [];
if (runServerless) {
  const runs = quick ? 2 : 7;
  console.log(`\n(f) Serverless subpaths' cold start, from dist/ — median of ${runs} fresh processes each`);
  serverlessResults = await runServerlessBench({ runs });
  printServerlessRows(serverlessResults);
}

// ── (g) the console's dead-letter table (bench/console.ts) ───────────────────────────────────────
let consoleResult: ConsoleBenchResult | undefined;
if (runConsole) consoleResult = await runConsoleSection({ quick });

const totalSeconds = (performance.now() - t0) / 1000;
console.log(`\nTotal ${totalSeconds.toFixed(1)} s`);

const timingJson = (t: VerifyTiming) => ({ opsPerSec: sig(t.opsPerSec), usPerOp: sig(t.usPerOp) });
const summaryJson = (r: RatioSummary) => ({
  median: sig(r.median, 3),
  low: sig(r.low, 3),
  high: sig(r.high, 3),
  min: sig(r.min, 3),
  max: sig(r.max, 3),
});
const seriesJson = (s: RunSeries | null) =>
  s
    ? {
        eventsPerSec: sig(s.eventsPerSec),
        usPerEvent: sig(s.usPerEvent),
        runs: s.runs.map((x) => sig(x)),
        cpuUsPerEvent: sig(s.cpuUsPerEvent),
        cpuRuns: s.cpuRuns.map((x) => sig(x)),
      }
    : null;
console.log(
  JSON.stringify({
    bench: 'partner-health-events',
    quick,
    serverless: serverlessResults,
    node: process.version,
    cpus: availableParallelism(),
    cpuModel: cpu,
    date: new Date().toISOString(),
    totalSeconds: sig(totalSeconds, 3),
    goals: {
      verifyOursOverStripe: VERIFY_GOAL,
      verifyOursOverFloor: VERIFY_FLOOR_GOAL,
      pipelineOverFloor: PIPELINE_GOAL,
      pipelineOverFloorClaimComplete: PIPELINE_CLAIM_COMPLETE_GOAL,
      sidecarFileOverFloor: SIDECAR_FILE_GOAL,
      sidecarIngressOverFloor: SIDECAR_INGRESS_GOAL,
      sidecarFileEventsPerCore: SIDECAR_PER_CORE_GOAL,
    },
    sidecar: sidecarResults.map((r) => ({
      size: r.size,
      row: r.row,
      n: r.n,
      eventsPerSec: sig(r.eventsPerSec),
      cpuUsPerEvent: sig(r.cpuUsPerEvent),
      runs: r.runs.map((x) => ({ eventsPerSec: sig(x.eventsPerSec), cpuUsPerEvent: sig(x.cpuUsPerEvent) })),
      ...(r.wallMs === undefined ? {} : { wallMs: sig(r.wallMs) }),
    })),
    redis: redisJson(redisResult),
    console: consoleJson(consoleResult),
    dedupe: dedupeResults.map((r) => ({ store: r.store, mode: r.mode, pairsPerSec: sig(r.pairsPerSec) })),
    verify: verifyResults.map((r) => ({
      size: r.size,
      bodyBytes: r.bodyBytes,
      ours: timingJson(r.ours),
      stripe: timingJson(r.stripe),
      svix: timingJson(r.svix),
      oursOverStripe: sig(r.oursOverStripe, 3),
      oursOverSvix: sig(r.oursOverSvix, 3),
      floor: timingJson(r.floor),
      oursOverFloor: summaryJson(r.oursOverFloor),
      goalMet: r.oursOverStripe >= VERIFY_GOAL,
      oursOverFloorCpu: summaryJson(r.oursOverFloorCpu),
      floorOverFloor: summaryJson(r.floorOverFloor),
      floorGoalMet: r.oursOverFloor.median >= VERIFY_FLOOR_GOAL,
    })),
    pipeline: pipelineResults.map((r) => ({
      size: r.size,
      bodyBytes: r.bodyBytes,
      n: r.n,
      reps: r.reps,
      concurrency: r.concurrency,
      floorBatch: r.floorBatch,
      pipeline: seriesJson(r.pipeline),
      floor: seriesJson(r.floor),
      floorClaimComplete: seriesJson(r.floorClaimComplete),
      processes: r.processes,
      pipelineOverFloor:
        r.pipeline && r.floor ? sig(r.pipeline.eventsPerSec / r.floor.eventsPerSec, 3) : null,
      pipelineOverFloorClaimComplete:
        r.pipeline && r.floorClaimComplete
          ? sig(r.pipeline.eventsPerSec / r.floorClaimComplete.eventsPerSec, 3)
          : null,
      ratios: r.ratios
        ? {
            floorWall: summaryJson(r.ratios.floor.wall),
            floorCpu: summaryJson(r.ratios.floor.cpu),
            floorClaimCompleteWall: summaryJson(r.ratios.floorClaimComplete.wall),
            floorClaimCompleteCpu: summaryJson(r.ratios.floorClaimComplete.cpu),
            floorsApart: summaryJson(r.ratios.floorsApart),
            ...(r.ratios.control ? { control: summaryJson(r.ratios.control.wall) } : {}),
            ...(r.ratios.untraced
              ? {
                  untracedWall: summaryJson(r.ratios.untraced.wall),
                  untracedCpu: summaryJson(r.ratios.untraced.cpu),
                }
              : {}),
          }
        : null,
      goalMet: r.ratios ? r.ratios.floor.wall.median >= PIPELINE_GOAL : null,
      claimCompleteGoalMet: r.ratios
        ? r.ratios.floorClaimComplete.wall.median >= (PIPELINE_CLAIM_COMPLETE_GOAL[r.size] ?? 0.85)
        : null,
      memoryMiB: {
        inputs: sig(r.memory.inputBytes / 2 ** 20, 3),
        rssBefore: sig(r.memory.rssBeforeBytes / 2 ** 20, 3),
        peakRss: sig(r.memory.peakRssBytes / 2 ** 20, 3),
        heapUsedBefore: sig(r.memory.heapUsedBeforeBytes / 2 ** 20, 3),
        peakHeapUsed: sig(r.memory.peakHeapUsedBytes / 2 ** 20, 3),
        heapUsedAfterGc: sig(r.memory.heapUsedAfterGcBytes / 2 ** 20, 3),
        heapPerInFlightBytes: sig(r.memory.heapPerInFlightBytes, 3),
        envelopeBytes: r.memory.envelopeBytes,
      },
    })),
    pipelineOnAgedTable: agedTable
      ? {
          doneEventsAlready: AGED_TABLE_ROWS,
          size: agedTable.size,
          n: agedTable.n,
          reps: agedTable.reps,
          pipeline: seriesJson(agedTable.pipeline),
          floor: seriesJson(agedTable.floor),
          floorClaimComplete: seriesJson(agedTable.floorClaimComplete),
          ratios: agedTable.ratios
            ? {
                floorWall: summaryJson(agedTable.ratios.floor.wall),
                floorClaimCompleteWall: summaryJson(agedTable.ratios.floorClaimComplete.wall),
              }
            : null,
        }
      : null,
  }),
);
