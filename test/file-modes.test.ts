/**
 * Files holding event bodies or dedupe state are created 0600 under a umask of 022; a secrets
 * file that group or others can read loads with a warning naming the file and its mode.
 */
import { chmodSync, existsSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SqliteCheckpointStore } from '../adapters/event-hubs/sqlite-checkpoint-store.js';
import { createJsonlDeadLetters } from '../src/consumer/dead-letter-sink.js';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { deadLetterRecord } from '../src/core/dead-letter-record.js';
import { readSecretsFile } from '../src/core/secrets.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { runCli, runReplay } from './support/cli.js';
import { tempDir } from './support/harness.js';
import { jsonLines } from './support/records.js';

let dir: ReturnType<typeof tempDir>;
let umask: number;
beforeAll(() => {
  // The usual default; children spawned by the tests inherit it.
  umask = process.umask(0o022);
});
afterAll(() => {
  process.umask(umask);
});
beforeEach(() => {
  dir = tempDir('phe-modes-');
});
afterEach(() => dir.cleanup());

const modeOf = (path: string) => (statSync(path).mode & 0o777).toString(8);

describe('files with bodies or dedupe state are created 0600', () => {
  it('the dead-letter file', async () => {
    const path = join(dir.path, 'dead.jsonl');
    const sink = createJsonlDeadLetters(path);
    await sink.write(
      deadLetterRecord(
        { id: 'm', body: 'raw', attempt: 1 },
        { code: 'MALFORMED_ENVELOPE', reason: 'x' },
        't',
      ),
    );
    expect(modeOf(path)).toBe('600');
  });

  it("replay's failed file and a --to file: target", async () => {
    const input = join(dir.path, 'dead.jsonl');
    writeFileSync(input, '{"not": "an envelope"}\n');
    const failed = join(dir.path, 'still-failing.jsonl');
    const queue = join(dir.path, 'queue.jsonl');
    const replay = await runReplay(input, ['--to', `file:${queue}`, '--dead-letter', failed]);
    expect(replay.code).toBe(1); // the malformed line is rejected into the failed file
    expect(modeOf(failed)).toBe('600');

    writeFileSync(input, `${createTestEnvelope('daily.data.steps.created').raw}\n`);
    const injected = await runReplay(input, ['--to', `file:${queue}`]);
    expect(injected.code).toBe(0);
    expect(modeOf(queue)).toBe('600');
  });

  it('the SQLite dedupe file with its -wal and -shm', async () => {
    const path = join(dir.path, 'state', 'dedupe.db');
    const store = createSqliteDedupe({ path });
    try {
      const claim = await store.claim('evt_1', 60_000);
      if (claim.status !== 'claimed') throw new Error(`not claimed: ${claim.status}`);
      await store.complete('evt_1', claim.token, 60_000);
      for (const file of [path, `${path}-wal`, `${path}-shm`]) {
        expect(existsSync(file), file).toBe(true);
        expect(modeOf(file), file).toBe('600');
      }
    } finally {
      await store.close();
    }
  });

  it('the Event Hubs SQLite checkpoint file with its -wal and -shm', async () => {
    const path = join(dir.path, 'checkpoints.db');
    const store = new SqliteCheckpointStore({ path });
    try {
      await store.updateCheckpoint({
        fullyQualifiedNamespace: 'ns',
        eventHubName: 'hub',
        consumerGroup: '$Default',
        partitionId: '0',
        sequenceNumber: 7,
        offset: '7',
      });
      for (const file of [path, `${path}-wal`, `${path}-shm`]) {
        expect(existsSync(file), file).toBe(true);
        expect(modeOf(file), file).toBe('600');
      }
    } finally {
      store.close();
    }
  });

  it('an existing file keeps the mode its owner gave it', async () => {
    const path = join(dir.path, 'dead.jsonl');
    writeFileSync(path, '');
    chmodSync(path, 0o640);
    await createJsonlDeadLetters(path).write(
      deadLetterRecord(
        { id: 'm', body: 'raw', attempt: 1 },
        { code: 'MALFORMED_ENVELOPE', reason: 'x' },
        't',
      ),
    );
    expect(modeOf(path)).toBe('640');
  });
});

describe('a secrets file readable or writable by group or others', () => {
  const SECRET = 'whsec-modes-test-not-a-real-one';

  function secretsFile(mode: number): string {
    const path = join(dir.path, 'secrets.json');
    writeFileSync(path, JSON.stringify({ keys: [{ id: 'k1', secret: SECRET }] }));
    chmodSync(path, mode);
    return path;
  }

  it('loads with one warning naming the file and its mode, never its content', () => {
    for (const mode of [0o644, 0o640, 0o604]) {
      const path = secretsFile(mode);
      const warnings: { message: string; details: unknown }[] = [];
      const secrets = readSecretsFile(path, {
        warn: (message, details) => warnings.push({ message, details }),
      });
      expect(secrets).toEqual([{ id: 'k1', secret: SECRET }]);
      expect(warnings).toHaveLength(1);
      const mode8 = `0${mode.toString(8)}`;
      expect(warnings[0]?.message).toBe(
        `secrets file ${path} is readable by group or others (mode ${mode8}): chmod 600 it`,
      );
      expect(warnings[0]?.details).toEqual({ file: path, mode: mode8 });
    }
  });

  it('warns as well when group or others can write it (they could add a key of their own)', () => {
    const cases: [number, string][] = [
      [0o620, 'writable'],
      [0o602, 'writable'],
      [0o666, 'readable and writable'],
      [0o646, 'readable and writable'],
    ];
    for (const [mode, access] of cases) {
      const path = secretsFile(mode);
      const warnings: string[] = [];
      readSecretsFile(path, { warn: (message) => warnings.push(message) });
      expect(warnings).toEqual([
        `secrets file ${path} is ${access} by group or others (mode 0${mode.toString(8)}): chmod 600 it`,
      ]);
    }
  });

  it('loads silently when only its owner can read it', () => {
    for (const mode of [0o600, 0o400]) {
      const warnings: string[] = [];
      readSecretsFile(secretsFile(mode), { warn: (message) => warnings.push(message) });
      expect(warnings).toEqual([]);
    }
  });

  it('the CLI prints the warning on stderr, and run logs it as one JSON line', async () => {
    const path = secretsFile(0o644);
    const input = join(dir.path, 'events.jsonl');
    writeFileSync(input, `${createTestEnvelope('daily.data.steps.created', { secret: SECRET }).raw}\n`);

    const verify = await runCli(['verify', input, '--secrets-file', path]);
    expect(verify.code).toBe(0);
    expect(verify.stderr).toContain(
      `warning: secrets file ${path} is readable by group or others (mode 0644)`,
    );

    // `run --handlers` needs a module; one that handles nothing is enough.
    const handlers = join(dir.path, 'handlers.mjs');
    writeFileSync(handlers, 'export default {};\n');
    const run = await runCli(
      ['run', '--source', `file:${input}`, '--handlers', handlers, '--dedupe', 'memory'],
      {
        env: { PARTNER_EVENTS_SECRETS_FILE: path, LOG_LEVEL: 'warn' },
      },
    );
    expect(run.code).toBe(0);
    const warned = jsonLines(run.stdout).filter((l) => String(l.msg).startsWith('secrets file'));
    expect(warned).toEqual([expect.objectContaining({ file: path, mode: '0644', level: 40 })]);
    for (const output of [verify.stdout, verify.stderr, run.stdout, run.stderr]) {
      expect(output).not.toContain(SECRET);
    }
  });
});
