import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTestEnvelope, forgedEnvelope, staleEnvelope } from '../src/consumer/testing.js';
import { runCli, runReplay, startApp, startCli } from './support/cli.js';
import { tempDir } from './support/harness.js';
import { deadRecord, jsonLines, readJsonl, writeJsonl as writeRecords } from './support/records.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-cli-');
});
afterEach(() => dir.cleanup());

/** Writes a JSONL file into this test's temp dir. */
function writeJsonl(name: string, lines: string[]): string {
  return writeRecords(dir.path, name, lines);
}

/** Writes a `--handlers` module (`source`, an ES module) into this test's temp dir; its path. */
function writeHandlers(source: string): string {
  const path = join(dir.path, 'handlers.mjs');
  writeFileSync(path, source);
  return path;
}

describe('partner-events verify', () => {
  it('prints one JSON object per line and exits 1 when any line failed', async () => {
    const good = createTestEnvelope('daily.data.heart_rate.created');
    const file = writeJsonl('in.jsonl', [
      good.raw,
      forgedEnvelope('daily.data.steps.created').raw,
      '',
      'not json',
      staleEnvelope('daily.data.steps.created').raw,
      createTestEnvelope('daily.data.steps.created', { fields: { value: 'lots' } }).raw,
    ]);
    const result = await runCli(['verify', file, '--json']);
    expect(result.code).toBe(1);
    const lines = jsonLines(result.stdout);
    expect(lines).toEqual([
      {
        line: 1,
        ok: true,
        event_id: good.eventId,
        event_type: 'daily.data.heart_rate.created',
        code: null,
        key_id: 'current',
      },
      expect.objectContaining({ line: 2, ok: false, code: 'SIGNATURE_MISMATCH', key_id: null }),
      expect.objectContaining({ line: 4, ok: false, code: 'MALFORMED_ENVELOPE', event_id: null }),
      expect.objectContaining({ line: 5, ok: false, code: 'TIMESTAMP_TOO_OLD' }),
      expect.objectContaining({ line: 6, ok: false, code: 'SCHEMA_INVALID', key_id: 'current' }),
    ]);
  });

  it('exits 0 when every line is ok, reading stdin and a rotated key', async () => {
    const current = createTestEnvelope('daily.data.steps.created');
    const previous = createTestEnvelope('daily.data.steps.created', { secret: 'the-previous-secret-value' });
    const result = await runCli(['verify', '-', '--json'], {
      input: `${current.raw}\n${previous.raw}\n`,
      env: { PARTNER_EVENTS_SIGNING_SECRET_PREVIOUS: 'the-previous-secret-value' },
    });
    expect(result.code).toBe(0);
    expect(jsonLines(result.stdout).map((l) => l.key_id)).toEqual(['current', 'previous']);
  });

  it('reads one pretty-printed JSON document, and --now checks age as of that time', async () => {
    const signedAt = Math.floor(Date.now() / 1000) - 3600;
    const old = createTestEnvelope('daily.data.steps.created', { signedAt });
    const file = join(dir.path, 'one.json');
    writeFileSync(file, JSON.stringify(old.envelope, null, 2));
    expect((await runCli(['verify', file, '--json'])).code).toBe(1);
    const asOfThen = await runCli(['verify', file, '--json', '--now', String(signedAt + 10)]);
    expect(asOfThen.code).toBe(0);
    expect(jsonLines(asOfThen.stdout)).toHaveLength(1);
  });

  it('verifies the original message inside dead-letter records', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const file = writeJsonl('dead.jsonl', [deadRecord(event.raw)]);
    const result = await runCli(['verify', file, '--json']);
    expect(jsonLines(result.stdout)[0]).toMatchObject({ ok: true, event_id: event.eventId });
  });

  it('judges a dead-letter record’s age at its broker enqueue time (the clock with --strict-age)', async () => {
    const signedAt = Math.floor(Date.now() / 1000) - 7200;
    const event = createTestEnvelope('daily.data.steps.created', { signedAt });
    const file = writeJsonl('dead.jsonl', [deadRecord(event.raw, { enqueuedAt: signedAt * 1000 + 3000 })]);
    const asWorker = await runCli(['verify', file, '--json']);
    expect(jsonLines(asWorker.stdout)[0]).toMatchObject({ ok: true, event_id: event.eventId });
    const strict = await runCli(['verify', file, '--json', '--strict-age']);
    expect(jsonLines(strict.stdout)[0]).toMatchObject({ ok: false, code: 'TIMESTAMP_TOO_OLD' });
    expect(strict.code).toBe(1);
  });

  it('prints a readable table without --json', async () => {
    const file = writeJsonl('in.jsonl', [createTestEnvelope('daily.data.steps.created').raw]);
    const result = await runCli(['verify', file]);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/LINE\s+RESULT\s+CODE\s+KEY\s+EVENT TYPE\s+EVENT ID/);
    expect(result.stdout).toContain('1 ok, 0 failed');
  });

  it('exits 2 on usage errors and on a missing or weak secret, without echoing the secret', async () => {
    expect((await runCli(['verify', '--bogus'])).code).toBe(2);
    const weak = await runCli(['verify', '-'], { env: { PARTNER_EVENTS_SIGNING_SECRET: 's3cret-value\n' } });
    expect(weak.code).toBe(2);
    expect(weak.stderr).toContain('SECRET_INVALID');
    expect(weak.stderr).not.toContain('s3cret-value');
    const none = await runCli(['verify', '-'], { env: { PARTNER_EVENTS_SIGNING_SECRET: '' } });
    expect(none.code).toBe(2);
  });
});

