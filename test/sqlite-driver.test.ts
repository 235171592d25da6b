/**
 * SQLite under the Node that runs the suite (CI runs it on Node 20 and 24): the store survives a
 * burst in a process of its own, so a native abort shows as the child's exit, not as a crashed
 * test runner. On Node 24.19+ better-sqlite3 12's statements abort the process when V8 collects
 * them outside a Node context (`RemoveEnvironmentCleanupHook ... (env) != nullptr`); the kit loads
 * better-sqlite3 13 there (src/core/sqlite-driver.ts).
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from './support/harness.js';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const BURST = join(REPO, 'test', 'support', 'sqlite-burst.ts');

function runBurst(db: string, claims: number) {
  const child = spawn(process.execPath, ['--import', 'tsx', BURST, db, String(claims)], {
    cwd: REPO,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>(
    (resolve) => child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })),
  );
}

describe(`SQLite on Node ${process.versions.node}`, () => {
  const dirs: Array<{ cleanup(): void }> = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) d.cleanup();
  });

  it('a burst of 12000 claims, a purge and a close: the process exits cleanly (no native abort)', async () => {
    const dir = tempDir('phe-sqlite-burst-');
    dirs.push(dir);
    const result = await runBurst(join(dir.path, 'dedupe.db'), 12_000);
    expect(result.stderr).not.toMatch(/Assertion failed/);
    expect({ code: result.code, signal: result.signal }, result.stderr).toEqual({ code: 0, signal: null });
    expect(JSON.parse(result.stdout)).toEqual({ claimed: 12_000, purged: 12_000 });
  });
});
