/**
 * Dead-letter records at the edges: a write cut short by a real file-size limit, torn lines,
 * every other place that appends a line with a durability claim (replay's failed file,
 * `--to file:`), and the bounded records of messages that never verified.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createConsumer } from '../src/consumer/consumer.js';
import { createJsonlDeadLetters } from '../src/consumer/dead-letter-sink.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { deadLetterRecord, rawOfDeadLetter, storedRawOfDeadLetter } from '../src/core/dead-letter-record.js';
import { appendLine } from '../src/core/durable-append.js';
import { VerificationError } from '../src/core/errors.js';
import { silentLogger } from '../src/core/logger.js';
import { configFromEnv, resolveSidecarConfig } from '../src/sidecar/config.js';
import { postEnvelope as post, runCli, runReplay, startApp, startRun } from './support/cli.js';
import { tempDir } from './support/harness.js';
import { jsonLines, readJsonl } from './support/records.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-dead-letter-');
});
afterEach(() => dir.cleanup());

/** An app, and `run` with an HTTP ingress that forwards to it and dead-letters to dead.jsonl here. */
async function startWorker() {
  const app = await startApp();
  const deadLetter = join(dir.path, 'dead.jsonl');
  const ingress = ['--source', 'http://127.0.0.1:0/events', '--forward', app.url, '--dedupe', 'memory'];
  const run = await startRun(ingress, { env: { PARTNER_EVENTS_DEAD_LETTER: deadLetter } }).catch(
    async (error: unknown) => {
      await app.close();
      throw error;
    },
  );
  const close = async () => {
    await run.stop();
    await app.close();
  };
  return { ...run, deadLetter, close };
}

/** A consumer (test secret, no logs) that writes its dead letters to dead.jsonl here, at `path`. */
function deadLetteringConsumer(settings: { deadLetterMaxUnverifiedBytes?: number } = {}) {
  const path = join(dir.path, 'dead.jsonl');
  const consumer = createConsumer({
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    deadLetter: path,
    logger: silentLogger(),
    ...settings,
  });
  return { path, consumer };
}

/** A validly signed event that fails its schema (dead at once, full raw kept), padded to `bytes`. */
function deadOnArrival(bytes: number) {
  return createTestEnvelope('daily.data.steps.created', {
    fields: { user_id: 'not-a-guid', padding: 'x'.repeat(bytes) },
  });
}

describe('a dead letter cut short by a file-size limit', () => {
  it('is not acked as dead-lettered, leaves only whole lines, and the next record gets its own line', async () => {
    const cli = await startWorker();
    const { deadLetter } = cli;
    try {
      // A real limit on the running worker (after start-up, so tsx's cache is not limited):
      // writes past 100 KiB fail with EFBIG (Node ignores SIGXFSZ) or come back short.
      execFileSync('prlimit', [`--pid=${cli.child.pid}`, '--fsize=102400:102400']);

      const first = deadOnArrival(1000);
      expect(await post(cli.ingress, first.raw)).toMatchObject({
        status: 422,
        body: { code: 'SCHEMA_INVALID' },
      });
      const big = deadOnArrival(300_000);
      const refused = await post(cli.ingress, big.raw);
      expect(refused.status).toBe(503);
      expect(refused.body).toMatchObject({ outcome: 'retry', reason: 'dead-letter sink unavailable' });
      expect(readJsonl(deadLetter).map((r) => r.event_id)).toEqual([first.eventId]);

      const next = deadOnArrival(1000);
      expect(await post(cli.ingress, next.raw)).toMatchObject({ status: 422 });
      const records = readJsonl(deadLetter);
      expect(records.map((r) => r.event_id)).toEqual([first.eventId, next.eventId]);
      expect(records[1]?.raw).toBe(next.raw);
      const failed = cli.logs().find((l) => l.msg === 'dead-letter write failed: will retry');
      expect(String(failed?.err)).toMatch(
        /cannot append to .*dead\.jsonl: .*\(.*bytes written, then removed\)/,
      );
    } finally {
      await cli.close();
    }
  });
});

