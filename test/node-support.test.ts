import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  endOfLifeWarning,
  maintainedNodeLines,
  NODE_END_OF_LIFE,
  nodeEndOfLife,
} from '../src/cli/node-support.js';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { runCli } from './support/cli.js';
import { tempDir } from './support/harness.js';
import { jsonLines, writeJsonl } from './support/records.js';

describe('nodeEndOfLife', () => {
  it('names the end of life of a Node line once it has passed, from that day on', () => {
    expect(nodeEndOfLife('20.20.2', new Date('2026-11-28T12:00:00Z'))).toBe('2026-04-30');
    expect(nodeEndOfLife('20.18.1', new Date('2026-04-30T00:00:00Z'))).toBe('2026-04-30');
    expect(nodeEndOfLife('20.18.1', new Date('2026-04-29T23:59:59Z'))).toBeUndefined();
    expect(nodeEndOfLife('22.12.0', new Date('2026-11-28T12:00:00Z'))).toBeUndefined();
    expect(nodeEndOfLife('22.12.0', new Date('2027-05-01T00:00:00Z'))).toBe('2027-04-30');
    expect(nodeEndOfLife('24.21.0', new Date('2026-11-28T12:00:00Z'))).toBeUndefined();
  });

  it('advises the lines still maintained on that day, newest first', () => {
    expect(maintainedNodeLines(new Date('2026-11-28T12:00:00Z'))).toEqual([24, 22]);
    expect(endOfLifeWarning('20.20.2', new Date('2026-11-28T12:00:00Z'))).toEqual({
      fields: { node: '20.20.2', end_of_life: '2026-04-30' },
      message:
        'this Node version is past its end of life (no more security fixes): run a maintained LTS (24 or 22)',
    });
    // Once 22 has ended too, it is no longer advised; past every known date, no line is named.
    expect(endOfLifeWarning('22.12.0', new Date('2027-06-01T00:00:00Z'))?.message).toMatch(/LTS \(24\)$/);
    expect(endOfLifeWarning('24.21.0', new Date('2029-01-01T00:00:00Z'))?.message).toMatch(/maintained LTS$/);
    expect(endOfLifeWarning('24.21.0', new Date('2026-11-28T12:00:00Z'))).toBeUndefined();
  });

  it('says nothing of a line it has no date for (a newer Node)', () => {
    expect(nodeEndOfLife('26.0.0', new Date('2030-01-01T00:00:00Z'))).toBeUndefined();
    expect(nodeEndOfLife('not a version', new Date())).toBeUndefined();
  });

  it('knows every line the package supports, from its engines range on', async () => {
    const { engines } = (await import('../package.json', { with: { type: 'json' } })).default as {
      engines: { node: string };
    };
    const lowest = Number.parseInt(engines.node.replace(/^>=\s*/, ''), 10);
    for (let major = lowest; major <= 24; major += 2)
      expect(NODE_END_OF_LIFE[major]).toMatch(/^\d{4}-\d{2}-\d{2}$/);
  });
});

describe('partner-events run on a Node past its end of life', () => {
  let dir: ReturnType<typeof tempDir>;
  beforeEach(() => {
    dir = tempDir('phe-node-eol-');
  });
  afterEach(() => dir.cleanup());

  it('warns once at start with the version and the date, exactly when this Node is past it', async () => {
    const input = writeJsonl(dir.path, 'events.jsonl', [createTestEnvelope('daily.data.steps.created').raw]);
    const handlers = join(dir.path, 'handlers.mjs');
    writeFileSync(handlers, "export default { 'daily.data.steps.created': () => {} };\n");
    const run = await runCli([
      'run',
      '--source',
      `file:${input}`,
      '--handlers',
      handlers,
      '--dedupe',
      'memory',
    ]);
    expect(run.code).toBe(0);
    const warned = jsonLines(run.stdout).filter((l) => String(l.msg).includes('past its end of life'));
    const endOfLife = nodeEndOfLife();
    if (endOfLife) {
      expect(warned).toEqual([
        expect.objectContaining({ level: 40, node: process.versions.node, end_of_life: endOfLife }),
      ]);
    } else {
      expect(warned).toEqual([]);
    }
  });
});