describe('partner-events replay', () => {
  it('forwards the exact signed body with headers, skips duplicates, rejects forgeries', async () => {
    const app = await startApp();
    try {
      const old = createTestEnvelope('daily.data.heart_rate.created', {
        signedAt: Math.floor(Date.now() / 1000) - 7200,
      });
      const nudge = createTestEnvelope('coach.nudge.created');
      const forged = forgedEnvelope('daily.data.steps.created');
      const file = writeJsonl('dead.jsonl', [
        deadRecord(old.raw),
        nudge.raw,
        deadRecord(old.raw),
        deadRecord(forged.raw),
      ]);
      const dedupe = `sqlite:${join(dir.path, 'dedupe.db')}`;
      const result = await runReplay(file, ['--forward', app.url, '--dedupe', dedupe]);
      expect(result.code).toBe(1); // the forgery was rejected
      const summary = result.summary;
      expect(summary).toMatchObject({ total: 4, forwarded: 2, duplicates: 1, rejected: 1, failed: 0 });
      expect(app.received.map((r) => r.body).sort()).toEqual([old.envelope.body, nudge.envelope.body].sort());
      const hr = app.received.find((r) => r.headers['partner-event-id'] === old.eventId);
      expect(hr?.headers['partner-event-type']).toBe('daily.data.heart_rate.created');
      expect(hr?.headers['content-type']).toBe('application/json');
      // The new dead-letter file holds exactly the event that still fails.
      const deadFile = String(summary?.dead_letter_file);
      const stillDead = readJsonl(deadFile);
      expect(stillDead).toHaveLength(1);
      expect(stillDead[0]).toMatchObject({ code: 'SIGNATURE_MISMATCH', raw: forged.raw });

      // Replaying again never double-applies: everything verified is a duplicate now.
      const again = await runReplay(file, ['--forward', app.url, '--dedupe', dedupe]);
      expect(again.summary).toMatchObject({ forwarded: 0, duplicates: 3, rejected: 1 });
      expect(app.received).toHaveLength(2);
    } finally {
      await app.close();
    }
  });

  it('counts app failures as failed, writes them to a new dead-letter file, exits 1', async () => {
    const app = await startApp(() => 500);
    try {
      const event = createTestEnvelope('daily.data.steps.created');
      const file = writeJsonl('dead.jsonl', [deadRecord(event.raw)]);
      const deadLetter = join(dir.path, 'still-failing.jsonl');
      const flags = ['--forward', app.url, '--dead-letter', deadLetter, '--attempts', '2'];
      const result = await runReplay(file, flags);
      expect(result.code).toBe(1);
      expect(result.summary).toMatchObject({
        total: 1,
        forwarded: 0,
        failed: 1,
        dead_letter_file: deadLetter,
      });
      expect(app.received).toHaveLength(2);
      expect(readJsonl(deadLetter)[0]).toMatchObject({
        raw: event.raw,
        code: 'HANDLER_FAILED',
      });
    } finally {
      await app.close();
    }
  });

  it('--check-age rejects dead events older than 5 minutes', async () => {
    const app = await startApp();
    try {
      const old = createTestEnvelope('daily.data.steps.created', {
        signedAt: Math.floor(Date.now() / 1000) - 7200,
      });
      const file = writeJsonl('dead.jsonl', [deadRecord(old.raw)]);
      const result = await runReplay(file, ['--forward', app.url, '--check-age']);
      expect(result.summary).toMatchObject({ rejected: 1, forwarded: 0 });
      expect(app.received).toHaveLength(0);
    } finally {
      await app.close();
    }
  });

  it('--dry-run reports what would happen and changes nothing', async () => {
    const app = await startApp();
    try {
      const event = createTestEnvelope('daily.data.steps.created');
      const file = writeJsonl('dead.jsonl', [
        deadRecord(event.raw),
        forgedEnvelope('daily.data.steps.created').raw,
      ]);
      const dedupe = `sqlite:${join(dir.path, 'dedupe.db')}`;
      const dry = await runReplay(file, ['--forward', app.url, '--dedupe', dedupe, '--dry-run']);
      const lines = dry.lines;
      expect(lines[0]).toMatchObject({ line: 1, action: 'forward', event_id: event.eventId });
      expect(lines[1]).toMatchObject({ line: 2, action: 'reject', code: 'SIGNATURE_MISMATCH' });
      expect(lines.at(-1)).toMatchObject({ dry_run: true, would_forward: 1, rejected: 1 });
      expect(app.received).toHaveLength(0);
      // Nothing was claimed: a real replay still forwards the event.
      const real = await runReplay(file, ['--forward', app.url, '--dedupe', dedupe]);
      expect(real.summary).toMatchObject({ forwarded: 1 });
    } finally {
      await app.close();
    }
  });

  it('--dry-run judges keys like the replay does: at the record’s enqueue time', async () => {
    const retiredAt = Date.now() - 60_000;
    const secrets = join(dir.path, 'secrets.json');
    writeFileSync(
      secrets,
      JSON.stringify({
        keys: [
          { id: 'new', secret: 'the-new-signing-secret' },
          { id: 'old', secret: 'the-old-signing-secret', not_after: new Date(retiredAt).toISOString() },
        ],
      }),
    );
    const signedAt = Math.floor((retiredAt - 120_000) / 1000);
    const event = createTestEnvelope('daily.data.steps.created', {
      secret: 'the-old-signing-secret',
      signedAt,
    });
    const file = writeJsonl('dead.jsonl', [deadRecord(event.raw, { enqueuedAt: signedAt * 1000 + 1000 })]);
    const dry = await runReplay(file, ['--secrets-file', secrets, '--dry-run']);
    expect(dry.lines[0]).toMatchObject({ action: 'forward', key_id: 'old' });
  });

  it('--dry-run does not create a dedupe database that does not exist', async () => {
    const file = writeJsonl('dead.jsonl', [deadRecord(createTestEnvelope('daily.data.steps.created').raw)]);
    const db = join(dir.path, 'never-created.db');
    const dry = await runReplay(file, ['--dedupe', `sqlite:${db}`, '--dry-run']);
    expect(dry.summary).toMatchObject({ would_forward: 1 });
    expect(existsSync(db)).toBe(false);
  });

  it('exits 2 without --forward', async () => {
    const file = writeJsonl('dead.jsonl', ['{}']);
    const result = await runCli(['replay', file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--forward');
  });
});

describe('partner-events run', () => {
  it('forwards every event of a file source once, dead-letters the rest, and exits 1 for the dead letter', async () => {
    const app = await startApp();
    try {
      const a = createTestEnvelope('daily.data.steps.created');
      const b = createTestEnvelope('coach.nudge.created');
      const file = writeJsonl('events.jsonl', [
        a.raw,
        b.raw,
        a.raw,
        staleEnvelope('daily.data.hrv.created').raw,
      ]);
      const deadLetter = join(dir.path, 'dead.jsonl');
      const result = await runCli([
        'run',
        '--source',
        `file:${file}`,
        '--forward',
        app.url,
        '--dedupe',
        `sqlite:${join(dir.path, 'dedupe.db')}`,
        '--dead-letter',
        deadLetter,
      ]);
      expect(result.code).toBe(1); // a file run with a dead-lettered event is not a success
      expect(app.eventIds().sort()).toEqual([a.eventId, b.eventId].sort());
      expect(readJsonl(deadLetter)).toEqual([expect.objectContaining({ code: 'TIMESTAMP_TOO_OLD' })]);
    } finally {
      await app.close();
    }
  });

  it('drains in-flight work on SIGTERM without starting more (exit 1: the file was not finished)', async () => {
    const events = Array.from({ length: 3 }, () => createTestEnvelope('daily.data.steps.created'));
    const file = writeJsonl(
      'events.jsonl',
      events.map((e) => e.raw),
    );
    const go = join(dir.path, 'go');
    // A handler module that reports each start on stdout and waits until the file "go" exists.
    const handlers = writeHandlers(
      `import { existsSync } from 'node:fs';
export default {
  '*': async (event) => {
    process.stdout.write('started ' + event.event_id + '\\n');
    while (!existsSync(${JSON.stringify(go)})) await new Promise((r) => setTimeout(r, 20));
    process.stdout.write('finished ' + event.event_id + '\\n');
  },
};`,
    );
    const cli = startCli(
      [
        'run',
        '--source',
        `file:${file}`,
        '--handlers',
        handlers,
        '--dedupe',
        `sqlite:${join(dir.path, 'dedupe.db')}`,
        '--concurrency',
        '1',
      ],
      { env: { LOG_LEVEL: 'info' } }, // its log line says when it has taken the signal
    );
    const wait = { timeout: 10_000, interval: 20 };
    await vi.waitFor(() => expect(cli.output()).toMatch(/^started /m), wait);
    cli.child.kill('SIGTERM');
    await vi.waitFor(() => expect(cli.output()).toContain('stopping: draining in-flight events'), wait);
    writeFileSync(go, '');
    const result = await cli.done;
    expect(result.code).toBe(1); // two lines never read: a file stopped short of its end
    // The event in flight finished; no other was started after the signal.
    expect(result.stdout.match(/^started /gm)).toHaveLength(1);
    expect(result.stdout.match(/^finished /gm)).toHaveLength(1);
  });

  it('a handler that kills the worker: after 3 abandoned claims the event is dead-lettered, the rest handled', async () => {
    const [before, poison, after] = [
      createTestEnvelope('daily.data.steps.created'),
      createTestEnvelope('coach.nudge.created'),
      createTestEnvelope('daily.data.sleep.created'),
    ];
    const file = writeJsonl('events.jsonl', [before.raw, poison.raw, after.raw]);
    const handled = join(dir.path, 'handled.txt');
    // Out of memory, a native crash, process.exit: the worker dies without an outcome.
    const handlers = writeHandlers(
      `import { appendFileSync } from 'node:fs';
export default {
  '*': (event) => {
    if (event.event_id === ${JSON.stringify(poison.eventId)}) process.exit(70);
    appendFileSync(${JSON.stringify(handled)}, event.event_id + '\\n');
  },
};`,
    );
    const deadLetters = join(dir.path, 'dead.jsonl');
    const args = ['run', '--source', `file:${file}`, '--handlers', handlers, '--concurrency', '1'];
    args.push('--dedupe', `sqlite:${join(dir.path, 'dedupe.db')}`, '--dead-letter', deadLetters);
    const codes: number[] = [];
    // A supervisor restarting the worker (each restart comes after the 100 ms lease ran out).
    while ((codes.length === 0 || codes.at(-1) === 70) && codes.length < 6) {
      codes.push((await runCli(args, { env: { PARTNER_EVENTS_LEASE_MS: '100' } })).code ?? -1);
    }
    expect(codes).toEqual([70, 70, 70, 1]); // the last run dead-lettered the poison event
    const records = readJsonl(deadLetters);
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ event_id: poison.eventId, code: 'HANDLER_ABANDONED' });
    expect(readFileSync(handled, 'utf8').trim().split('\n')).toEqual([before.eventId, after.eventId]);
  }, 60_000);

  it('exits 2 when the source file does not exist', async () => {
    const result = await runCli([
      'run',
      '--source',
      `file:${join(dir.path, 'missing.jsonl')}`,
      '--forward',
      'http://127.0.0.1:9/',
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('no such file');
  });

  it('survives SIGHUP when its secrets come from the environment (and says how to reload)', async () => {
    const file = writeJsonl('events.jsonl', [createTestEnvelope('daily.data.steps.created').raw]);
    const go = join(dir.path, 'go');
    const handlers = writeHandlers(
      `import { existsSync } from 'node:fs';
export default { '*': async () => { process.stdout.write('started\\n'); while (!existsSync(${JSON.stringify(go)})) await new Promise((r) => setTimeout(r, 20)); } };`,
    );
    const cli = startCli(['run', '--source', `file:${file}`, '--handlers', handlers, '--dedupe', 'memory']);
    await vi.waitFor(() => expect(cli.output()).toContain('started'), { timeout: 10_000, interval: 20 });
    cli.child.kill('SIGHUP');
    await vi.waitFor(() => expect(cli.output()).toContain('SIGHUP'), { timeout: 5_000, interval: 20 });
    writeFileSync(go, '');
    const result = await cli.done;
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('need a restart to change');
  });

  it('survives SIGHUP while it starts (before the secrets are watched), then runs to its end', async () => {
    const file = writeJsonl('events.jsonl', [createTestEnvelope('daily.data.steps.created').raw]);
    // A handlers module that takes a while to load: start-up is still under way meanwhile.
    const handlers = writeHandlers(
      `process.stdout.write('loading handlers\\n');
await new Promise((r) => setTimeout(r, 1500));
export default { '*': () => {} };`,
    );
    const cli = startCli(['run', '--source', `file:${file}`, '--handlers', handlers, '--dedupe', 'memory']);
    await vi.waitFor(() => expect(cli.output()).toContain('loading handlers'), {
      timeout: 10_000,
      interval: 20,
    });
    cli.child.kill('SIGHUP');
    const result = await cli.done;
    // Ended by the signal, the process would have no exit code (null), its one event unhandled.
    expect(result.code).toBe(0);
  });

  it('names the problem and exits 2 on bad arguments', async () => {
    const result = await runCli(['run', '--source', 'kafka://x', '--forward', 'http://127.0.0.1:9/']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('unknown --source');
  });
});

describe('npm start (demo)', () => {
  it('runs the whole pipeline locally and shows each outcome and a summary', async () => {
    const result = await runCli(['demo']);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('handled');
    expect(result.stdout).toContain('duplicate');
    expect(result.stdout).toContain('SIGNATURE_MISMATCH');
    expect(result.stdout).toContain('TIMESTAMP_TOO_OLD');
    expect(result.stdout).toMatch(/14 handled, \d+ duplicates skipped/);
    expect(result.stdout).toContain('each exactly once');
  }, 30_000);
});