describe('appending a line', () => {
  it('ends a torn last line (a crash mid-append) before appending, so no line joins it', async () => {
    const path = join(dir.path, 'dead.jsonl');
    writeFileSync(path, '{"whole":1}\n{"torn":');
    await appendLine(path, '{"next":2}');
    expect(readFileSync(path, 'utf8')).toBe('{"whole":1}\n{"torn":\n{"next":2}\n');
  });

  it('the sink writes every record whole, one per line, also for concurrent writes', async () => {
    const path = join(dir.path, 'dead.jsonl');
    const sink = createJsonlDeadLetters(path);
    const record = (id: string, size: number) =>
      deadLetterRecord(
        {
          id,
          body: createTestEnvelope('daily.data.steps.created', { fields: { pad: 'y'.repeat(size) } }).raw,
          attempt: 1,
        },
        { code: 'HANDLER_FAILED', reason: 'x', eventId: id },
        'test',
      );
    await Promise.all([
      sink.write(record('a', 200_000)),
      sink.write(record('b', 10)),
      sink.write(record('c', 70_000)),
    ]);
    expect(readJsonl(path).map((r) => r.message_id)).toEqual(['a', 'b', 'c']);
  });

  it('replay --to file: appends through the same path (a torn target line is ended first)', async () => {
    const target = join(dir.path, 'events.jsonl');
    writeFileSync(target, '{"torn":');
    const event = createTestEnvelope('daily.data.steps.created');
    const input = join(dir.path, 'in.jsonl');
    writeFileSync(input, `${event.raw}\n`);
    const result = await runCli(['replay', input, '--to', `file:${target}`, '--dedupe', 'memory', '--json']);
    expect(result.code).toBe(0);
    expect(readFileSync(target, 'utf8')).toBe(`{"torn":\n${event.raw}\n`);
  });
});

/** Hostile bodies an unauthenticated sender may POST, `size` bytes each (± one character). */
function hostileBodies(size: number): { name: string; body: Buffer }[] {
  const repeat = (unit: string | Buffer) => {
    const bytes = Buffer.isBuffer(unit) ? unit : Buffer.from(unit, 'utf8');
    return Buffer.concat(Array.from({ length: Math.floor(size / bytes.length) }, () => bytes));
  };
  return [
    { name: '0x01 bytes', body: repeat(Buffer.from([0x01])) },
    { name: 'NUL bytes', body: repeat(Buffer.from([0x00])) },
    { name: 'quotes', body: repeat('"') },
    { name: 'backslashes', body: repeat('\\') },
    { name: 'U+2028', body: repeat('\u2028') },
    { name: 'invalid UTF-8', body: repeat(Buffer.from([0xff, 0xc3])) },
    { name: 'emoji', body: repeat('🩺') },
    { name: 'DEL and C1 controls', body: repeat('\u007f\u0085') },
    { name: 'JSON-ish with escapes', body: repeat('{"a":"\\u0001\\"\\\\"}\n') },
    { name: 'plain text', body: repeat('plain text ') },
  ];
}

