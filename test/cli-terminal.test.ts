/**
 * `run` on a terminal reads like `stripe listen`: the CLI runs under a real pseudo-terminal
 * (util-linux `script`), so `process.stdout.isTTY` is the real thing, not a stub. Off a terminal
 * `--pretty` gives the same lines; `--json-logs` on a terminal gives the JSON logs. A file source
 * exits 1 when anything was dead-lettered, else 0.
 */
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTestEnvelope, forgedEnvelope } from '../src/consumer/testing.js';
import {
  type CliResult,
  cliCommand,
  cliEnv,
  collectOutput,
  runCli,
  startApp,
  startServer,
} from './support/cli.js';
import { tempDir } from './support/harness.js';
import { jsonLines, writeJsonl } from './support/records.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const HAS_SCRIPT = spawnSync('sh', ['-c', 'command -v script'], { encoding: 'utf8' }).status === 0;
const CHILD_TIMEOUT_MS = 90_000;

function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

/**
 * Starts `partner-events ARGS` with its standard input, output and error on a pseudo-terminal
 * (`script -qfec`, which exits with the child's code). What is written to `child.stdin` is typed
 * at that terminal: `\x03` is a real ^C (the terminal sends SIGINT). `done` reads the terminal's
 * `\r\n` as `\n`.
 */
