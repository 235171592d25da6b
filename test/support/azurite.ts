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

const LABEL: Record<AzuriteService, string> = { queue: 'Queue', blob: 'Blob' };
const ENDPOINT_KEY: Record<AzuriteService, string> = { queue: 'QueueEndpoint', blob: 'BlobEndpoint' };
const START_TIMEOUT_MS = 15_000;

function bin(service: AzuriteService): string {
  return fileURLToPath(new URL(`../../node_modules/.bin/azurite-${service}`, import.meta.url));
}

/**
 * One Azurite service of our own: in memory, on a free loopback port (it picks it: port 0, read
 * back from its start-up line), no telemetry. Stopped by the PID we started; also killed if the
 * test process exits first, so a crashed run leaves no emulator behind.
 */
export class Azurite {
  readonly service: AzuriteService;
  readonly port: number;
  /** e.g. `http://127.0.0.1:PORT/devstoreaccount1` */
  readonly endpoint: string;
  readonly connectionString: string;
  readonly #child: ChildProcess;
  readonly #dir: string;
  readonly #killOnExit: () => void;

  private constructor(service: AzuriteService, port: number, child: ChildProcess, dir: string) {
    this.service = service;
    this.port = port;
    this.endpoint = `http://127.0.0.1:${port}/${AZURITE_ACCOUNT}`;
    this.connectionString = [
      'DefaultEndpointsProtocol=http',
      `AccountName=${AZURITE_ACCOUNT}`,
      `AccountKey=${AZURITE_KEY}`,
      `${ENDPOINT_KEY[service]}=${this.endpoint}`,
    ].join(';');
    this.#child = child;
    this.#dir = dir;
    this.#killOnExit = () => {
      if (child.exitCode === null && child.pid !== undefined) child.kill('SIGKILL');
    };
    process.once('exit', this.#killOnExit);
  }

  static async start(service: AzuriteService = 'queue'): Promise<Azurite> {
    // In-memory mode writes nothing, but a working directory of its own keeps any stray file out of the repo.
    const dir = mkdtempSync(join(tmpdir(), 'phe-azurite-'));
    const child = spawn(
      bin(service),
      [
        `--${service}Host`,
        '127.0.0.1',
        `--${service}Port`,
        '0',
        '--inMemoryPersistence',
        '--disableTelemetry',
        '--silent',
        '--skipApiVersionCheck',
        '--loose',
      ],
      { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    // --silent drops the access log only; the start-up line still names the real port.
    const ready = new RegExp(
      `Azurite ${LABEL[service]} service successfully listens on http://127\\.0\\.0\\.1:(\\d+)`,
    );
    try {
      const port = await new Promise<number>((resolve, reject) => {
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
      return new Azurite(service, port, child, dir);
    } catch (error) {
      if (child.exitCode === null) child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }

  /** Stops the emulator we started (by its PID) and waits for it to exit. Data is gone. */
  async stop(): Promise<void> {
    process.off('exit', this.#killOnExit);
    const child = this.#child;
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    }
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
