/**
 * Azurite's queue service for the reliability suites, on a free loopback port, in its own temp
 * folder, always stopped by the PID we started.
 *
 * - `persistent: true` keeps its state on disk, so it can be stopped (SIGTERM: Azurite saves its
 *   database on a graceful exit; a SIGKILL loses what it had not saved) and started again on the
 *   same port with its queues and messages intact: an outage of the broker, not a loss of it.
 * - Its extent sweep is off (support/azurite-without-sweep.mjs): in Azurite 3.35 a sweep after a
 *   few thousand deleted messages blocks the emulator for minutes, which would pass for an outage.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AZURITE_ACCOUNT, AZURITE_KEY } from '../../support/azurite.js';

const LAUNCHER = fileURLToPath(new URL('./azurite-without-sweep.mjs', import.meta.url));
const READY = /Azurite Queue service successfully listens on http:\/\/127\.0\.0\.1:(\d+)/;

export class AzuriteQueue {
  readonly persistent: boolean;
  readonly #dir = mkdtempSync(join(tmpdir(), 'phe-azurite-rel-'));
  #child: ChildProcess | undefined;
  #port = 0;
  readonly #killOnExit = () => {
    if (this.#child && this.#child.exitCode === null) this.#child.kill('SIGKILL');
  };

  private constructor(persistent: boolean) {
    this.persistent = persistent;
  }

  static async start(options: { persistent?: boolean } = {}): Promise<AzuriteQueue> {
    const azurite = new AzuriteQueue(options.persistent ?? false);
    process.once('exit', azurite.#killOnExit);
    await azurite.resume();
    return azurite;
  }

  get port(): number {
    return this.#port;
  }

  get connectionString(): string {
    return [
      'DefaultEndpointsProtocol=http',
      `AccountName=${AZURITE_ACCOUNT}`,
      `AccountKey=${AZURITE_KEY}`,
      `QueueEndpoint=http://127.0.0.1:${this.#port}/${AZURITE_ACCOUNT}`,
    ].join(';');
  }

  /** Starts (again): the first time on a free port, then on the same one, from the same folder. */
  async resume(): Promise<void> {
    if (this.#child) return;
    const child = spawn(
      process.execPath,
      [
        LAUNCHER,
        '--queueHost',
        '127.0.0.1',
        '--queuePort',
        String(this.#port),
        ...(this.persistent ? ['--location', this.#dir] : ['--inMemoryPersistence']),
        '--disableTelemetry',
        '--silent',
        '--skipApiVersionCheck',
        '--loose',
      ],
      { cwd: this.#dir, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.#child = child;
    this.#port = await new Promise<number>((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`azurite-queue did not start: ${out}`)), 15_000);
      const onData = (chunk: Buffer) => {
        out += chunk.toString();
        const match = READY.exec(out);
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
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`azurite-queue exited (${code}): ${out}`));
      });
    });
    child.stdout?.resume();
    child.stderr?.resume();
  }

  /** SIGTERM to the process we started; resolves once it has exited (its state saved). */
  async pause(): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000); // a blocked emulator ignores SIGTERM
    await exited;
    clearTimeout(timer);
  }

  async stop(): Promise<void> {
    await this.pause();
    process.off('exit', this.#killOnExit);
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
