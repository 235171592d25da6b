/**
 * `replay --dry-run` in process, for what the CLI cannot provoke from outside: the kit itself
 * failing on a record (a bug in verification, a dedupe store that does not answer) is not the
 * record's fault, so it is not reported as a reject of the record.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createFileReplayReader } from '../adapters/file/replay-reader.js';
import { parseFilter } from '../src/cli/filters.js';
import { type DryRunOptions, dryRun as dryRunParts } from '../src/cli/replay-dry-run.js';
import { createTestEnvelope, forgedEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { DEFAULT_MAX_ENVELOPE_BYTES } from '../src/core/envelope.js';
import type { Keyring as KeyringType } from '../src/core/secrets.js';
import { Keyring } from '../src/core/secrets.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import type { DedupeStore } from '../src/dedupe/types.js';
import { tempDir } from './support/harness.js';
import { jsonLines, writeJsonl } from './support/records.js';

/** A keyring whose lookup throws, as a bug in the kit would (the events themselves are good). */
class ThrowingKeyring extends Keyring {
  override active(): never {
    throw new TypeError("Cannot read properties of undefined (reading 'keyObject')");
  }
}

const SECRETS = [{ id: 'current', secret: TEST_SIGNING_SECRET }];

let dir: ReturnType<typeof tempDir>;
let out: { stdout: string; stderr: string };
beforeEach(() => {
  dir = tempDir('phe-dry-run-');
  // The dry run prints as the CLI does, to the process's stdout and stderr.
  out = { stdout: '', stderr: '' };
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    out.stdout += String(chunk);
    return true;
  });
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
    out.stderr += String(chunk);
    return true;
  });
});
afterEach(() => {
  vi.restoreAllMocks();
  dir.cleanup();
});

function options(json: boolean): DryRunOptions {
  return {
    forward: undefined,
    to: undefined,
    force: false,
    json,
    checkAge: false,
    maxEnvelopeBytes: DEFAULT_MAX_ENVELOPE_BYTES,
    filter: parseFilter({}),
  };
}

/** The dry run of one file, as the CLI opens it; its exit code. */
async function dryRun(file: string, o: DryRunOptions, keyring: KeyringType, dedupe: DedupeStore) {
  const reader = createFileReplayReader(file);
  return (await dryRunParts(o, { reader, keyring, dedupe, source: `file:${file}` })).exitCode;
}

describe('replay --dry-run when the kit fails on a record', () => {
  const good = createTestEnvelope('daily.data.steps.created');
  const forged = forgedEnvelope('daily.data.steps.created');

  it('judges good and forged records with a working keyring and store (a positive control)', async () => {
    const file = writeJsonl(dir.path, 'in.jsonl', [good.raw, forged.raw]);
    const code = await dryRun(file, options(true), new Keyring(SECRETS), createMemoryDedupe());
    const lines = jsonLines(out.stdout);
    expect(lines[0]).toMatchObject({ line: 1, event_id: good.eventId, action: 'forward', code: null });
    expect(lines[1]).toMatchObject({ line: 2, action: 'reject', code: 'SIGNATURE_MISMATCH' });
    expect(lines.at(-1)).toMatchObject({ total: 2, would_forward: 1, rejected: 1, errors: 0 });
    expect(code).toBe(1);
  });

  it('an unexpected exception in verification is INTERNAL_ERROR (not MALFORMED_ENVELOPE), with its message on stderr', async () => {
    const file = writeJsonl(dir.path, 'in.jsonl', [good.raw, good.raw]);
    const code = await dryRun(file, options(true), new ThrowingKeyring(SECRETS), createMemoryDedupe());
    const lines = jsonLines(out.stdout);
    expect(lines[0]).toMatchObject({
      line: 1,
      event_id: null,
      action: 'error',
      code: 'INTERNAL_ERROR',
      reason: expect.stringContaining("reading 'keyObject'"),
    });
    expect(lines.at(-1)).toMatchObject({ total: 2, rejected: 0, errors: 2 });
    expect(code).toBe(1);
    expect(out.stderr).toContain('line 1: [INTERNAL_ERROR] unexpected exception in verification');
    expect(out.stderr).toContain("Cannot read properties of undefined (reading 'keyObject')");
    // The stack once (for a bug report), not once per record.
    expect(out.stderr.match(/at ThrowingKeyring\.active/g)).toHaveLength(1);
  });

  it('says so in the text output too', async () => {
    const file = writeJsonl(dir.path, 'in.jsonl', [good.raw]);
    await dryRun(file, options(false), new ThrowingKeyring(SECRETS), createMemoryDedupe());
    expect(out.stdout).toContain('line 1: error INTERNAL_ERROR\n');
    expect(out.stdout).toMatch(/dry run: \{[^}]*"rejected":0[^}]*"errors":1/);
  });

  it('a store that does not answer is DEDUPE_UNAVAILABLE for the verified event, not a reject', async () => {
    const file = writeJsonl(dir.path, 'in.jsonl', [good.raw]);
    const store = createSqliteDedupe({ path: `${dir.path}/d.db` });
    await store.close(); // a closed store refuses every call, as one that went away does
    const code = await dryRun(file, options(true), new Keyring(SECRETS), store);
    expect(jsonLines(out.stdout)[0]).toMatchObject({
      event_id: good.eventId,
      action: 'error',
      code: 'DEDUPE_UNAVAILABLE',
    });
    expect(out.stderr).toContain('line 1: [DEDUPE_UNAVAILABLE] SQLite dedupe store is closed');
    expect(code).toBe(1);
  });
});

