/**
 * Section (d): the sidecar's own path, `partner-events run --forward`, as processes talk to each
 * other: the app (bench/sidecar-app.ts) answers 200 in its own process; the sidecar is the CLI
 * as a user starts it (from the source via tsx, default log level, SQLite dedupe in a fresh temp
 * dir, `--concurrency 64`); HTTP senders (bench/sidecar-load.ts) run in their own process.
 *
 *   run file → forward     `run --source file:F --forward APP` (and again with `--log-level debug`:
 *                          a line per acked event, which the default level only counts)
 *   run file → handlers    `run --source file:F --handlers` a no-op module (bench/sidecar-handlers.ts)
 *   floor file             the same operations in one bare loop (bench/sidecar-floor.ts)
 *   run ingress → forward  `run --source http://…` driven by 64 keep-alive senders, closed loop
 *   floor ingress          a bare node:http server doing the same, driven the same way
 *
 * Throughput and CPU are taken between the app's N/10-th and N-th request (start-up, JIT warm-up
 * and shutdown left out): events/s from the wall clock, CPU per event from the measured
 * process's utime + stime (/proc/PID/stat, so Linux only; the floor file row times itself).
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeEnvelopes, OUR_SECRET } from './fixtures.js';
import type { LoadReport } from './sidecar-load.js';
import { median } from './stats.js';

const MAIN = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));
const CLOCK_TICK_US = 10_000; // USER_HZ = 100 on Linux

export type SidecarRowName =
  | 'run file → forward'
  | 'run file → forward, log debug'
  | 'run file → handlers (no-op)'
  | 'floor file'
  | 'run ingress → forward'
  | 'floor ingress';

export interface SidecarRow {
  readonly row: SidecarRowName;
  readonly size: string;
  readonly n: number;
  /** Median over the repetitions. */
  readonly eventsPerSec: number;
  readonly cpuUsPerEvent: number;
  readonly runs: readonly { eventsPerSec: number; cpuUsPerEvent: number }[];
  /** File rows of `run`: the whole command, start to exit, ms (median). */
  readonly wallMs?: number;
}

export interface SidecarBenchOptions {
  readonly n: number;
  readonly reps: number;
  readonly bytes: number;
  readonly size: string;
  readonly concurrency: number;
  /** How long the app takes to answer each request, ms (default 0). */
  readonly appDelayMs?: number;
}

/** utime + stime of a live process, µs. */
export function cpuOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // After the name: state is field 3, utime 14, stime 15 (1-based over the whole line).
  return (Number(fields[11]) + Number(fields[12])) * CLOCK_TICK_US;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

function once<T>(child: ChildProcess, pick: (message: unknown) => T | undefined): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: unknown) => {
      const value = pick(message);
      if (value === undefined) return;
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(value);
    };
    const onExit = (code: number | null) => reject(new Error(`child exited (${code}) before answering`));
    child.on('message', onMessage);
    child.on('exit', onExit);
  });
}

export const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });

/** The app process and the marks it reports. */
export async function startApp(delayMs: number) {
  const child = fork(here('./sidecar-app.ts'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const port = await once(child, (m) => (m as { listening?: number }).listening);
  return {
    url: `http://127.0.0.1:${port}/hook`,
    /**
     * Counts requests from zero again; resolves `from` and `to` with what `measure()` returns the
     * moment the app reports its `fromN`-th and `toN`-th request (the measured process keeps
     * running meanwhile).
     */
    async arm<T>(
      fromN: number,
      toN: number,
      measure: () => T,
    ): Promise<{ from: Promise<T>; to: Promise<T> }> {
      const marks = fromN > 0 ? [fromN, toN] : [toN];
      let resolveFrom!: (value: T) => void;
      let resolveTo!: (value: T) => void;
      const from = new Promise<T>((resolve) => {
        resolveFrom = resolve;
      });
      const to = new Promise<T>((resolve) => {
        resolveTo = resolve;
      });
      const onMessage = (message: unknown) => {
        const mark = (message as { mark?: number }).mark;
        if (mark === fromN) resolveFrom(measure());
        if (mark === toN) {
          resolveTo(measure());
          child.off('message', onMessage);
        }
      };
      child.on('message', onMessage);
      child.send({ marks, delayMs });
      await once(child, (m) => (m as { ready?: boolean }).ready);
      return { from, to };
    },
    /** Counts requests from zero again, with no marks. */
    async reset(): Promise<void> {
      child.send({ marks: [], delayMs });
      await once(child, (m) => (m as { ready?: boolean }).ready);
    },
    close: async () => {
      child.disconnect();
      await exited(child);
    },
  };
}

export function startSidecar(args: string[], extraEnv: NodeJS.ProcessEnv = {}): ChildProcess {
  const env: NodeJS.ProcessEnv = { ...process.env, PARTNER_EVENTS_SIGNING_SECRET: OUR_SECRET, ...extraEnv };
  delete env.LOG_LEVEL; // the default level, as deployed
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'run', ...args], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // Logs go to a pipe, as in a container; read and dropped (stderr kept for a failure's report).
  child.stdout?.resume();
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    stderr = (stderr + d).slice(-4000);
  });
  child.on('exit', (code) => {
    if (code !== 0 && code !== null) process.stderr.write(`sidecar exited ${code}: ${stderr}\n`);
  });
  return child;
}

