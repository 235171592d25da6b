/**
 * An Azurite queue service that keeps its state on disk (its own temp folder), so it can be
 * stopped and started again mid-stream, on the same port, with its queues and messages intact:
 * an outage of the broker, not a loss of it. Stopped with SIGTERM (Azurite saves its database on
 * a graceful exit; a SIGKILL loses what it had not saved yet), always by the PID we started.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AZURITE_ACCOUNT, AZURITE_KEY } from '../../support/azurite.js';

const BIN = fileURLToPath(new URL('../../../node_modules/.bin/azurite-queue', import.meta.url));
const READY = /Azurite Queue service successfully listens on http:\/\/127\.0\.0\.1:(\d+)/;

export class PersistentAzurite {
  readonly #dir = mkdtempSync(join(tmpdir(), 'phe-azurite-disk-'));
  #child: ChildProcess | undefined;
  #port = 0;
  readonly #killOnExit = () => {
    if (this.#child && this.#child.exitCode === null) this.#child.kill('SIGKILL');
  };

  static async start(): Promise<PersistentAzurite> {
    const azurite = new PersistentAzurite();
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
      BIN,
      [
        '--queueHost',
        '127.0.0.1',
        '--queuePort',
        String(this.#port),
        '--location',
        this.#dir,
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
    await exited;
  }

  async stop(): Promise<void> {
    await this.pause();
    process.off('exit', this.#killOnExit);
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
