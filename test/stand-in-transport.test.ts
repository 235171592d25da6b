/**
 * A new transport is one folder plus one registry line. The stand-in transport
 * (test/stand-in-transport/: a spool directory as a queue, laid out as every adapter is) passes
 * the adapter contract, and then, in a copy of the tree with its folder under adapters/ and one
 * entry added to src/transports.ts and nothing else, it is a `run --source`, a `--to`, a section of
 * the sidecar config with its environment variables, and a line of the usage.
 */
import { cpSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createStandInSource, type StandInSource } from './stand-in-transport/index.js';
import { standInTarget } from './stand-in-transport/sender.js';
import { adapterContract } from './support/adapter-contract.js';
import { runCli, startApp } from './support/cli.js';
import { tempDir } from './support/harness.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

adapterContract('stand-in', {
  declares: {
    redelivery: 'adapter',
    unsettledAtClose: 'unsettled',
    concurrentReceives: false,
    outage: { notApplicable: 'a local directory: there is no broker to lose' },
  },
  async setup() {
    const dir = tempDir('phe-contract-stand-in-');
    const target = standInTarget(dir.path);
    const opened: StandInSource[] = [];
    return {
      publish: async (body) => void (await target.send({ body })),
      async open() {
        const source = createStandInSource({ directory: dir.path, pollIntervalMs: 10 });
        opened.push(source);
        return source;
      },
      holds: async () => readdirSync(dir.path).filter((name) => name.endsWith('.json')).length,
      async cleanup() {
        await Promise.all(opened.map((source) => source.close()));
        dir.cleanup();
      },
    };
  },
});

describe('a new transport is one folder plus one registry line', () => {
  let tree: ReturnType<typeof tempDir>;
  let main: string;

  beforeAll(() => {
    // A copy of the tree: src/ and adapters/ as they are, the stand-in's folder beside the others.
    tree = tempDir('phe-stand-in-tree-');
    for (const part of ['src', 'adapters', 'package.json', 'tsconfig.json']) {
      cpSync(join(ROOT, part), join(tree.path, part), { recursive: true });
    }
    symlinkSync(join(ROOT, 'node_modules'), join(tree.path, 'node_modules'), 'dir');
    cpSync(join(ROOT, 'test/stand-in-transport'), join(tree.path, 'adapters/stand-in'), { recursive: true });
    // The registry line: the descriptor's import and its place in the list.
    const registry = join(tree.path, 'src/transports.ts');
    const before = readFileSync(registry, 'utf8');
    const after = before
      .replace(
        /^(import \{ \w+ \} from '\.\.\/adapters\/)/m,
        "import { standInTransport } from '../adapters/stand-in/cli.js';\n$1",
      )
      .replace(/^export const TRANSPORTS = \[\n/m, '$&  standInTransport,\n');
    expect(after.split('\n').length - before.split('\n').length).toBe(2);
    writeFileSync(registry, after);
    main = join(tree.path, 'src/cli/main.ts');
  });
  afterAll(() => tree.cleanup());

  it('lists its forms in the usage', async () => {
    const help = await runCli(['run', '--help'], { main });
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('stand-in:DIR (a spool directory, one file per envelope)');
  });

  it('takes envelopes with --to and hands them to the app with run --source', async () => {
    const spool = tempDir('phe-stand-in-spool-');
    const app = await startApp();
    try {
      const to = `stand-in:${spool.path}`;
      for (const type of ['daily.data.steps.created', 'coach.nudge.created']) {
        const sent = await runCli(['trigger', type, '--to', to], { main });
        expect(sent.code, sent.stderr).toBe(0);
        expect(sent.stderr).toContain(`-> ${to}: spooled`);
      }
      expect(readdirSync(spool.path)).toHaveLength(2);
      // Its options section comes from the sidecar config: endWhenEmpty ends the run.
      const run = await runCli(['run', '--source', to, '--forward', app.url, '--dedupe', 'memory'], {
        main,
        env: { PARTNER_EVENTS_STAND_IN_END_WHEN_EMPTY: 'true', LOG_LEVEL: 'info' },
        killAfterMs: 90_000,
      });
      expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
      expect(app.received.map((r) => r.headers['partner-event-type']).sort()).toEqual([
        'coach.nudge.created',
        'daily.data.steps.created',
      ]);
      expect(readdirSync(spool.path)).toEqual([]);
    } finally {
      await app.close();
      spool.cleanup();
    }
    // Three CLI children, each loading the tree's copy through tsx: seconds each on a busy machine.
  }, 120_000);

  it('validates its options section like every other, naming the environment variable', async () => {
    const spool = tempDir('phe-stand-in-spool-');
    mkdirSync(spool.path, { recursive: true });
    try {
      const run = await runCli(
        [
          'run',
          '--source',
          `stand-in:${spool.path}`,
          '--forward',
          'http://127.0.0.1:9/',
          '--dedupe',
          'memory',
        ],
        { main, env: { PARTNER_EVENTS_STAND_IN_MAX_BATCH_SIZE: '0' } },
      );
      expect(run.code).toBe(2);
      expect(run.stderr).toContain('standIn.maxBatchSize (PARTNER_EVENTS_STAND_IN_MAX_BATCH_SIZE)');
    } finally {
      spool.cleanup();
    }
  });
});
