import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Whether `redis-server` is on PATH. CI installs it (.ci/run); so does `npm test` when it can. */
export const HAS_REDIS = spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;

if (!HAS_REDIS && process.env.CI) {
  throw new Error('redis-server is missing in CI: .ci/run must install it (apt-get install redis-server)');
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** A redis-server of our own on a free loopback port, without persistence, stopped by PID. */
export class RedisServer {
  readonly port: number;
  readonly url: string;
  readonly #dir = mkdtempSync(join(tmpdir(), 'phe-redis-'));
  #child: ChildProcess | undefined;

  private constructor(port: number) {
    this.port = port;
    this.url = `redis://127.0.0.1:${port}`;
  }

  static async start(): Promise<RedisServer> {
    const server = new RedisServer(await freePort());
    await server.resume();
    return server;
  }

  /** Starts (again) on the same port: an outage ends. Data is gone (no persistence). */
  async resume(): Promise<void> {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        this.#dir,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.#child = child;
    await new Promise<void>((resolve, reject) => {
      let out = '';
      const onData = (chunk: Buffer) => {
        out += chunk.toString();
        if (out.includes('Ready to accept connections')) {
          child.stdout?.off('data', onData);
          resolve();
        }
      };
      child.stdout?.on('data', onData);
      child.once('exit', (code) => reject(new Error(`redis-server exited (${code}): ${out}`)));
    });
    child.stdout?.resume();
    child.stderr?.resume();
  }

  /** Stops the server we started (by its PID) and waits for it to exit: an outage begins. */
  async pause(): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }

  async stop(): Promise<void> {
    await this.pause();
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
