import { execFileSync, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const dist = (p: string) => fileURLToPath(new URL(`../dist/${p}`, import.meta.url));

// Builds the package as it is published (tsup: ESM + CJS + d.ts) and uses it both ways.
describe('the built package', () => {
  beforeAll(() => {
    execFileSync(
      process.execPath,
      [fileURLToPath(new URL('../node_modules/tsup/dist/cli-default.js', import.meta.url))],
      {
        cwd: ROOT,
        stdio: 'pipe',
      },
    );
  }, 120_000);

  it('loads through require and import, with the same API', async () => {
    const require = createRequire(import.meta.url);
    const cjs = require(dist('index.cjs'));
    const esm = await import(pathToFileURL(dist('index.js')).href);
    for (const name of [
      'createConsumer',
      'verifyMessage',
      'sign',
      'Keyring',
      'sqliteDedupe',
      'EVENT_TYPES',
    ]) {
      expect(typeof cjs[name]).not.toBe('undefined');
      expect(typeof esm[name]).toBe(typeof cjs[name]);
    }
    // Errors from one copy are recognised by the other (the brand is a registry symbol).
    expect(esm.isPartnerEventsError(new cjs.ConfigError('x'))).toBe(true);
    expect(cjs.isPartnerEventsError(new esm.VerificationError('SIGNATURE_MISMATCH', 'x'))).toBe(true);
  });

  it('exposes ./testing, ./memory and ./file entry points in both formats', async () => {
    const require = createRequire(import.meta.url);
    expect(typeof require(dist('testing.cjs')).createTestEnvelope).toBe('function');
    expect(typeof (await import(pathToFileURL(dist('adapters/memory.js')).href)).MemorySource).toBe(
      'function',
    );
    expect(typeof require(dist('adapters/file.cjs')).FileSource).toBe('function');
  });

  it('ships a runnable partner-events binary', () => {
    const result = spawnSync(process.execPath, [dist('cli/main.js'), '--help'], { encoding: 'utf8' });
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('partner-events <command>');
  });
});
