/**
 * `npm run bench:scale` — more than one core: 1 and 2 `partner-events run` processes on ONE fauxqs
 * queue, sharing one SQLite file, and again sharing one Redis, forwarding to an app in its own
 * process. Node runs a consumer on one core; a partner uses more by running more processes on the
 * same queue with a shared dedupe store (docs/performance.md, "More than one core").
 *
 * Each run gets a fresh queue preloaded (untimed) with N signed envelopes of 300 B bodies; the
 * workers start together; events/s is taken between the app's N/10-th and N-th request (start-up
 * left out), CPU per event from each process's utime + stime over the same window (Linux). The
 * 1- and 2-worker runs alternate within each repetition; "2 ÷ 1" is taken per repetition.
 *
 *   npm run bench:scale
 *   npm run bench:scale -- --n 10000 --reps 2 --stores sqlite
 *
 * Prints a table, then one JSON line with every figure (the last line of output).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { fauxqsClient, fauxqsEnv } from '../test/support/fauxqs.js';
import { preloadedQueue, startFauxqsChild } from './fauxqs.js';
import { makeEnvelopes } from './fixtures.js';
import { cpuOf, exited, freePort, startApp, startSidecar } from './sidecar.js';
import { fmtFixed, fmtInt, median, sig, table } from './stats.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '20000' },
    reps: { type: 'string', default: '3' },
    workers: { type: 'string', default: '1,2' },
    stores: { type: 'string', default: 'sqlite,redis' },
    concurrency: { type: 'string', default: '64' },
  },
});

interface Run {
  readonly eventsPerSec: number;
  /** CPU of all workers per event, µs. */
  readonly workerCpuUs: number;
  readonly fauxqsCpuUs: number;
  readonly load: number;
}

const n = Number(values.n);
const reps = Number(values.reps);
const workerCounts = values.workers.split(',').map(Number);
const concurrency = Number(values.concurrency);

const cpu = cpus()[0]?.model ?? 'unknown cpu';
console.log(
  `partner-health-events bench:scale — node ${process.version}, ${availableParallelism()} cpu (${cpu}); ` +
    `${fmtInt(n)} events of 300 B per run, --concurrency ${concurrency} per worker, ${reps} rep(s)`,
);
console.log(
  '    workers = partner-events run --source sqs:QUEUE --forward APP --dedupe STORE (tsx, default log level); ' +
    'fauxqs and the app each in their own process, on the same cores',
);

const fauxqs = await startFauxqsChild();
const redis = values.stores.includes('redis') ? await startRedis() : undefined;
const app = await startApp(0);
const client = fauxqsClient(fauxqs.endpoint);
const stores = values.stores.split(',').filter((s) => s !== 'redis' || redis !== undefined);
const results = new Map<string, Run[]>();
const dir = mkdtempSync(join(tmpdir(), 'phe-bench-scale-'));
try {
  for (let r = 0; r < reps; r++) {
    for (const store of stores) {
      for (const workers of workerCounts) {
        const spec =
          store === 'sqlite' ? `sqlite:${join(dir, `r${r}-w${workers}.db`)}` : `${redis?.url}/${r % 16}`;
        const run = await runOnce(workers, spec);
        const key = `${store}|${workers}`;
        results.set(key, [...(results.get(key) ?? []), run]);
        console.log(
          `    rep ${r + 1} ${store} ×${workers}: ${fmtInt(run.eventsPerSec)} ev/s, workers ${fmtFixed(run.workerCpuUs, 1)} µs/ev, load ${fmtFixed(run.load, 1)}`,
        );
      }
    }
  }
} finally {
  client.destroy();
  await app.close();
  await fauxqs.close();
  redis?.stop();
  rmSync(dir, { recursive: true, force: true });
}