describe('replay --dry-run and two records of one event', () => {
  const event = createTestEnvelope('daily.data.steps.created');
  const other = createTestEnvelope('daily.data.steps.created');

  it('shows the second as a duplicate, as the replay sends each event once per run', async () => {
    const file = writeJsonl(dir.path, 'in.jsonl', [event.raw, other.raw, event.raw]);
    const code = await dryRun(file, options(true), new Keyring(SECRETS), createMemoryDedupe());
    const lines = jsonLines(out.stdout);
    expect(lines.slice(0, 3).map((l) => [l.event_id, l.action])).toEqual([
      [event.eventId, 'forward'],
      [other.eventId, 'forward'],
      [event.eventId, 'skip-duplicate'],
    ]);
    expect(lines[2]?.reason).toBe('an earlier record of this run sends this event');
    expect(lines.at(-1)).toMatchObject({ total: 3, would_forward: 2, duplicates: 1 });
    expect(code).toBe(0);
  });

  it('with --force too: an event the store marks done is forced once, its second record is a duplicate', async () => {
    const dedupe = createMemoryDedupe();
    const claim = await dedupe.claim(event.eventId, 60_000);
    if (claim.status !== 'claimed') throw new Error('expected a claim');
    await dedupe.complete(event.eventId, claim.token, 60_000);
    const file = writeJsonl(dir.path, 'in.jsonl', [event.raw, event.raw]);
    await dryRun(file, { ...options(true), force: true }, new Keyring(SECRETS), dedupe);
    const lines = jsonLines(out.stdout);
    expect(lines.slice(0, 2).map((l) => [l.action, l.forced ?? false])).toEqual([
      ['forward', true],
      ['skip-duplicate', false],
    ]);
    expect(lines.at(-1)).toMatchObject({ total: 2, would_forward: 1, duplicates: 1, forced: 1 });
  });
});

describe('replay --dry-run --to --force with a store that cannot forget', () => {
  it('is refused as the replay refuses it (CONFIG_INVALID), before any line is judged', async () => {
    const file = writeJsonl(dir.path, 'in.jsonl', [createTestEnvelope('daily.data.steps.created').raw]);
    const memory = createMemoryDedupe();
    const { forget: _cannot, ...store } = {
      claim: memory.claim.bind(memory),
      extend: memory.extend.bind(memory),
      complete: memory.complete.bind(memory),
      release: memory.release.bind(memory),
      peek: memory.peek.bind(memory),
      close: memory.close.bind(memory),
      forget: memory.forget.bind(memory),
    };
    const to = { ...options(true), to: `file:${dir.path}/out.jsonl`, force: true };
    await expect(dryRun(file, to, new Keyring(SECRETS), store)).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('needs a dedupe store that can forget an event'),
    });
    expect(out.stdout).toBe('');
    // A store that can forget is judged as usual.
    await dryRun(file, to, new Keyring(SECRETS), createMemoryDedupe());
    expect(jsonLines(out.stdout)[0]).toMatchObject({ action: 'inject' });
  });
});
