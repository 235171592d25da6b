import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Azurite's well-known development account (public, documented by Microsoft; not a secret). */
const ACCOUNT = 'devstoreaccount1';
const KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';
const READY = /Azurite Blob service successfully listens on http:\/\/127\.0\.0\.1:(\d+)/;
const START_TIMEOUT_MS = 15_000;

/**
 * An Azurite blob service of our own, in memory, on a port it picks (read back from its start-up
 * line). The script is run with this Node, so the PID we hold is the emulator's, and we stop it
 * by that PID (also when the test process exits first).
 */
export class AzuriteBlob {
  readonly connectionString: string;
  readonly #child: ChildProcess;
  readonly #dir: string;
  readonly #killOnExit: () => void;

  private constructor(port: number, child: ChildProcess, dir: string) {
    this.connectionString = `DefaultEndpointsProtocol=http;AccountName=${ACCOUNT};AccountKey=${KEY};BlobEndpoint=http://127.0.0.1:${port}/${ACCOUNT};`;
    this.#child = child;
    this.#dir = dir;
    this.#killOnExit = () => {
      if (child.exitCode === null) child.kill('SIGKILL');
    };
    process.once('exit', this.#killOnExit);
  }

  static async start(): Promise<AzuriteBlob> {
    const main = fileURLToPath(new URL('../../node_modules/azurite/dist/src/blob/main.js', import.meta.url));
    const dir = mkdtempSync(join(tmpdir(), 'phe-azurite-blob-')); // keeps any stray file out of the repo
    const child = spawn(
      process.execPath,
      [
        main,
        '--blobHost',
        '127.0.0.1',
        '--blobPort',
        '0',
        '--inMemoryPersistence',
        '--disableTelemetry',
        '--silent',
        '--skipApiVersionCheck',
        '--loose',
      ],
      { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    try {
      const port = await new Promise<number>((resolve, reject) => {
        let out = '';
        const timer = setTimeout(
          () => reject(new Error(`azurite-blob did not start: ${out}`)),
          START_TIMEOUT_MS,
        );
        child.stdout?.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          const match = READY.exec(out);
          if (match) {
            clearTimeout(timer);
            resolve(Number(match[1]));
          }
        });
        child.stderr?.on('data', (chunk: Buffer) => {
          out += chunk.toString();
        });
        child.once('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`azurite-blob exited (${code}): ${out}`));
        });
      });
      return new AzuriteBlob(port, child, dir);
    } catch (error) {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }

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
