/**
 * The subpath list exists once (subpaths.ts): tsup and vitest derive theirs from it; package.json
 * `exports` and tsconfig.json `paths` are JSON, so they are checked against it here. On a
 * mismatch the failure shows the whole expected value, ready to paste.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { SUBPATHS, specifierOf, tsupEntries } from '../subpaths.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const json = (file: string) => JSON.parse(readFileSync(`${ROOT}/${file}`, 'utf8')) as Record<string, unknown>;

describe('the subpaths of the package', () => {
  it('each names a source file that exists', () => {
    expect(Object.keys(SUBPATHS)).toContain('./sqs'); // a positive control: the table is read
    for (const { source } of Object.values(SUBPATHS))
      expect(existsSync(`${ROOT}/${source}`), source).toBe(true);
  });

  it('package.json exports each, ESM and CJS with their types, and nothing else but itself', () => {
    const expected: Record<string, unknown> = {};
    for (const [subpath, { dist }] of Object.entries(SUBPATHS)) {
      expected[subpath] = {
        import: { types: `./dist/${dist}.d.ts`, default: `./dist/${dist}.js` },
        require: { types: `./dist/${dist}.d.cts`, default: `./dist/${dist}.cjs` },
      };
    }
    expected['./package.json'] = './package.json';
    const pkg = json('package.json');
    expect(pkg.exports).toEqual(expected);
    const root = SUBPATHS['.'].dist;
    expect(pkg).toMatchObject({
      main: `./dist/${root}.cjs`,
      module: `./dist/${root}.js`,
      types: `./dist/${root}.d.ts`,
    });
  });

  it('tsconfig.json maps each specifier to its source', () => {
    const expected = Object.fromEntries(
      Object.entries(SUBPATHS).map(([subpath, { source }]) => [specifierOf(subpath), [`./${source}`]]),
    );
    const tsconfig = json('tsconfig.json') as { compilerOptions: { paths: unknown } };
    expect(tsconfig.compilerOptions.paths).toEqual(expected);
  });

  it('tsup builds one entry per subpath, and vitest resolves each specifier to its source', async () => {
    expect(Object.keys(tsupEntries())).toHaveLength(Object.keys(SUBPATHS).length);
    // Resolved through vitest's aliases: the module is the source file's own.
    const viaAlias = await import('partner-health-events/storage-queue');
    const direct = await import('../adapters/storage-queue/index.js');
    expect(viaAlias).toBe(direct);
  });
});