describe('dead letters of messages that never verified are stored bounded', () => {
  it('through the HTTP ingress, dead.jsonl grows at most 1.4 bytes per byte received, for any input', async () => {
    const cli = await startWorker();
    const { deadLetter } = cli;
    try {
      const sizeOf = () => (existsSync(deadLetter) ? statSync(deadLetter).size : 0);
      const ratios: Record<string, number> = {};
      // Below the 64 KiB prefix (kept whole), and up to the ingress's 1 MiB limit (a prefix kept).
      for (const size of [60 * 1024, 1024 * 1024 - 4]) {
        for (const { name, body } of hostileBodies(size)) {
          const before = sizeOf();
          const res = await fetch(cli.ingress, { method: 'POST', body });
          expect(res.status, name).toBe(422);
          const grown = sizeOf() - before;
          ratios[`${name} ${body.length}`] = grown / body.length;
          expect(grown, `${name}, ${body.length} bytes`).toBeLessThanOrEqual(1.4 * body.length);
        }
      }
      const worst = Object.entries(ratios).sort(([, a], [, b]) => b - a)[0];
      console.info(`RELIABILITY ${JSON.stringify({ scenario: 'dead-letter-growth', worst, ratios })}`);
      const records = readJsonl(deadLetter);
      expect(records).toHaveLength(20);
      for (const record of records) {
        expect(record.event_id).toBeNull();
        if (record.raw_truncated) {
          expect(record.raw_bytes).toBeGreaterThan(64 * 1024);
          expect(record.raw_sha256).toMatch(/^[0-9a-f]{64}$/);
        }
      }
      expect(records.filter((r) => r.raw_truncated)).toHaveLength(10);
    } finally {
      await cli.close();
    }
  });

  it('keeps the bytes exactly up to the limit, as text only while JSON escaping costs no more than base64 (property)', () => {
    const limit = 256;
    const byteArb = fc.oneof(
      fc.uint8Array({ maxLength: 600 }),
      fc
        .array(fc.constantFrom('\u0001', '"', '\\', '\u2028', '🩺', 'a', '\n', '\u007f', 'é'), {
          maxLength: 300,
        })
        .map((parts) => new Uint8Array(Buffer.from(parts.join(''), 'utf8'))),
    );
    fc.assert(
      fc.property(byteArb, fc.boolean(), (bytes, asString) => {
        const received = Buffer.from(bytes);
        const body = asString ? received.toString('utf8') : bytes;
        const receivedBytes = asString ? Buffer.from(body as string, 'utf8') : received;
        const record = deadLetterRecord(
          { id: 'm', body, attempt: 1 },
          { code: 'MALFORMED_ENVELOPE', reason: 'x' },
          'test',
          new Date(0),
          { maxUnverifiedBytes: limit },
        );
        const kept = Math.min(receivedBytes.length, limit);
        // Growth: never more than base64 of what was kept.
        expect(Buffer.byteLength(JSON.stringify(record.raw)) - 2).toBeLessThanOrEqual(
          Math.ceil(kept / 3) * 4,
        );
        const stored = Buffer.from(storedRawOfDeadLetter(record));
        expect(stored.equals(receivedBytes.subarray(0, kept))).toBe(true);
        if (receivedBytes.length > limit) {
          expect(record).toMatchObject({
            raw_truncated: true,
            raw_bytes: receivedBytes.length,
            raw_sha256: createHash('sha256').update(receivedBytes).digest('hex'),
          });
          expect(() => rawOfDeadLetter(record)).toThrow(VerificationError);
        } else {
          expect(record.raw_truncated).toBeUndefined();
          expect(Buffer.from(rawOfDeadLetter(record)).equals(receivedBytes)).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('a verified event keeps its full raw message, byte for byte, whatever its size and characters', async () => {
    const { path, consumer } = deadLetteringConsumer();
    consumer.on('*', async () => undefined);
    // Signed, 300 KB of quotes, backslashes, U+2028 and emoji, dead for its schema.
    const event = createTestEnvelope('daily.data.steps.created', {
      fields: { user_id: 'not-a-guid', padding: '"\\\u2028🩺'.repeat(40_000) },
    });
    const received = Buffer.from(event.raw, 'utf8');
    expect(received.length).toBeGreaterThan(300_000);
    const result = await consumer.process({ id: 'm1', body: new Uint8Array(received), attempt: 1 });
    expect(result.outcome).toMatchObject({ kind: 'dead', code: 'SCHEMA_INVALID' });
    await consumer.stop();
    const [record] = readJsonl(path);
    expect(record).toMatchObject({ event_id: event.eventId, raw_encoding: 'utf8' });
    expect(record?.raw_truncated).toBeUndefined();
    expect(Buffer.from(String(record?.raw), 'utf8').equals(received)).toBe(true);
  });

  it('the limit is a consumer setting (deadLetterMaxUnverifiedBytes) and a sidecar key with its variable', async () => {
    const { path, consumer } = deadLetteringConsumer({ deadLetterMaxUnverifiedBytes: 10 });
    await consumer.process({ id: 'm1', body: 'not an envelope at all', attempt: 1 });
    await consumer.stop();
    expect(readJsonl(path)[0]).toMatchObject({ raw: 'not an env', raw_truncated: true, raw_bytes: 22 });

    const config = resolveSidecarConfig({
      file: { source: 'file:x', forward: 'http://127.0.0.1:9/' },
      env: configFromEnv({ PARTNER_EVENTS_DEAD_LETTER_MAX_UNVERIFIED_BYTES: '2048' }),
    });
    expect(config.deadLetterMaxUnverifiedBytes).toBe(2048);
    expect(
      resolveSidecarConfig({ file: { source: 'file:x', forward: 'http://127.0.0.1:9/' } }),
    ).toMatchObject({
      deadLetterMaxUnverifiedBytes: 65536,
    });
  });
});

describe('a dead letter whose enqueue time is no time', () => {
  it('is written with enqueued_at null, not retried forever: process() given NaN, Infinity or an out-of-range time', async () => {
    const { path, consumer } = deadLetteringConsumer();
    consumer.on('*', () => {});
    try {
      // As `Number(m.Attributes?.SentTimestamp)` gives when the attribute was not asked for.
      const times = [Number.NaN, Number.POSITIVE_INFINITY, 9e15];
      for (const [i, enqueuedAt] of times.entries()) {
        const result = await consumer.process({ id: `m-${i}`, body: 'not json', attempt: 1, enqueuedAt });
        expect(result.outcome).toMatchObject({ kind: 'dead', code: 'MALFORMED_ENVELOPE' });
      }
      const schemaInvalid = deadOnArrival(10);
      const result = await consumer.process({
        id: 'm-s',
        body: schemaInvalid.raw,
        attempt: 1,
        enqueuedAt: Number.NaN,
      });
      expect(result.outcome).toMatchObject({ kind: 'dead', code: 'SCHEMA_INVALID' });
    } finally {
      await consumer.stop();
    }
    const records = readJsonl(path);
    expect(records.map((r) => [r.message_id, r.enqueued_at])).toEqual([
      ['m-0', null],
      ['m-1', null],
      ['m-2', null],
      ['m-s', null],
    ]);
  });
});

describe('a truncated dead letter is refused, never re-driven', () => {
  /** A valid, signed 100 KB event recorded as SIGNATURE_MISMATCH (say, before a rotation reached us). */
  function truncatedRecordFile() {
    const event = createTestEnvelope('daily.data.steps.created', { fields: { note: 'z'.repeat(100_000) } });
    const record = deadLetterRecord(
      { id: 'sqs-1', body: event.raw, attempt: 10 },
      { code: 'SIGNATURE_MISMATCH', reason: 'signature does not match any active signing secret' },
      'sqs:q',
    );
    expect(record.raw_truncated).toBe(true);
    const file = join(dir.path, 'dead.jsonl');
    writeFileSync(file, `${JSON.stringify(record)}\n`);
    return { file, event, record };
  }

  it('replay reports it as DEAD_LETTER_TRUNCATED and keeps it truncated in the failed file', async () => {
    const { file, event, record } = truncatedRecordFile();
    const app = await startApp();
    try {
      const failed = join(dir.path, 'failed.jsonl');
      const result = await runReplay(file, ['--forward', app.url, '--dead-letter', failed]);
      expect(result.code).toBe(1);
      expect(app.received).toEqual([]);
      const [line, summary] = result.lines;
      expect(line).toMatchObject({
        outcome: 'dead',
        code: 'DEAD_LETTER_TRUNCATED',
        recorded_code: 'SIGNATURE_MISMATCH',
      });
      expect(String(line?.reason)).toContain(`of the message's ${Buffer.byteLength(event.raw)} bytes`);
      expect(summary).toMatchObject({ rejected: 1, failure_codes: { DEAD_LETTER_TRUNCATED: 1 } });
      const [again] = readJsonl(failed);
      expect(again).toMatchObject({
        code: 'DEAD_LETTER_TRUNCATED',
        raw_truncated: true,
        raw_bytes: record.raw_bytes,
        raw_sha256: record.raw_sha256,
        raw: record.raw,
      });

      const dry = await runReplay(file, ['--forward', app.url, '--dry-run']);
      expect(dry.lines[0]).toMatchObject({ action: 'reject', code: 'DEAD_LETTER_TRUNCATED' });
      expect(dry.code).toBe(1);
    } finally {
      await app.close();
    }
  });

  it('verify reports it as DEAD_LETTER_TRUNCATED', async () => {
    const { file } = truncatedRecordFile();
    const result = await runCli(['verify', file, '--json']);
    expect(result.code).toBe(1);
    expect(jsonLines(result.stdout)[0]).toMatchObject({ ok: false, code: 'DEAD_LETTER_TRUNCATED' });
  });
});
