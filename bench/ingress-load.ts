/**
 * The HTTP ingress under a fixed offered load: `partner-events run --source http://… --forward
 * APP` (defaults: concurrency 16, SQLite dedupe, default log level) with the app answering 200 in
 * its own process, and an open-loop sender in its own process (bench/sidecar-load.ts): `rate`
 * new envelopes per second for `seconds`, over `connections` keep-alive connections. Latency
 * counts from when a request was due, so a sender waiting for a free connection shows as latency.
 *
 * The ingress takes `concurrency` requests at a time and lets `concurrency × 8` more wait; past
 * that it answers 503 BUSY. With 64 keep-alive connections at most 64 requests are ever at the
 * ingress, so the steps with more connections show where 503 starts.
 *
 *   npm run bench:ingress                               the default steps (~2.5 minutes)
 *   npm run bench:ingress -- --steps 2000x64,5000x64 --seconds 30
 *
 * Prints a table, then one JSON line with every figure. Linux only (reads /proc/PID/stat).
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { OUR_SECRET } from './fixtures.js';
import type { LoadReport } from './sidecar-load.js';
import { fmtFixed, fmtInt, sig, table } from './stats.js';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '2000x64,5000x64,10000x64,10000x256' },
    seconds: { type: 'string', default: '30' },
    'warmup-seconds': { type: 'string', default: '5' },
    concurrency: { type: 'string', default: '16' },
  },
});
const steps = values.steps.split(',').map((step) => {
  const [rate, connections] = step.split('x').map(Number);
  if (!rate || !connections) throw new Error(`--steps: "${step}" is not RATExCONNECTIONS`);
  return { rate, connections };
});
const seconds = Number(values.seconds);
const warmupSeconds = Number(values['warmup-seconds']);
const concurrency = Number(values.concurrency);
const MAIN = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

function cpuOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

function message<T>(child: ChildProcess, pick: (m: unknown) => T | undefined): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: unknown) => {
      const value = pick(m);
      if (value === undefined) return;
      child.off('message', onMessage);
      resolve(value);
    };
    child.on('message', onMessage);
    child.once('exit', (code) => reject(new Error(`child exited ${code}`)));
  });
}

const exited = (child: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function listening(port: number, child: ChildProcess): Promise<void> {
  for (;;) {
    if (child.exitCode !== null) throw new Error(`sidecar exited ${child.exitCode} before listening`);
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

interface StepResult {
  readonly rate: number;
  readonly connections: number;
  readonly report: LoadReport;
  readonly okPerSec: number;
  readonly sidecarCpuPercent: number;
  readonly sidecarCpuUsPerRequest: number;
}

const app = fork(here('./sidecar-app.ts'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
const appPort = await message(app, (m) => (m as { listening?: number }).listening);
const results: StepResult[] = [];
console.log(
  `HTTP ingress under load — node ${process.version}, ${availableParallelism()} cpu, run --concurrency ${concurrency} ` +
    `(BUSY past ${concurrency} + ${concurrency * 8} waiting), ${warmupSeconds} s warm-up + ${seconds} s per step, 300 B bodies`,
);
try {
  for (const step of steps) {
    const dir = mkdtempSync(join(tmpdir(), 'phe-bench-ingress-'));
    const port = await freePort();
    const env: NodeJS.ProcessEnv = { ...process.env, PARTNER_EVENTS_SIGNING_SECRET: OUR_SECRET };
    delete env.LOG_LEVEL;
    const sidecar = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        MAIN,
        'run',
        '--source',
        `http://127.0.0.1:${port}/events`,
        '--forward',
        `http://127.0.0.1:${appPort}/hook`,
        '--dedupe',
        `sqlite:${join(dir, 'd.db')}`,
        '--dead-letter',
        join(dir, 'dead.jsonl'),
        '--concurrency',
        String(concurrency),
        '--no-ops',
      ],
      { env, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    sidecar.stdout?.resume(); // logs to a pipe, as in a container, dropped
    try {
      await listening(port, sidecar);
      const load = fork(
        here('./sidecar-load.ts'),
        [
          '--url',
          `http://127.0.0.1:${port}/events`,
          '--connections',
          String(step.connections),
          '--rate',
          String(step.rate),
          '--seconds',
          String(seconds),
          '--warmup-seconds',
          String(warmupSeconds),
        ],
        { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
      );
      const reported = message(load, (m) =>
        (m as { sent?: number }).sent === undefined ? undefined : (m as LoadReport),
      );
      await message(load, (m) => (m as { measuring?: boolean }).measuring);
      const cpuBefore = cpuOf(sidecar.pid as number);
      const started = performance.now();
      const report = await reported;
      const cpuUs = cpuOf(sidecar.pid as number) - cpuBefore;
      const wallMs = performance.now() - started;
      const ok = report.statuses['200'] ?? 0;
      results.push({
        ...step,
        report,
        okPerSec: (ok / report.elapsedMs) * 1000,
        sidecarCpuPercent: (cpuUs / 1000 / wallMs) * 100,
        sidecarCpuUsPerRequest: cpuUs / report.sent,
      });
    } finally {
      sidecar.kill('SIGTERM');
      await exited(sidecar);
      rmSync(dir, { recursive: true, force: true });
    }
  }
} finally {
  app.disconnect();
  await exited(app);
}

const rows: string[][] = [
  [
    'offered/s',
    'conns',
    'sent',
    '200/s',
    'p50 ms',
    'p99 ms',
    'max ms',
    '503',
    '503 codes',
    'other',
    'sidecar CPU',
  ],
];
for (const r of results) {
  const { statuses, codes503, latencyMs } = r.report;
  const other = Object.entries(statuses)
    .filter(([status]) => status !== '200' && status !== '503')
    .map(([status, count]) => `${status}:${count}`)
    .join(' ');
  rows.push([
    fmtInt(r.rate),
    String(r.connections),
    fmtInt(r.report.sent),
    fmtInt(r.okPerSec),
    fmtFixed(latencyMs?.p50 ?? 0, 1),
    fmtFixed(latencyMs?.p99 ?? 0, 1),
    fmtFixed(latencyMs?.max ?? 0, 0),
    fmtInt(statuses['503'] ?? 0),
    Object.entries(codes503)
      .map(([code, count]) => `${code}:${count}`)
      .join(' '),
    other,
    `${fmtInt(r.sidecarCpuPercent)} % (${fmtFixed(r.sidecarCpuUsPerRequest, 0)} µs/req)`,
  ]);
}
console.log(table(rows));
console.log(
  JSON.stringify({
    bench: 'ingress-load',
    node: process.version,
    cpus: availableParallelism(),
    date: new Date().toISOString(),
    concurrency,
    seconds,
    warmupSeconds,
    steps: results.map((r) => ({
      rate: r.rate,
      connections: r.connections,
      sent: r.report.sent,
      okPerSec: sig(r.okPerSec),
      statuses: r.report.statuses,
      codes503: r.report.codes503,
      latencyMs: r.report.latencyMs && {
        p50: sig(r.report.latencyMs.p50),
        p90: sig(r.report.latencyMs.p90),
        p99: sig(r.report.latencyMs.p99),
        max: sig(r.report.latencyMs.max),
      },
      maxOutstanding: r.report.maxOutstanding,
      sidecarCpuPercent: sig(r.sidecarCpuPercent, 3),
      sidecarCpuUsPerRequest: sig(r.sidecarCpuUsPerRequest, 3),
    })),
  }),
);
