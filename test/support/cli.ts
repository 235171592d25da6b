import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { expect, inject, vi } from 'vitest';
import { TEST_SIGNING_SECRET } from '../../src/consumer/testing.js';
import { jsonLines } from './records.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** The CLI's source, for a test whose child must load TypeScript (run through tsx). */
export const SOURCE_MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const TSX = import.meta.resolve('tsx');

/**
 * The CLI the tests spawn: the bundle test/support/global-setup.ts built for this run from
 * tsup.config.ts's `bin` entry, or the source through tsx when no setup ran.
 */
export const CLI_MAIN: string = inject('cliMain') ?? SOURCE_MAIN;

/**
 * The command line that runs the CLI file `main` (`partner-events` without its arguments): Node,
 * then a `.ts` file through tsx or a built one as it is. For spawning, or quoting into a shell.
 */
export function cliCommand(main: string = CLI_MAIN): [node: string, ...argv: string[]] {
  return main.endsWith('.ts') ? [process.execPath, '--import', TSX, main] : [process.execPath, main];
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  env?: NodeJS.ProcessEnv;
  input?: string;
  cwd?: string;
  /** The CLI of another copy of the tree (default this one's). */
  main?: string;
  /**
   * Ends a child still running after this long with SIGKILL (its code is then null), so a test
   * that waits on it fails with the child's output in the message instead of a bare timeout.
   */
  killAfterMs?: number;
}

/** The environment the tests run the CLI with: the test signing secret, warnings only, no ops port. */
export function cliEnv(env: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PARTNER_EVENTS_SIGNING_SECRET: TEST_SIGNING_SECRET,
    LOG_LEVEL: 'warn',
    PARTNER_EVENTS_OPS_PORT: '-1', // tests that want the ops endpoints ask for port 0
    ...env,
  };
}

/** Gathers a child's stdout and stderr; `done` resolves with them and the exit code once it closed. */
export function collectOutput(child: ChildProcess & { stdout: Readable; stderr: Readable }) {
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  const done = new Promise<CliResult>((resolve) => {
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
  return { done, output: () => stdout };
}

/** Spawns the CLI the way a user would (`partner-events ...`). */
export function startCli(args: string[], options: CliOptions = {}) {
  const [node, ...argv] = cliCommand(options.main);
  const child = spawn(node, [...argv, ...args], {
    cwd: options.cwd ?? ROOT,
    env: cliEnv(options.env),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const output = collectOutput(child);
  child.stdin.end(options.input ?? '');
  if (options.killAfterMs !== undefined) {
    const timer = setTimeout(() => child.kill('SIGKILL'), options.killAfterMs);
    void output.done.then(() => clearTimeout(timer));
  }
  return { child, ...output };
}

export function runCli(args: string[], options: CliOptions = {}) {
  return startCli(args, options).done;
}

export type LogLine = { msg?: string; [k: string]: unknown };

/**
 * Starts `partner-events run ARGS` with info logs (or `env.LOG_LEVEL`'s) on stdout; resolves once its
 * consumer started, with the URLs it logged on the way: its HTTP ingress and (with an ops port) its ops endpoints.
 * `stop()` sends SIGTERM and resolves with the result.
 */
export async function startRun(args: string[], options: CliOptions = {}) {
  const cli = startCli(['run', ...args], { ...options, env: { LOG_LEVEL: 'info', ...options.env } });
  const logs = () => jsonLines(cli.output()) as LogLine[];
  const find = (msg: string) => logs().find((l) => l.msg?.startsWith(msg));
  const stop = () => {
    cli.child.kill('SIGTERM');
    return cli.done;
  };
  try {
    await vi.waitFor(() => expect(find('consumer started')).toBeDefined(), { timeout: 15_000, interval: 25 });
  } catch (error) {
    await stop();
    throw error;
  }
  const ingress = String(find('listening for envelopes')?.ingress ?? '');
  const ops = String(find('operations endpoints')?.ops ?? '');
  return { ...cli, logs, find, stop, ingress, ops };
}

/** POSTs an envelope to a worker's HTTP ingress: the status and the JSON answer. */
export async function postEnvelope(url: string, body: string) {
  const res = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** Writes a worker config file, then runs `partner-events run --config PATH ...args`. */
export function runWithConfig(path: string, text: string, args: string[] = [], options: CliOptions = {}) {
  writeFileSync(path, text);
  return runCli(['run', '--config', path, ...args], options);
}

export interface ReplayResult extends CliResult {
  /** What --json printed: a line per record, the summary last. */
  lines: Record<string, unknown>[];
  summary: Record<string, unknown> | undefined;
}

/** `partner-events replay FILE ...flags --json`, with the in-memory dedupe store unless the flags name one. */
export async function runReplay(
  file: string,
  flags: string[],
  options: CliOptions = {},
): Promise<ReplayResult> {
  const dedupe = flags.includes('--dedupe') ? [] : ['--dedupe', 'memory'];
  const result = await runCli(['replay', file, ...flags, ...dedupe, '--json'], options);
  const lines = jsonLines(result.stdout);
  return { ...result, lines, summary: lines.at(-1) };
}

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** An HTTP server on 127.0.0.1 that records every request, then has `answer` respond to it. */
export async function startServer(answer: (req: ReceivedRequest, res: ServerResponse) => void) {
  const received: ReceivedRequest[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (d: string) => {
      body += d;
    });
    req.on('end', () => {
      const r = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body };
      received.push(r);
      answer(r, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    url: `${origin}/events`,
    received,
    server,
    /** The partner-event-id header of each request, in the order they came. */
    eventIds: () => received.map((r) => String(r.headers['partner-event-id'])),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A stand-in for the partner's app on 127.0.0.1: answers each POST with `respond(req)`. */
export function startApp(respond: (req: ReceivedRequest) => number = () => 204) {
  return startServer((req, res) => res.writeHead(respond(req)).end());
}

/** Waits until `app` has had as many requests as there are `events`, then checks they were those events. */
export async function expectReceived(
  app: Awaited<ReturnType<typeof startServer>>,
  events: readonly { eventId: string }[],
  timeout = 15_000,
) {
  await vi.waitFor(() => expect(app.received).toHaveLength(events.length), { timeout });
  expect(app.eventIds().sort()).toEqual(events.map((e) => e.eventId).sort());
}

export function killed(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}
