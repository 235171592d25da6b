import { type ChildProcess, spawn } from 'node:child_process';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { TEST_SIGNING_SECRET } from '../../src/consumer/testing.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Spawns the CLI the way a user would (`partner-events ...`), from the source via tsx. `main`:
 * the CLI of another copy of the tree (default this one's).
 */
export function startCli(
  args: string[],
  options: { env?: NodeJS.ProcessEnv; input?: string; cwd?: string; main?: string } = {},
) {
  const child = spawn(process.execPath, ['--import', 'tsx', options.main ?? MAIN, ...args], {
    cwd: options.cwd ?? ROOT,
    env: {
      ...process.env,
      PARTNER_EVENTS_SIGNING_SECRET: TEST_SIGNING_SECRET,
      LOG_LEVEL: 'warn',
      PARTNER_EVENTS_OPS_PORT: '-1', // tests that want the ops endpoints ask for port 0
      ...options.env,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  child.stdin.end(options.input ?? '');
  const done = new Promise<CliResult>((resolve) => {
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
  return { child, done, output: () => stdout };
}

export function runCli(
  args: string[],
  options: { env?: NodeJS.ProcessEnv; input?: string; cwd?: string; main?: string } = {},
) {
  return startCli(args, options).done;
}

export interface ReceivedRequest {
  headers: IncomingHttpHeaders;
  body: string;
}

/** A stand-in for the partner's app on 127.0.0.1: answers each POST with `respond(req)`. */
export async function startApp(respond: (req: ReceivedRequest) => number = () => 204) {
  const received: ReceivedRequest[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (d: string) => {
      body += d;
    });
    req.on('end', () => {
      const r = { headers: req.headers, body };
      received.push(r);
      res.writeHead(respond(r)).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/events`,
    received,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

export function killed(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}