interface Sample {
  at: number;
  cpu: number;
}

function rate(n: number, from: Sample, to: Sample) {
  return {
    eventsPerSec: (n / (to.at - from.at)) * 1000,
    cpuUsPerEvent: (to.cpu - from.cpu) / n,
  };
}

/** One repetition of each row, interleaved, fresh files and stores each time. */
async function repetition(options: SidecarBenchOptions, app: Awaited<ReturnType<typeof startApp>>) {
  const dir = mkdtempSync(join(tmpdir(), 'phe-bench-sidecar-'));
  const warm = Math.floor(options.n / 10);
  const window = options.n - warm;
  const result: Partial<
    Record<SidecarRowName, { eventsPerSec: number; cpuUsPerEvent: number; wallMs?: number }>
  > = {};
  try {
    const file = join(dir, 'events.jsonl');
    const fresh = () => writeFileSync(file, `${makeEnvelopes(options.bytes, options.n).join('\n')}\n`);
    const common = ['--forward', app.url, '--concurrency', String(options.concurrency), '--no-ops'];

    // run file → forward, at the default log level (a summary a minute) and at debug (a line per event)
    for (const [row, extra] of [
      ['run file → forward', []],
      ['run file → forward, log debug', ['--log-level', 'debug']],
    ] as const) {
      fresh();
      let pid = 0;
      const { from, to } = await app.arm(warm, options.n, () => ({ at: performance.now(), cpu: cpuOf(pid) }));
      const started = performance.now();
      const child = startSidecar([
        '--source',
        `file:${file}`,
        '--dedupe',
        `sqlite:${join(dir, `${extra.length}-file.db`)}`,
        '--dead-letter',
        join(dir, 'dead-file.jsonl'),
        ...common,
        ...extra,
      ]);
      pid = child.pid as number;
      const a = await from;
      const b = await to;
      const code = await exited(child);
      if (code !== 0) throw new Error(`${row} exited ${code}`);
      result[row] = { ...rate(window, a, b), wallMs: performance.now() - started };
    }

    // run file → handlers: a no-op module, which reports its own marks (no app request to count)
    {
      fresh();
      const child = startSidecar(
        [
          '--source',
          `file:${file}`,
          '--dedupe',
          `sqlite:${join(dir, 'handlers.db')}`,
          '--dead-letter',
          join(dir, 'dead-handlers.jsonl'),
          '--handlers',
          here('./sidecar-handlers.ts'),
          '--concurrency',
          String(options.concurrency),
          '--no-ops',
        ],
        { PHE_BENCH_MARKS: `${warm},${options.n}` },
      );
      const marks: { cpuUs: number; atMs: number }[] = [];
      let text = '';
      child.stderr?.on('data', (d: string) => {
        text += d;
        for (const match of text.matchAll(/^PHE_BENCH_MARK (.*)$/gm))
          marks.push(JSON.parse(match[1] as string));
        text = text.slice(text.lastIndexOf('\n') + 1);
      });
      const code = await exited(child);
      const [a, b] = marks;
      if (code !== 0 || !a || !b)
        throw new Error(`run file → handlers exited ${code} with ${marks.length} marks`);
      result['run file → handlers (no-op)'] = rate(
        window,
        { at: a.atMs, cpu: a.cpuUs },
        { at: b.atMs, cpu: b.cpuUs },
      );
    }

    // floor file
    {
      await app.reset();
      const child = fork(
        here('./sidecar-floor.ts'),
        [
          '--mode',
          'file',
          '--app',
          app.url,
          '--db',
          join(dir, 'floor-file.db'),
          '--file',
          file,
          '--concurrency',
          String(options.concurrency),
          '--warm',
          String(warm),
        ],
        { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
      );
      const report = await once(child, (m) => m as { events: number; ms: number; cpuUs: number });
      await exited(child);
      result['floor file'] = {
        eventsPerSec: (report.events / report.ms) * 1000,
        cpuUsPerEvent: report.cpuUs / report.events,
      };
    }

    // run ingress → forward, then floor ingress: the same sender, closed loop
    for (const row of ['run ingress → forward', 'floor ingress'] as const) {
      fresh();
      const port = await freePort();
      const ingress = `http://127.0.0.1:${port}/events`;
      let child: ChildProcess;
      if (row === 'run ingress → forward') {
        child = startSidecar([
          '--source',
          ingress,
          '--dedupe',
          `sqlite:${join(dir, 'run-ingress.db')}`,
          '--dead-letter',
          join(dir, 'dead-ingress.jsonl'),
          ...common,
        ]);
        await waitForPort(port, child);
      } else {
        child = fork(
          here('./sidecar-floor.ts'),
          [
            '--mode',
            'ingress',
            '--app',
            app.url,
            '--db',
            join(dir, 'floor-ingress.db'),
            '--port',
            String(port),
            '--concurrency',
            String(options.concurrency),
          ],
          { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
        );
        await once(child, (m) => (m as { listening?: boolean }).listening);
      }
      const pid = child.pid as number;
      const { from, to } = await app.arm(warm, options.n, () => ({ at: performance.now(), cpu: cpuOf(pid) }));
      const load = fork(
        here('./sidecar-load.ts'),
        ['--url', ingress, '--connections', '64', '--file', file],
        {
          stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        },
      );
      const report = await once(load, (m) => m as LoadReport);
      const a = await from;
      const b = await to;
      if ((report.statuses['200'] ?? 0) !== options.n)
        throw new Error(`${row}: answers ${JSON.stringify(report.statuses)}`);
      result[row] = rate(window, a, b);
      if (row === 'run ingress → forward') child.kill('SIGTERM');
      else child.disconnect();
      await exited(child);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return result;
}

/** Resolves once something accepts connections on `port` (the sidecar logs it; polling is simpler here). */
async function waitForPort(port: number, child: ChildProcess): Promise<void> {
  const { connect } = await import('node:net');
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

export async function runSidecarBench(options: SidecarBenchOptions): Promise<SidecarRow[]> {
  const app = await startApp(options.appDelayMs ?? 0);
  const runs: Awaited<ReturnType<typeof repetition>>[] = [];
  try {
    for (let r = 0; r < options.reps; r++) runs.push(await repetition(options, app));
  } finally {
    await app.close();
  }
  const names: SidecarRowName[] = [
    'run file → forward',
    'run file → forward, log debug',
    'run file → handlers (no-op)',
    'floor file',
    'run ingress → forward',
    'floor ingress',
  ];
  return names.map((row) => {
    const series = runs.map((r) => r[row]).filter((x) => x !== undefined);
    const walls = series.map((s) => s.wallMs).filter((x) => x !== undefined);
    return {
      row,
      size: options.size,
      n: options.n,
      eventsPerSec: median(series.map((s) => s.eventsPerSec)),
      cpuUsPerEvent: median(series.map((s) => s.cpuUsPerEvent)),
      runs: series.map((s) => ({ eventsPerSec: s.eventsPerSec, cpuUsPerEvent: s.cpuUsPerEvent })),
      ...(walls.length > 0 ? { wallMs: median(walls) } : {}),
    };
  });
}
