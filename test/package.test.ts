import { execFileSync, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';
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
      'createSqliteDedupe',
      'EVENT_TYPES',
    ]) {
      expect(typeof cjs[name]).not.toBe('undefined');
      expect(typeof esm[name]).toBe(typeof cjs[name]);
    }
    // Errors from one copy are recognised by the other (the brand is a registry symbol).
    expect(esm.isPartnerEventsError(new cjs.ConfigError('x'))).toBe(true);
    expect(cjs.isPartnerEventsError(new esm.VerificationError('SIGNATURE_MISMATCH', 'x'))).toBe(true);
  });

  it('opens a SQLite dedupe store from both formats (the driver is loaded for the running Node)', async () => {
    const require = createRequire(import.meta.url);
    const dir = mkdtempSync(join(tmpdir(), 'phe-package-'));
    try {
      for (const kit of [require(dist('index.cjs')), await import(pathToFileURL(dist('index.js')).href)]) {
        const store = kit.createSqliteDedupe({ path: join(dir, `${randomUUID()}.db`) });
        expect((await store.claim('evt-1', 1000)).status).toBe('claimed');
        await store.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('exposes ./testing, ./memory and ./file entry points in both formats', async () => {
    const require = createRequire(import.meta.url);
    expect(typeof require(dist('testing.cjs')).createTestEnvelope).toBe('function');
    expect(typeof (await import(pathToFileURL(dist('adapters/memory.js')).href)).createMemorySource).toBe(
      'function',
    );
    expect(typeof require(dist('adapters/file.cjs')).createFileSource).toBe('function');
  });

  it('the root entry is the library: importing it loads neither prom-client, yaml nor undici', async () => {
    // At run time, through require: every module the CJS build loaded.
    const probe = spawnSync(
      process.execPath,
      [
        '-e',
        `require(${JSON.stringify(dist('index.cjs'))});` +
          'console.log(JSON.stringify(Object.keys(require.cache)));',
      ],
      { encoding: 'utf8' },
    );
    expect(probe.status, probe.stderr).toBe(0);
    const loaded = packagesOf(JSON.parse(probe.stdout) as string[]);
    expect(loaded).toContain('zod'); // the probe sees packages at all
    expect(loaded).not.toContain('prom-client');
    expect(loaded).not.toContain('yaml');
    expect(loaded).not.toContain('undici'); // the HTTP hand-off pool is the sidecar's and the CLI's
    // Through import: the static import graph of the ESM build (tsup's chunks included).
    const esm = staticImports(dist('index.js'));
    expect(esm).toContain('zod');
    expect(esm).not.toContain('prom-client');
    expect(esm).not.toContain('yaml');
    expect(esm).not.toContain('undici');
    // The sidecar entry is where they live.
    expect(staticImports(dist('sidecar.js'))).toEqual(
      expect.arrayContaining(['prom-client', 'yaml', 'undici']),
    );
  });

  it('the sidecar entry and the CLI load no cloud SDK until a transport is opened', () => {
    // Both hold the transport registry; its descriptors import their adapters with import().
    for (const entry of ['sidecar.js', 'cli/main.js']) {
      const packages = staticImports(dist(entry));
      expect(packages, entry).toContain('zod');
      for (const sdk of [
        '@aws-sdk/client-sqs',
        '@azure/storage-queue',
        '@azure/event-hubs',
        '@azure/identity',
      ]) {
        expect(packages, entry).not.toContain(sdk);
      }
    }
  });

  it("the adapters' published option types show each option's documentation, default included", () => {
    // What an editor shows for an option: its JSDoc, read through the built .d.ts files.
    const cases = [
      ['adapters/sqs', 'SqsAdapterOptions', 'waitTimeSeconds', 'Default 20'],
      ['adapters/sqs', 'SqsAdapterOptions', 'deadLetterQueue', 'Default: none'],
      ['adapters/storage-queue', 'StorageQueueAdapterOptions', 'visibilityTimeoutSeconds', 'Default 30'],
      ['adapters/event-hubs', 'EventHubsAdapterOptions', 'partitionBatchSize', 'Default 50'],
      ['adapters/event-hubs', 'EventHubsAdapterOptions', 'maxBatchSize', 'Default 100'],
      ['adapters/http', 'HttpIngressOptions', 'bodyTimeoutMs', 'Default 10 000'],
      ['adapters/memory', 'MemorySourceOptions', 'endWhenEmpty', 'Default false'],
      ['adapters/file', 'FileSourceOptions', 'path', 'Required'],
    ] as const;
    const probe = join(dist('.'), 'options-probe.ts');
    writeFileSync(
      probe,
      cases
        .map(
          ([entry, type], i) =>
            `import type { ${type} as T${i} } from './${entry}.js';\ndeclare const o${i}: T${i};`,
        )
        .join('\n'),
    );
    try {
      const program = ts.createProgram([probe], {
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        strict: true,
        skipLibCheck: true,
        noEmit: true,
      });
      const checker = program.getTypeChecker();
      const source = program.getSourceFile(probe);
      if (!source) throw new Error('the probe was not compiled');
      const docs = cases.map(([, , option], i) => {
        const declared = source.statements.find(
          (s): s is ts.VariableStatement =>
            ts.isVariableStatement(s) && s.declarationList.declarations[0]?.name.getText(source) === `o${i}`,
        );
        const name = declared?.declarationList.declarations[0]?.name;
        const property = name && checker.getTypeAtLocation(name).getProperty(option);
        return property ? ts.displayPartsToString(property.getDocumentationComment(checker)) : '';
      });
      cases.forEach(([, type, option, expected], i) => {
        expect(docs[i], `${type}.${option}`).toContain(expected);
      });
    } finally {
      rmSync(probe, { force: true });
    }
  });

  it('ships a runnable partner-events binary', () => {
    const result = spawnSync(process.execPath, [dist('cli/main.js'), '--help'], { encoding: 'utf8' });
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('partner-events <command>');
  });
});

/** Package names (scoped ones whole) of module paths under node_modules. */
function packagesOf(paths: readonly string[]): string[] {
  const names = new Set<string>();
  for (const path of paths) {
    const match = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path.slice(path.lastIndexOf('node_modules/')));
    if (match?.[1]) names.add(match[1]);
  }
  return [...names];
}

/** Bare packages an ESM file imports statically, following its relative imports (chunks). */
function staticImports(file: string, seen = new Set<string>()): string[] {
  if (seen.has(file)) return [];
  seen.add(file);
  const packages = new Set<string>();
  const text = readFileSync(file, 'utf8');
  for (const match of text.matchAll(
    /^(?:import|export)\s[^;]*?from\s*["']([^"']+)["']|^import\s*["']([^"']+)["']/gm,
  )) {
    const spec = match[1] ?? match[2] ?? '';
    if (spec.startsWith('.')) {
      for (const name of staticImports(join(dirname(file), spec), seen)) packages.add(name);
    } else if (!spec.startsWith('node:')) {
      packages.add(
        spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : (spec.split('/')[0] ?? spec),
      );
    }
  }
  return [...packages];
}