const rows: string[][] = [
  ['store', 'workers', 'ev/s', 'runs ev/s', 'worker CPU µs/ev', 'fauxqs CPU µs/ev', '÷ 1 worker (min–max)'],
];
const summary: object[] = [];
for (const store of stores) {
  const one = results.get(`${store}|1`) ?? [];
  for (const workers of workerCounts) {
    const runs = results.get(`${store}|${workers}`) ?? [];
    const perRep = runs.map((x, i) => x.eventsPerSec / (one[i]?.eventsPerSec ?? Number.NaN));
    const ratio = { median: median(perRep), min: Math.min(...perRep), max: Math.max(...perRep) };
    rows.push([
      store,
      String(workers),
      fmtInt(median(runs.map((x) => x.eventsPerSec))),
      runs.map((x) => fmtInt(x.eventsPerSec)).join(' / '),
      fmtFixed(median(runs.map((x) => x.workerCpuUs)), 1),
      fmtFixed(median(runs.map((x) => x.fauxqsCpuUs)), 1),
      workers === 1
        ? ''
        : `${fmtFixed(ratio.median, 2)} (${fmtFixed(ratio.min, 2)}–${fmtFixed(ratio.max, 2)})`,
    ]);
    summary.push({
      store,
      workers,
      eventsPerSec: sig(median(runs.map((x) => x.eventsPerSec))),
      runs: runs.map((x) => ({
        eventsPerSec: sig(x.eventsPerSec),
        workerCpuUs: sig(x.workerCpuUs),
        fauxqsCpuUs: sig(x.fauxqsCpuUs),
        load: sig(x.load, 3),
      })),
      overOneWorker:
        workers === 1
          ? null
          : { median: sig(ratio.median, 3), min: sig(ratio.min, 3), max: sig(ratio.max, 3) },
    });
  }
}
console.log(table(rows));
if (!redis && values.stores.includes('redis'))
  console.log('    (redis-server not installed: Redis rows skipped)');
console.log(
  JSON.stringify({
    bench: 'scale',
    node: process.version,
    cpus: availableParallelism(),
    n,
    reps,
    concurrency,
    results: summary,
  }),
);

/** One run: a fresh preloaded queue, `workers` processes started together, measured by the app. */
async function runOnce(workers: number, dedupe: string): Promise<Run> {
  const queue = await preloadedQueue(client, 'scale', makeEnvelopes(300, n));
  const warm = Math.floor(n / 10);
  let pids: number[] = [];
  const sample = () => ({
    at: performance.now(),
    workers: pids.reduce((sum, pid) => sum + cpuOf(pid), 0),
    fauxqs: cpuOf(fauxqs.pid),
  });
  const { from, to } = await app.arm(warm, n, sample);
  const children: ChildProcess[] = [];
  for (let w = 0; w < workers; w++) {
    children.push(
      startSidecar(
        [
          '--source',
          `sqs:${queue.url}`,
          '--forward',
          app.url,
          '--dedupe',
          dedupe,
          '--dead-letter',
          join(dir, `dead-${w}.jsonl`),
          '--concurrency',
          String(concurrency),
          '--no-ops',
        ],
        fauxqsEnv(fauxqs.endpoint),
      ),
    );
  }
  pids = children.map((c) => c.pid as number);
  const a = await from;
  const b = await to;
  for (const child of children) child.kill('SIGTERM');
  await Promise.all(children.map(exited));
  const window = n - warm;
  return {
    eventsPerSec: (window / (b.at - a.at)) * 1000,
    workerCpuUs: (b.workers - a.workers) / window,
    fauxqsCpuUs: (b.fauxqs - a.fauxqs) / window,
    load: loadavg()[0] ?? 0,
  };
}

/** redis-server on a free loopback port without persistence; undefined when it is not installed. */
async function startRedis(): Promise<{ url: string; stop(): void } | undefined> {
  const port = await freePort();
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const ready = await new Promise<boolean>((resolve) => {
    child.once('error', () => resolve(false));
    child.stdout?.setEncoding('utf8').on('data', (d: string) => {
      if (d.includes('Ready to accept connections')) resolve(true);
    });
  });
  if (!ready) return undefined;
  child.stdout?.resume();
  return { url: `redis://127.0.0.1:${port}`, stop: () => child.kill('SIGTERM') };
}
