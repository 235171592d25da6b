import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { type AddressInfo, connect, createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTestEnvelope } from '../src/consumer/testing.js';
import {
  type CliResult,
  cliCommand,
  cliEnv,
  collectOutput,
  killed,
  postEnvelope,
  runCli,
  startCli,
  startRun,
  startServer,
} from './support/cli.js';
import { tempDir } from './support/harness.js';

// What a new user sees when something is wrong at start: the cause, where, and what to do.

const ROOT = fileURLToPath(new URL('..', import.meta.url));

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-cli-errors-');
});
afterEach(() => dir.cleanup());

function write(name: string, text: string): string {
  const path = join(dir.path, name);
  writeFileSync(path, text);
  return path;
}

/** `run` over an empty file source, with `flags`; the dedupe store in memory unless the flags name one. */
function run(flags: string[]) {
  const source = write('events.jsonl', '');
  const dedupe = flags.includes('--dedupe') ? [] : ['--dedupe', 'memory'];
  return runCli(['run', '--source', `file:${source}`, '--no-ops', ...dedupe, ...flags]);
}

// CLI children start slowly on a loaded machine: generous limits, never assertions on time.
describe('errors name their cause', { timeout: 60_000 }, () => {
  it('a --handlers module with a syntax error: the error and its file:line', async () => {
    const module = write('handlers.mjs', 'export default {\n  "daily.*": async () => 1 +,\n};\n');
    const result = await run(['--handlers', module]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(
      `[CONFIG_INVALID] cannot load --handlers module ${module} (at ${module}:2)`,
    );
    expect(result.stderr).toContain('cause: SyntaxError: ');
  });

  it('a --handlers module that throws while it loads: the message and where it was thrown', async () => {
    const module = write('handlers.mjs', 'const db = 1;\nthrow new Error(`no DATABASE_URL set`);\n');
    const result = await run(['--handlers', module]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(`cannot load --handlers module ${module} (at ${module}:2:7)`);
    expect(result.stderr).toContain('cause: no DATABASE_URL set');
  });

  it('a --handlers module with a missing import: the package and the importing file', async () => {
    const module = write('handlers.mjs', "import 'no-such-package-phe';\nexport default {};\n");
    const result = await run(['--handlers', module]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(
      `cause: Cannot find package 'no-such-package-phe' imported from ${module}`,
    );
  });

  it('a --handlers module that is not there: the path looked at', async () => {
    const result = await run(['--handlers', join(dir.path, 'nope.mjs')]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(`--handlers module ${join(dir.path, 'nope.mjs')} not found`);
  });

  it('a SQLite dedupe path that cannot be created: the system error, the directory and the flag', async () => {
    // A directory path that is a file: refused whatever the user (root included).
    const file = write('not-a-dir', '');
    const result = await run(['--forward', 'http://127.0.0.1:9/', '--dedupe', `sqlite:${file}/dedupe.db`]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(
      `[DEDUPE_UNAVAILABLE] cannot open SQLite dedupe store at ${file}/dedupe.db (E`,
    );
    expect(result.stderr).toContain(`its directory ${file} must exist`);
    expect(result.stderr).toContain('--dedupe sqlite:PATH');
    expect(result.stderr).toMatch(/cause: E[A-Z]+: /);
  });
});

/** A port free on 127.0.0.1 right now. */
async function freePort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Whether something accepts TCP connections on 127.0.0.1:`port`. */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

// A start-up error after the HTTP ingress listens: before, the ingress kept the process alive
// after the error was printed (no exit 2, POSTs held without an answer).
describe('a failed start closes what it had opened', { timeout: 60_000 }, () => {
  it.each([
    [
      'a --handlers module without a handler map',
      () => ['--handlers', write('bad.mjs', 'export default 42;\n')],
    ],
    ['an unknown --dedupe', () => ['--forward', 'http://127.0.0.1:9/', '--dedupe', 'bogus']],
  ])('%s: the ingress is closed when the error is printed, and run exits 2', async (_name, flags) => {
    const port = await freePort();
    const given = flags();
    const dedupe = given.includes('--dedupe') ? [] : ['--dedupe', 'memory'];
    const source = ['--source', `http://127.0.0.1:${port}/events`];
    const deadLetter = ['--dead-letter', join(dir.path, 'dead.jsonl')];
    const cli = startCli(['run', ...source, '--no-ops', ...deadLetter, ...dedupe, ...given], {
      killAfterMs: 45_000,
    });
    try {
      let stderr = '';
      cli.child.stderr.on('data', (d: string) => {
        stderr += d;
      });
      await vi.waitFor(() => expect(stderr).toContain('partner-events run: '), {
        timeout: 40_000,
        interval: 25,
      });
      // The error is printed after the parts are closed: nothing listens any more.
      expect(await listening(port), stderr).toBe(false);
      // And nothing else holds the process: it ends on its own, soon (else killed: code null).
      const timer = setTimeout(() => cli.child.kill('SIGKILL'), 10_000);
      const result = await cli.done;
      clearTimeout(timer);
      expect(result.code, result.stderr).toBe(2);
    } finally {
      if (!killed(cli.child)) cli.child.kill('SIGKILL');
    }
  });
});

describe('checks at start', { timeout: 60_000 }, () => {
  it('run: a dead-letter path under a file exits 2 at start, naming the cause', async () => {
    const file = write('not-a-dir', '');
    const result = await run(['--forward', 'http://127.0.0.1:9/', '--dead-letter', `${file}/dead.jsonl`]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(
      `[CONFIG_INVALID] dead-letter file ${file}/dead.jsonl cannot be written (ENOTDIR)`,
    );
    expect(result.stderr).toContain('--dead-letter PATH');
  });

  it('run: a dead-letter path that is a directory exits 2 at start', async () => {
    const result = await run(['--forward', 'http://127.0.0.1:9/', '--dead-letter', dir.path]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(`dead-letter file ${dir.path} cannot be written (EISDIR)`);
  });

  it('run: a dead-letter file whose folders are missing is fine (they are created on the first record)', async () => {
    const result = await run([
      '--forward',
      'http://127.0.0.1:9/',
      '--dead-letter',
      join(dir.path, 'a/b/dead.jsonl'),
    ]);
    expect(result.code, result.stderr).toBe(0);
  });

  // Root may write anywhere: a folder without write permission stops only other users.
  it.skipIf(process.getuid?.() === 0)(
    'run: a dead-letter folder without write permission exits 2 (EACCES)',
    async () => {
      const folder = join(dir.path, 'locked');
      mkdirSync(folder, { mode: 0o500 });
      const result = await run([
        '--forward',
        'http://127.0.0.1:9/',
        '--dead-letter',
        join(folder, 'dead.jsonl'),
      ]);
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toContain('cannot be written (EACCES)');
    },
  );

  it('replay: a --dead-letter path under a file exits 2 before anything is sent', async () => {
    const file = write('not-a-dir', '');
    const records = write('dead.jsonl', '');
    const result = await runCli([
      'replay',
      records,
      '--forward',
      'http://127.0.0.1:9/',
      '--dedupe',
      'memory',
      '--dead-letter',
      `${file}/failed.jsonl`,
    ]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(`dead-letter file ${file}/failed.jsonl cannot be written (ENOTDIR)`);
  });
});

describe('usage errors that help', { timeout: 60_000 }, () => {
  /** One line and where to read more; never the whole usage. */
  function expectShortUsageError(result: CliResult, command: string) {
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(`see 'partner-events ${command} --help'`);
    expect(result.stderr).not.toContain('Usage:');
    expect(result.stderr.trim().split('\n')).toHaveLength(2);
  }

  it('an unknown flag: one line with the closest flag', async () => {
    const result = await runCli(['run', '--forwrd', 'http://127.0.0.1:9/']);
    expectShortUsageError(result, 'run');
    expect(result.stderr).toContain('partner-events run: unknown option --forwrd: did you mean --forward?');
    const replay = await runCli(['replay', 'x.jsonl', '--dry-rn']);
    expect(replay.stderr).toContain('unknown option --dry-rn: did you mean --dry-run?');
  });

  it('an unknown command: the closest command', async () => {
    const result = await runCli(['rnu']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('unknown command "rnu": did you mean "run"?');
    expect(result.stderr).not.toContain('Usage:');
  });

  it('a --source that is an existing file: did you mean file:PATH?', async () => {
    const file = write('good.jsonl', '');
    const result = await runCli(['run', '--source', file, '--forward', 'http://127.0.0.1:9/']);
    expectShortUsageError(result, 'run');
    expect(result.stderr).toContain(`unknown --source "${file}": did you mean file:${file}?`);
    const typo = await runCli(['run', '--source', `fiel:${file}`, '--forward', 'http://127.0.0.1:9/']);
    expect(typo.stderr).toContain(`did you mean file:${file}?`);
  });

  it('a bad flag value is named by the flag typed, not its environment variable', async () => {
    const result = await runCli([
      'run',
      '--source',
      'file:x.jsonl',
      '--forward',
      'http://127.0.0.1:9/',
      '--ops-port',
      'abc',
      '--log-level',
      'loud',
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('  - --ops-port: ');
    expect(result.stderr).toContain('  - --log-level: ');
    expect(result.stderr).not.toContain('PARTNER_EVENTS_');
    // From the environment, the variable is what the user set.
    const fromEnv = await runCli(['run', '--source', 'file:x.jsonl', '--forward', 'http://127.0.0.1:9/'], {
      env: { PARTNER_EVENTS_OPS_PORT: 'abc' },
    });
    expect(fromEnv.stderr).toContain('ops.port (PARTNER_EVENTS_OPS_PORT)');
  });

  it('--version and -v print the package version; help COMMAND prints its usage', async () => {
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    const [long, short, help, unknown] = await Promise.all([
      runCli(['--version']),
      runCli(['-v']),
      runCli(['help', 'run']),
      runCli(['help', 'rnu']),
    ]);
    for (const result of [long, short]) {
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toBe(`${version}\n`);
    }
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: partner-events run /);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('did you mean "run"?');
  });

  it('demo --events x is an error, not the default', async () => {
    const result = await runCli(['demo', '--events', 'x']);
    expectShortUsageError(result, 'demo');
    expect(result.stderr).toContain('--events must be a positive integer, got "x"');
  });

  it('simulate --help shows its defaulted flags as optional', async () => {
    const result = await runCli(['simulate', '--help']);
    expect(result.stdout).toContain(
      'Usage: partner-events simulate --to TARGET [--rate N/s] [--duration S] [options]',
    );
  });

  it('an ops port in use names --ops-port 0 and --no-ops', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      const port = (taken.address() as AddressInfo).port;
      const result = await runCli([
        'run',
        '--source',
        'file:/dev/null',
        '--forward',
        'http://127.0.0.1:9/',
        '--dedupe',
        'memory',
        '--dead-letter',
        join(tmpdir(), 'phe-unused-dead.jsonl'),
        '--ops-port',
        String(port),
      ]);
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toContain(`cannot serve the ops endpoints on 127.0.0.1:${port}`);
      expect(result.stderr).toContain('EADDRINUSE');
      expect(result.stderr).toContain('--ops-port N (0 = any free port), or turn them off with --no-ops');
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  });

  // `script` gives the child a terminal for standard input; without it there is no terminal to test.
  it.skipIf(!existsSync('/usr/bin/script'))(
    'verify with no FILE on a terminal says what it wants, not a silent wait',
    async () => {
      const command = [...cliCommand(), 'verify'].map((a) => `'${a}'`).join(' ');
      const child = spawn('/usr/bin/script', ['-qec', command, '/dev/null'], { cwd: ROOT, env: cliEnv() });
      const output = collectOutput(child);
      const timer = setTimeout(() => child.kill('SIGKILL'), 45_000); // a child waiting on its terminal fails the test, not hangs it
      const result = await output.done;
      clearTimeout(timer);
      expect(result.code, result.stdout).toBe(2);
      expect(result.stdout).toContain('no FILE given, and standard input is a terminal');
    },
  );
});

describe('a second SIGINT', { timeout: 60_000 }, () => {
  it('exits at once with a message while the first one drains', async () => {
    // An app that never answers: the forward stays in flight, so the drain waits.
    const app = await startServer(() => undefined);
    const worker = await startRun(
      ['--source', 'http://127.0.0.1:0/events', '--forward', app.url, '--dedupe', 'memory', '--no-ops'],
      { env: { PARTNER_EVENTS_DEAD_LETTER: join(tmpdir(), 'phe-unused-dead.jsonl') } },
    );
    try {
      void postEnvelope(worker.ingress, createTestEnvelope('daily.data.steps.created').raw).catch(
        () => undefined,
      );
      await vi.waitFor(() => expect(app.received).toHaveLength(1), { timeout: 15_000 });
      worker.child.kill('SIGINT');
      await vi.waitFor(() => expect(worker.find('stopping')).toBeDefined(), { timeout: 15_000 });
      worker.child.kill('SIGINT');
      const result = await worker.done;
      expect(result.code, result.stderr).toBe(130);
      expect(result.stderr).toContain('second SIGINT: exiting now');
    } finally {
      if (!killed(worker.child)) await worker.stop();
      app.server.closeAllConnections();
      await app.close();
    }
  });
});
