import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { type AddressInfo, createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { collectOutput, startApp } from './support/cli.js';
import { installPackedTarball, type PackedProject } from './support/packed-project.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const dist = (p: string) => fileURLToPath(new URL(`../dist/${p}`, import.meta.url));

// Builds the package as it is published (tsup: ESM + CJS + d.ts), once for the whole file.
beforeAll(() => {
  execFileSync(
    process.execPath,
    [fileURLToPath(new URL('../node_modules/tsup/dist/cli-default.js', import.meta.url))],
    {
      cwd: ROOT,
      stdio: 'pipe',
    },
  );
}, 600_000); // tsup with d.ts: minutes on a loaded machine

// Uses the build both ways, from this checkout.
describe('the built package', () => {
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
    expect(loaded).not.toContain('@opentelemetry/api'); // loaded by the first consumer, if installed
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

  it('the root entry works without @opentelemetry/api installed (an optional peer), in both formats', () => {
    // Node's resolver is made to fail for @opentelemetry/* as if the packages were not installed;
    // a consumer is created and handles a signed event (its tracing is then simply off).
    const hide = `const Module = require('node:module'); const resolve = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request.startsWith('@opentelemetry/')) {
          throw Object.assign(new Error('Cannot find module ' + request), { code: 'MODULE_NOT_FOUND' });
        }
        return resolve.call(this, request, ...rest);
      };`;
    const use = (kit: string, testing: string) => `
      const c = ${kit}.createConsumer({
        secrets: [{ id: 'current', secret: ${testing}.TEST_SIGNING_SECRET }],
        deadLetter: { write: async () => {}, close: async () => {} },
      });
      let handled = 0;
      let hidden = false;
      try { require('@opentelemetry/api'); } catch { hidden = true; }
      c.on('*', () => { handled++; });
      c.process({ id: 'm', body: ${testing}.createTestEnvelope('daily.data.steps.created').raw, attempt: 1 })
        .then((r) => console.log(JSON.stringify({ outcome: r.outcome, handled, hidden })));`;
    const cjs = spawnSync(
      process.execPath,
      [
        '-e',
        `${hide} const kit = require(${JSON.stringify(dist('index.cjs'))});
         const testing = require(${JSON.stringify(dist('testing.cjs'))}); ${use('kit', 'testing')}`,
      ],
      { encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent' } },
    );
    const esm = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { createRequire } from 'node:module'; const require = createRequire(import.meta.url); ${hide}
         const kit = await import(${JSON.stringify(pathToFileURL(dist('index.js')).href)});
         const testing = await import(${JSON.stringify(pathToFileURL(dist('testing.js')).href)}); ${use('kit', 'testing')}`,
      ],
      { encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent' } },
    );
    for (const probe of [cjs, esm]) {
      expect(probe.status, probe.stderr).toBe(0);
      expect(JSON.parse(probe.stdout)).toEqual({
        outcome: { kind: 'ack', result: 'handled' },
        handled: 1,
        hidden: true,
      });
    }
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

  it('the serverless entries load no cloud SDK at import, and the root entry loads neither of them', () => {
    // Lambda loads @aws-sdk/client-sqs with import() only when a dead-letter queue is configured;
    // the Azure wrappers take the clients you build, so @azure/* are type imports only.
    for (const entry of ['serverless/lambda.js', 'serverless/azure-functions.js']) {
      const packages = staticImports(dist(entry));
      expect(packages, entry).toContain('os'); // a positive control: the imports are read
      for (const sdk of [
        '@aws-sdk/client-sqs',
        '@azure/functions',
        '@azure/storage-queue',
        '@azure/event-hubs',
      ]) {
        expect(packages, entry).not.toContain(sdk);
      }
    }
    const root = readFileSync(dist('index.js'), 'utf8');
    expect(root).not.toMatch(/sqsHandler|eventHubHandler|storageQueueHandler/);
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
  }, 120_000); // a whole type check of the built .d.ts files: tens of seconds on a loaded machine

  it('ships a runnable partner-events binary', () => {
    const result = spawnSync(process.execPath, [dist('cli/main.js'), '--help'], { encoding: 'utf8' });
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('partner-events <command>');
  });
});

// The tarball as a partner installs it before the package is published, in an empty project,
// offline (test/support/packed-project.ts): what it ships, and the documented commands, run there.
describe('the packed tarball, installed in an empty project', () => {
  let project: PackedProject;
  let workDir: string;
  beforeAll(() => {
    workDir = mkdtempSync(join(tmpdir(), 'phe-packed-'));
    project = installPackedTarball(ROOT, workDir);
  }, 300_000);
  afterAll(() => {
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  it('ships the MIT LICENSE, and docs whose relative links all resolve inside the package', () => {
    expect(readFileSync(join(project.packageDir, 'LICENSE'), 'utf8')).toMatch(/^MIT License/);
    const manifest = JSON.parse(readFileSync(join(project.packageDir, 'package.json'), 'utf8'));
    expect(manifest.license).toBe('MIT');
    const broken: string[] = [];
    const markdown = project.packedFiles.filter((f) => f.endsWith('.md'));
    expect(markdown).toEqual(expect.arrayContaining(['README.md', 'docs/getting-started.md']));
    for (const file of markdown) {
      // Links in prose, not in code spans such as `fixtures[type](fields?)`.
      const text = readFileSync(join(project.packageDir, file), 'utf8').replace(/`[^`\n]*`/g, '');
      for (const [, target] of text.matchAll(/\]\(([^)\s#]+)(?:#[^)]*)?\)/g)) {
        if (!target || /^[a-z]+:/i.test(target)) continue; // https:, mailto:
        const inPackage = join(project.packageDir, dirname(file), target);
        // Pages for contributors point into the repository's tests and build: those exist there.
        const inRepository = join(ROOT, dirname(file), target);
        const repositoryOnly = /^(test|subpaths\.ts)/.test(relative(ROOT, inRepository));
        if (!existsSync(repositoryOnly ? inRepository : inPackage)) broken.push(`${file} → ${target}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('runs nothing on install, declares no side effects, and its source maps carry their sources', () => {
    const manifest = JSON.parse(readFileSync(join(project.packageDir, 'package.json'), 'utf8'));
    for (const hook of ['preinstall', 'install', 'postinstall', 'prepare']) {
      expect(manifest.scripts?.[hook], hook).toBeUndefined();
    }
    expect(manifest.sideEffects).toBe(false);
    const maps = project.packedFiles.filter((f) => f.endsWith('.map'));
    expect(maps.length).toBeGreaterThan(0);
    for (const map of maps) {
      const { sources, sourcesContent } = JSON.parse(readFileSync(join(project.packageDir, map), 'utf8'));
      expect(sourcesContent?.length, map).toBe(sources.length);
      expect(
        sourcesContent.every((s: unknown) => typeof s === 'string'),
        map,
      ).toBe(true);
    }
  });

  it("runs the README's and getting-started's library examples against events from `trigger`", async () => {
    const secret = 'local-dev-secret';
    const env = project.env;
    const trigger = await npx(['trigger', 'daily.data.heart_rate.created', '--to', 'file:events.jsonl'], {
      PARTNER_EVENTS_SIGNING_SECRET: secret,
    });
    expect(trigger.code, trigger.stderr).toBe(0);
    const eventId = trigger.stdout.trim();
    for (const [doc, heading] of [
      ['README.md', '## Use it as a library'],
      ['docs/getting-started.md', '## The library in 20 lines'],
    ] as const) {
      const code = codeBlock(readFileSync(join(ROOT, doc), 'utf8'), heading, 'ts');
      // The app's own objects are stubs that print what they were given; state goes to ./state.
      const script = [
        'const calls = [];',
        'const db = { saveHeartRate: async (...args) => calls.push(args), saveVital: async (...args) => calls.push(args) };',
        'const queueCardFetch = () => {};',
        code.replaceAll('/var/lib/partner-events/', './state/'),
        'await consumer.stopped;',
        'console.log(JSON.stringify(calls));',
      ].join('\n');
      const file = join(project.dir, `${doc.replace(/\W/g, '-')}.mjs`);
      writeFileSync(file, script);
      mkdirSync(join(project.dir, 'state'), { recursive: true });
      rmSync(join(project.dir, 'state', 'dedupe.db'), { force: true });
      const result = await run(process.execPath, [file], { ...env, PARTNER_EVENTS_SIGNING_SECRET: secret });
      expect(result.code, `${doc}\n${result.stderr}`).toBe(0);
      // The consumer's logs go to stdout too: the calls are the one line that is an array.
      const printed = result.stdout.split('\n').find((line) => line.startsWith('['));
      const calls = JSON.parse(printed ?? 'null') as unknown[][];
      expect(calls, doc).toHaveLength(1);
      expect(JSON.stringify(calls[0]), doc).toContain('bpm');
    }
    expect(eventId).toMatch(/^evt_/);
  }, 180_000);

  it("runs getting-started's first screen: `run` with an HTTP ingress, then `trigger` and `simulate` into it", async () => {
    const doc = readFileSync(join(ROOT, 'docs/getting-started.md'), 'utf8');
    const block = codeBlock(doc, '<!-- packed-install-test: first-screen -->', 'sh');
    // The README's first screen is the same commands.
    const readmeBlock = codeBlock(
      readFileSync(join(ROOT, 'README.md'), 'utf8'),
      '# partner-health-events',
      'sh',
      2,
    );
    const commands = (text: string) =>
      text
        .split('\n')
        .map((l) => l.replace(/\s+#.*$/, '').trim())
        .filter((l) => l.startsWith('npx ') || l.startsWith('export '));
    expect(commands(readmeBlock)).toEqual(commands(block));
    const [exportLine, runLine, ...senders] = commands(block);
    const secret = /^export PARTNER_EVENTS_SIGNING_SECRET=(\S+)$/.exec(exportLine ?? '')?.[1];
    expect(secret).toBeDefined();
    const env = { PARTNER_EVENTS_SIGNING_SECRET: secret };
    // Ports as written, made free: the app's and the ingress's are the test's, the ops port any.
    const app = await startApp();
    const ingressPort = await freePort();
    const local = (line: string) =>
      line
        .replaceAll('127.0.0.1:8080', new URL(app.origin).host)
        .replaceAll('127.0.0.1:8081', `127.0.0.1:${ingressPort}`)
        .split(' ')
        .slice(2); // `npx partner-health-events`
    expect(runLine).toMatch(/^npx partner-health-events run /);
    // In a group of its own: npm does not pass SIGTERM on to the command it runs (^C on a
    // terminal reaches the whole group), so the stop below signals the group.
    const worker = spawn('npx', ['partner-health-events', ...local(runLine ?? ''), '--ops-port', '0'], {
      cwd: project.dir,
      env: { ...project.env, ...env, LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const output = collectOutput(worker);
    try {
      await vi.waitFor(() => expect(output.output()).toContain('consumer started'), {
        timeout: 120_000,
        interval: 50,
      });
      const sent: string[] = [];
      for (const line of senders) {
        expect(line).toMatch(/^npx partner-health-events (trigger|simulate) /);
        const result = await npx(local(line), env);
        // simulate exits 1 when the machine was too slow to send on schedule; what was sent counts.
        expect([0, 1], `${line}\n${result.stdout}\n${result.stderr}`).toContain(result.code);
        expect(result.stderr + result.stdout).not.toMatch(/[1-9]\d* send errors/);
        sent.push(...result.stdout.split('\n').filter((l) => /^evt_\S+$/.test(l)));
      }
      expect(sent.length).toBeGreaterThan(1);
      await vi.waitFor(() => expect(app.eventIds()).toEqual(expect.arrayContaining(sent)), {
        timeout: 60_000,
      });
    } finally {
      if (worker.pid !== undefined) process.kill(-worker.pid, 'SIGINT');
      const result = await output.done;
      await app.close();
      expect(result.stdout, result.stderr).toContain('consumer stopped');
    }
  }, 300_000);

  it('runs the CLI as `npx partner-health-events` and through `npm exec --package`; the demo names that command', async () => {
    const viaNpx = await npx(['--help']);
    expect(viaNpx.code, viaNpx.stderr).toBe(0);
    expect(viaNpx.stdout).toContain('partner-events <command>');
    const viaExec = await run('npm', [
      'exec',
      '--package=partner-health-events',
      '--',
      'partner-events',
      '--help',
    ]);
    expect(viaExec.code, viaExec.stderr).toBe(0);
    expect(viaExec.stdout).toContain('partner-events <command>');
    const demo = await npx(['demo']);
    expect(demo.code, demo.stderr).toBe(0);
    const inspect =
      /inspect them: (PARTNER_EVENTS_SIGNING_SECRET=\S+) npx partner-health-events (verify \S+)/.exec(
        demo.stdout,
      );
    expect(inspect, demo.stdout).not.toBeNull();
    const [, assignment = '', args = ''] = inspect ?? [];
    const [name = '', value = ''] = assignment.split('=');
    const verify = await npx(args.split(' '), { [name]: value });
    expect(verify.stdout).toMatch(/0 ok, 2 failed/);
  }, 180_000);

  function run(command: string, args: readonly string[], env: NodeJS.ProcessEnv = project.env) {
    const child = spawn(command, args, { cwd: project.dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
    return collectOutput(child).done;
  }

  function npx(args: readonly string[], env: NodeJS.ProcessEnv = {}) {
    return run('npx', ['partner-health-events', ...args], { ...project.env, ...env });
  }
});

describe('package-lock.json', () => {
  it("carries every optional dependency's own entry, other platforms' binaries included, so `npm ci` accepts it anywhere", () => {
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { optionalDependencies?: Record<string, string> }>;
    };
    const missing: string[] = [];
    for (const [at, entry] of Object.entries(lock.packages)) {
      for (const name of Object.keys(entry.optionalDependencies ?? {})) {
        if (!lockedFrom(lock.packages, at, name)) missing.push(`${at || '(root)'} → ${name}`);
      }
    }
    expect(missing).toEqual([]);
    // What a lock regenerated on a mirror without them used to lack.
    expect(lock.packages).toHaveProperty(['node_modules/@biomejs/cli-darwin-arm64']);
    expect(lock.packages).toHaveProperty(['node_modules/@rollup/rollup-win32-x64-msvc']);
  });
});

/** Whether `name`, required from the package at `at`, resolves to an entry of the lock. */
function lockedFrom(packages: Record<string, unknown>, at: string, name: string): boolean {
  for (let dir = at; ; ) {
    if (packages[`${dir ? `${dir}/` : ''}node_modules/${name}`]) return true;
    if (!dir) return false;
    const up = dir.lastIndexOf('node_modules/');
    dir = up <= 0 ? '' : dir.slice(0, up - 1);
  }
}

/** The `nth` fenced block of `lang` after the line that starts with `marker`. */
function codeBlock(markdown: string, marker: string, lang: string, nth = 1): string {
  const start = markdown.split('\n').findIndex((line) => line.startsWith(marker));
  if (start < 0) throw new Error(`no "${marker}" in the document`);
  const after = markdown
    .split('\n')
    .slice(start + 1)
    .join('\n');
  const blocks = [...after.matchAll(new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\``, 'gm'))];
  const block = blocks[nth - 1]?.[1];
  if (block === undefined) throw new Error(`no ${lang} block ${nth} after "${marker}"`);
  return block;
}

/** A port free on 127.0.0.1 right now. */
async function freePort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

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
