/**
 * Worker processes of the reliability suites: started from `support/worker.ts`, stopped only by
 * the PID we started (SIGKILL for a crash, SIGTERM for a graceful stop).
 *
 * Start-up matters when a worker is killed and restarted twenty times: through the tsx loader a
 * worker needs ~1.4 s to import the SDKs, from a bundle ~0.4 s. So the worker is bundled with
 * esbuild (already installed: tsx and tsup are built on it), its packages left external and
 * resolved from the repository's node_modules; without esbuild it runs through tsx.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SidecarConfig } from './worker.js';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const WORKER_TS = fileURLToPath(new URL('./worker.ts', import.meta.url));

let command: Promise<string[]> | undefined;

/**
 * Node arguments that run the worker: a bundle when esbuild is there, else tsx. The bundle is
 * named by its content hash, so processes share it and a stale one is never run; bundles of
 * older sources that nobody touched for a day are removed.
 */
export function workerCommand(): Promise<string[]> {
  command ??= (async () => {
    try {
      const { build } = await import('esbuild');
      const result = await build({
        entryPoints: [WORKER_TS],
        bundle: true,
        platform: 'node',
        format: 'esm',
        target: 'node20',
        packages: 'external',
        write: false,
        outdir: 'out',
        logLevel: 'warning',
      });
      const code = result.outputFiles[0]?.contents;
      if (!code) throw new Error('esbuild produced no output');
      // Inside the repository (.tmp/ is git- and biome-ignored), so bare imports resolve.
      const dir = join(ROOT, '.tmp', 'reliability');
      mkdirSync(dir, { recursive: true });
      const hash = createHash('sha256').update(code).digest('hex').slice(0, 16);
      const file = join(dir, `worker-${hash}.mjs`);
      if (!existsSync(file)) {
        const partial = `${file}.${process.pid}.tmp`;
        writeFileSync(partial, code);
        renameSync(partial, file); // atomic: a concurrent run sees all of it or nothing
      }
      const dayAgo = Date.now() - 86_400_000;
      for (const name of readdirSync(dir)) {
        const path = join(dir, name);
        if (path !== file && name.startsWith('worker-') && statSync(path).mtimeMs < dayAgo)
          rmSync(path, { force: true });
      }
      utimesSync(file, new Date(), new Date());
      return [file];
    } catch {
      return ['--import', 'tsx', WORKER_TS];
    }
  })();
  return command;
}

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** One worker process; its stdout and stderr are appended to `logPath`. */
export class WorkerProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly startedAt = Date.now();
  readonly exited: Promise<Exit>;
  #exit: Exit | undefined;

  private constructor(child: ChildProcess) {
    this.child = child;
    if (child.pid === undefined) throw new Error('worker process did not start');
    this.pid = child.pid;
    this.exited = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        this.#exit = { code, signal };
        resolve(this.#exit);
      }),
    );
  }

  static async start(
    config: SidecarConfig,
    options: { secret: string; logPath: string; env?: NodeJS.ProcessEnv; nodeArgs?: readonly string[] },
  ): Promise<WorkerProcess> {
    const args = [...(options.nodeArgs ?? []), ...(await workerCommand())];
    const log = openSync(options.logPath, 'a');
    try {
      const child = spawn(process.execPath, args, {
        cwd: ROOT,
        env: {
          ...process.env,
          LOG_LEVEL: 'info',
          ...options.env,
          PARTNER_EVENTS_SIGNING_SECRET: options.secret,
          RELIABILITY_WORKER: JSON.stringify(config),
        },
        stdio: ['ignore', log, log],
      });
      return new WorkerProcess(child);
    } finally {
      closeSync(log); // the child holds its own copy
    }
  }

  get running(): boolean {
    return this.#exit === undefined;
  }

  /** SIGKILL, by our PID: a crash at whatever the worker was doing. */
  async kill(): Promise<Exit> {
    if (this.running) this.child.kill('SIGKILL');
    return this.exited;
  }

  /** SIGTERM: drain, close, exit 0. Falls back to SIGKILL after `graceMs`. */
  async stop(graceMs = 15_000): Promise<Exit> {
    if (!this.running) return this.exited;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

/** The last `lines` lines of a log file, for failure messages. */
export function tail(path: string, lines = 20): string {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/**
 * Reads a file of `<event_id>\n` lines incrementally: how many lines (handler runs) and how many
 * distinct ids so far. A partial last line (none expected: each line is one write) waits for the
 * next refresh.
 */
export class HandledLog {
  readonly path: string;
  readonly counts = new Map<string, number>();
  lines = 0;
  #offset = 0;
  #partial = '';

  constructor(path: string) {
    this.path = path;
  }

  get unique(): number {
    return this.counts.size;
  }

  /** Handler runs beyond the first, over all events. */
  get repeats(): number {
    return this.lines - this.counts.size;
  }

  refresh(): this {
    let fd: number;
    try {
      fd = openSync(this.path, 'r');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return this;
      throw error;
    }
    try {
      const size = fstatSync(fd).size;
      if (size <= this.#offset) return this;
      const chunk = Buffer.alloc(size - this.#offset);
      const read = readSync(fd, chunk, 0, chunk.length, this.#offset);
      this.#offset += read;
      const parts = (this.#partial + chunk.subarray(0, read).toString('utf8')).split('\n');
      this.#partial = parts.pop() ?? '';
      for (const id of parts) {
        if (id === '') continue;
        this.lines++;
        this.counts.set(id, (this.counts.get(id) ?? 0) + 1);
      }
    } finally {
      closeSync(fd);
    }
    return this;
  }
}