function startOnTerminal(args: readonly string[]) {
  const command = `exec ${[...cliCommand(), ...args].map(shellQuote).join(' ')}`;
  const child = spawn('script', ['-qfec', command, '/dev/null'], {
    cwd: ROOT,
    env: cliEnv(),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const output = collectOutput(child);
  const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS);
  const done = output.done.then((result): CliResult => {
    clearTimeout(timer);
    return { ...result, stdout: result.stdout.replaceAll('\r\n', '\n') };
  });
  return { child, output: output.output, done };
}

function runOnTerminal(args: readonly string[]): Promise<CliResult> {
  const run = startOnTerminal(args);
  run.child.stdin.end();
  return run.done;
}

let dir: ReturnType<typeof tempDir>;
let app: Awaited<ReturnType<typeof startApp>>;
beforeAll(async () => {
  app = await startApp(() => 200);
});
afterAll(() => app.close());
beforeEach(() => {
  dir = tempDir('phe-cli-terminal-');
  return () => dir.cleanup();
});

/** A file with a good event, its duplicate and a forged line; the `run` arguments for it. */
function mixedRun(forward = app.url) {
  const good = createTestEnvelope('daily.data.steps.created');
  const file = writeJsonl(dir.path, 'events.jsonl', [
    good.raw,
    good.raw,
    forgedEnvelope('coach.nudge.created').raw,
  ]);
  const deadLetter = join(dir.path, 'dead.jsonl');
  const args = ['run', '--source', `file:${file}`, '--forward', forward, '--dedupe', 'memory'];
  args.push('--dead-letter', deadLetter, '--concurrency', '1');
  return { good, file, deadLetter, args };
}

/** The lines of a run over `mixedRun()`'s file, on a terminal or with --pretty. */
function expectTerminalLines(output: string, run: ReturnType<typeof mixedRun>) {
  const lines = output.split('\n');
  expect(lines[0]).toBe(`Ready! Consuming file:${run.file} → forwarding to ${app.url} (^C to quit)`);
  expect(lines).toContain(`--> daily.data.steps.created ${run.good.eventId}`);
  expect(lines).toContain(`<-- [200] POST ${app.url}`);
  expect(lines).toContain('<-- [duplicate] already handled: acked, not handed over again');
  expect(lines).toContain('--> (not verified) line:3');
  expect(output).toMatch(
    /^<-- \[SIGNATURE_MISMATCH\] signature does not match any active signing secret → retry in \d+\.\ds$/m,
  );
  expect(lines).toContain('--> (not verified) line:3 (attempt 3)');
  expect(output).toMatch(/\(gave up after 3 attempts\) → dead-lettered$/m);
  expect(lines).toContain(
    `Summary: 1 handled, 1 duplicate, 2 retried, 1 dead-lettered (in ${run.deadLetter})`,
  );
  expect(output).not.toContain('{"level"');
}

describe.skipIf(!HAS_SCRIPT)('partner-events run on a terminal', () => {
  it('prints Ready, a line pair per event, the pending retries and a summary; exits 1 for the dead letter', async () => {
    const run = mixedRun();
    const result = await runOnTerminal(run.args);
    expect(result.code, result.stdout).toBe(1);
    expectTerminalLines(result.stdout, run);
    // While the forged line's retries wait, the terminal says so rather than looking hung.
    expect(result.stdout).toMatch(/^1 pending retry, next in \d+\.\ds$/m);
  });

  it('--json-logs on a terminal: the JSON logs, one line per settled delivery, no terminal lines', async () => {
    const run = mixedRun();
    const result = await runOnTerminal([...run.args, '--json-logs', '--log-level', 'debug']);
    expect(result.code, result.stdout).toBe(1);
    expect(result.stdout).not.toContain('Ready!');
    expect(result.stdout).not.toContain('-->');
    const logs = jsonLines(result.stdout);
    expect(logs.filter((l) => l.msg === 'event acked').map((l) => l.outcome)).toEqual([
      'handled',
      'duplicate',
    ]);
    expect(logs.filter((l) => l.msg === 'event dead-lettered')).toHaveLength(1);
  });

  it('^C while a retry waits: stops, says what is not finished, exits 1', async () => {
    // The app asks for the retry in 60 s (503 with Retry-After), so it is still pending at the ^C.
    const busy = await startServer((_req, res) => res.writeHead(503, { 'retry-after': '60' }).end());
    try {
      const event = createTestEnvelope('daily.data.steps.created');
      const file = writeJsonl(dir.path, 'one.jsonl', [event.raw]);
      const run = startOnTerminal([
        'run',
        '--source',
        `file:${file}`,
        '--forward',
        busy.url,
        '--dedupe',
        'memory',
      ]);
      await vi.waitFor(() => expect(run.output()).toMatch(/1 pending retry, next in \d+s/), {
        timeout: CHILD_TIMEOUT_MS,
        interval: 50,
      });
      run.child.stdin.write('\x03');
      const result = await run.done;
      expect(result.code, result.stdout).toBe(1);
      expect(result.stdout).toContain(`<-- [503] POST ${busy.url} (HANDLER_REQUESTED_RETRY) → retry in 60s`);
      expect(result.stdout).toContain('Stopping: finishing the events in flight…');
      expect(result.stdout).toContain('Summary: 0 handled, 0 duplicates, 1 retried, 0 dead-lettered');
      expect(result.stdout).toContain('Not finished: 1 retry still pending (not acked; run again or replay)');
    } finally {
      await busy.close();
    }
  });

  it('escapes control characters of a signed event id before they reach the terminal', async () => {
    const hostile = createTestEnvelope('daily.data.steps.created', {
      fields: { event_id: 'evt_\u001b]0;owned\u0007\u001b[2J' },
    });
    const file = writeJsonl(dir.path, 'hostile.jsonl', [hostile.raw]);
    const result = await runOnTerminal([
      'run',
      '--source',
      `file:${file}`,
      '--forward',
      app.url,
      '--dedupe',
      'memory',
    ]);
    expect(result.stdout).toContain('--> daily.data.steps.created evt_\\x1b]0;owned\\x07\\x1b[2J');
    expect(result.stdout).not.toContain('\u001b]0;');
  });
});

describe('partner-events run off a terminal', () => {
  it('--pretty prints the same lines when standard output is a pipe, the forward URL redacted', async () => {
    const run = mixedRun(`${app.url}?code=S3cr3tSig`);
    const result = await runCli([...run.args, '--pretty'], { killAfterMs: CHILD_TIMEOUT_MS });
    expect(result.code, result.stdout + result.stderr).toBe(1);
    expectTerminalLines(result.stdout, run);
    expect(result.stdout + result.stderr).not.toContain('S3cr3tSig');
  });

  it('without a flag: JSON logs as before; a file whose every line is acked exits 0', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const file = writeJsonl(dir.path, 'good.jsonl', [event.raw, event.raw]);
    const args = ['run', '--source', `file:${file}`, '--forward', app.url, '--dedupe', 'memory'];
    const result = await runCli(args, { env: { LOG_LEVEL: 'debug' }, killAfterMs: CHILD_TIMEOUT_MS });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).not.toContain('Ready!');
    const acked = jsonLines(result.stdout).filter((l) => l.msg === 'event acked');
    expect(acked.map((l) => l.outcome).sort()).toEqual(['duplicate', 'handled']);
  });

  it('--pretty and --json-logs together are a usage error', async () => {
    const result = await runCli([
      'run',
      '--source',
      'file:x',
      '--forward',
      app.url,
      '--pretty',
      '--json-logs',
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('give one of --pretty and --json-logs');
  });
});
