import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.js';
import { tempDir } from './support/harness.js';

// What a new user sees when something is wrong at start: the cause, where, and what to do.

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

describe('errors name their cause', () => {
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

describe('checks at start', () => {
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
