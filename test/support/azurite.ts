import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Azurite's well-known development account (public, documented by Microsoft; not a secret). */
export const AZURITE_ACCOUNT = 'devstoreaccount1';
export const AZURITE_KEY =
  'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

export type AzuriteService = 'queue' | 'blob';

export interface AzuriteOptions {
  /**
   * Keep the state on disk (in the emulator's own temp folder) instead of in memory, so that
   * `pause()` then `resume()` is an outage of the emulator, not a loss of its queues and messages.
   */
  readonly persistent?: boolean;
  /**
   * Queue only: run it through `azurite-without-sweep.mjs`, with the extent sweep of deleted
   * messages off. In Azurite 3.35 that sweep blocks the emulator for minutes after a few thousand
   * deleted messages, which the reliability suites would take for an outage.
   */
  readonly withoutSweep?: boolean;
}

const LABEL: Record<AzuriteService, string> = { queue: 'Queue', blob: 'Blob' };
const ENDPOINT_KEY: Record<AzuriteService, string> = { queue: 'QueueEndpoint', blob: 'BlobEndpoint' };
const START_TIMEOUT_MS = 15_000;
/** How long `pause()` waits for a graceful exit: a blocked emulator ignores SIGTERM. */
const PAUSE_KILL_AFTER_MS = 10_000;
const WITHOUT_SWEEP = fileURLToPath(new URL('./azurite-without-sweep.mjs', import.meta.url));

function bin(service: AzuriteService): string {
  return fileURLToPath(new URL(`../../node_modules/.bin/azurite-${service}`, import.meta.url));
}

/** Sends `signal` to a child we started (SIGKILL after `killAfterMs`, if given) and waits for its exit. */
async function endChild(child: ChildProcess, signal: NodeJS.Signals, killAfterMs?: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill(signal);
  const timer = killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), killAfterMs);
  await exited;
  clearTimeout(timer);
}

/**
 * Spawns the emulator on `port` (0: it picks a free one) and resolves with the port read back from
 * its start-up line; on failure the child is killed before the error is thrown.
 */
async function launch(
  service: AzuriteService,
  options: AzuriteOptions,
  dir: string,
  port: number,
): Promise<{ child: ChildProcess; port: number }> {
  const args = [
    `--${service}Host`,
    '127.0.0.1',
    `--${service}Port`,
    String(port),
    ...(options.persistent ? ['--location', dir] : ['--inMemoryPersistence']),
    '--disableTelemetry',
    '--silent',
    '--skipApiVersionCheck',
    '--loose',
  ];
  const command = options.withoutSweep ? process.execPath : bin(service);
  const argv = options.withoutSweep ? [WITHOUT_SWEEP, ...args] : args;
  const child = spawn(command, argv, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  // --silent drops the access log only; the start-up line still names the real port.
  const ready = new RegExp(
    `Azurite ${LABEL[service]} service successfully listens on http://127\\.0\\.0\\.1:(\\d+)`,
  );
  try {
    const listening = await new Promise<number>((resolve, reject) => {
      let out = '';
      const timer = setTimeout(
        () => reject(new Error(`azurite-${service} did not start in ${START_TIMEOUT_MS} ms: ${out}`)),
        START_TIMEOUT_MS,
      );
      const onData = (chunk: Buffer) => {
        out += chunk.toString();
        const match = ready.exec(out);
        if (match) {
          clearTimeout(timer);
          child.stdout?.off('data', onData);
          resolve(Number(match[1]));
        }
      };
      child.stdout?.on('data', onData);
      child.stderr?.on('data', (chunk: Buffer) => {
        out += chunk.toString();
      });
      child.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`azurite-${service} exited (${code}): ${out}`));
      });
    });
    child.stdout?.resume();
    child.stderr?.resume();
    return { child, port: listening };
  } catch (error) {
    if (child.exitCode === null) child.kill('SIGKILL');
    throw error;
  }
}

/**
 * One Azurite service of our own: on a free loopback port (it picks it: port 0, read back from its
 * start-up line), in a temp folder of its own, no telemetry; in memory unless `persistent`.
 * Stopped by the PID we started; also killed if the test process exits first, so a crashed run
 * leaves no emulator behind. `pause()` and `resume()` take it away and bring it back on the same
 * port (with its state, when `persistent`).
 */
export class Azurite {
  readonly service: AzuriteService;
  readonly port: number;
  /** e.g. `http://127.0.0.1:PORT/devstoreaccount1` */
  readonly endpoint: string;
  readonly connectionString: string;
  readonly #options: AzuriteOptions;
  readonly #dir: string;
  #child: ChildProcess | undefined;
  readonly #killOnExit = () => {
    const child = this.#child;
    if (child && child.exitCode === null && child.pid !== undefined) child.kill('SIGKILL');
  };

  private constructor(
    service: AzuriteService,
    options: AzuriteOptions,
    dir: string,
    started: { child: ChildProcess; port: number },
  ) {
    this.service = service;
    this.port = started.port;
    this.endpoint = `http://127.0.0.1:${started.port}/${AZURITE_ACCOUNT}`;
    this.connectionString = [
      'DefaultEndpointsProtocol=http',
      `AccountName=${AZURITE_ACCOUNT}`,
      `AccountKey=${AZURITE_KEY}`,
      `${ENDPOINT_KEY[service]}=${this.endpoint}`,
    ].join(';');
    this.#options = options;
    this.#dir = dir;
    this.#child = started.child;
    process.once('exit', this.#killOnExit);
  }

  static async start(service: AzuriteService = 'queue', options: AzuriteOptions = {}): Promise<Azurite> {
    if (options.withoutSweep && service !== 'queue') {
      throw new Error(`withoutSweep applies to the queue service only, not ${service}`);
    }
    // In-memory mode writes nothing, but a working directory of its own keeps any stray file out of the repo.
    const dir = mkdtempSync(join(tmpdir(), 'phe-azurite-'));
    try {
      return new Azurite(service, options, dir, await launch(service, options, dir, 0));
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }

  /**
   * SIGTERM to the process we started; resolves once it has exited. Azurite saves its state on a
   * graceful exit (`persistent`); one that does not exit in 10 s is SIGKILLed, losing what it had
   * not saved. In memory, a pause loses everything.
   */
  async pause(): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (child) await endChild(child, 'SIGTERM', PAUSE_KILL_AFTER_MS);
  }

  /** Starts it again after `pause()`: on the same port, from the same folder. */
  async resume(): Promise<void> {
    if (this.#child) return;
    this.#child = (await launch(this.service, this.#options, this.#dir, this.port)).child;
  }

  /** Stops the emulator we started (by its PID) and waits for it to exit. Data is gone. */
  async stop(): Promise<void> {
    process.off('exit', this.#killOnExit);
    const child = this.#child;
    this.#child = undefined;
    if (child) await endChild(child, 'SIGKILL');
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
