import { readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createMemorySource } from '../adapters/memory/index.js';
import { createJsonlDeadLetters } from '../src/consumer/dead-letter-sink.js';
import { TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { deadLetterRecord } from '../src/core/dead-letter-record.js';
import { ConfigError } from '../src/core/errors.js';
import { createConsumer, createLogger } from '../src/index.js';
import { tempDir } from './support/harness.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-options-');
});
afterEach(() => dir.cleanup());

const secrets = [{ id: 'current', secret: TEST_SIGNING_SECRET }];

function capturingLogger() {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { logger, lines };
}

describe('consumer settings', () => {
  it('refuses a misspelt setting, naming it', () => {
    const { logger } = capturingLogger();
    const make = () => createConsumer({ secrets, logger, ...({ maxAttemps: 3 } as object) });
    expect(make).toThrow(ConfigError);
    expect(make).toThrow(/maxAttemps/);
    expect(() => createConsumer({ secrets, logger, retry: { maxAttemps: 3 } as never })).toThrow(
      /maxAttemps/,
    );
  });

  it('names the field and the problem for a bad value', () => {
    expect(() => createConsumer({ secrets, concurrency: 0 })).toThrow(/concurrency/);
  });

  it('warns when retention is shorter than the publisher’s 48 h retry window', () => {
    const { logger, lines } = capturingLogger();
    createConsumer({ secrets, logger, retentionMs: 3_600_000 });
    expect(lines.some((l) => String(l.msg).includes('48 h retry window'))).toBe(true);
  });

  it('warns that an in-memory dedupe store forgets on restart', () => {
    const { logger, lines } = capturingLogger();
    createConsumer({ secrets, logger });
    expect(lines.some((l) => String(l.msg).includes('no dedupe store given'))).toBe(true);
  });
});

describe('JSONL dead-letter sink', () => {
  it('creates the file on the first record and starts a new one after the file is rotated away', async () => {
    const path = join(dir.path, 'nested', 'dead.jsonl');
    const sink = createJsonlDeadLetters(path);
    const record = (id: string) =>
      deadLetterRecord({ id, body: 'raw', attempt: 1 }, { code: 'MALFORMED_ENVELOPE', reason: 'x' }, 'test');
    await sink.write(record('a'));
    renameSync(path, join(dir.path, 'dead.1.jsonl'));
    await Promise.all([sink.write(record('b')), sink.write(record('c'))]);
    await sink.close();
    expect(readFileSync(join(dir.path, 'dead.1.jsonl'), 'utf8').trim().split('\n')).toHaveLength(1);
    const current = readFileSync(path, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).message_id);
    expect(current).toEqual(['b', 'c']);
    expect(sink.count).toBe(3);
  });

  it('keeps non-UTF-8 bytes as base64', () => {
    const record = deadLetterRecord(
      { id: 'm', body: Uint8Array.from([0xff, 0xfe, 0x00]), attempt: 1 },
      { code: 'MALFORMED_ENVELOPE', reason: 'not UTF-8' },
      'test',
    );
    expect(record).toMatchObject({ raw: '//4A', raw_encoding: 'base64' });
  });
});

describe('the settled log', () => {
  it('counts acks in an `events settled` summary at info and writes a line only for retries and dead events', async () => {
    const { createTestEnvelope, forgedEnvelope } = await import('../src/consumer/testing.js');
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    const source = createMemorySource({ endWhenEmpty: true });
    const previous = 'previous-secret-value-0123456789';
    const consumer = createConsumer({
      source,
      logger,
      secrets: [
        { id: 'current', secret: TEST_SIGNING_SECRET },
        { id: 'previous', secret: previous },
      ],
      deadLetter: join(dir.path, 'dead.jsonl'),
      retry: { maxAttempts: 1 },
      concurrency: 1,
    });
    consumer.on('*', vi.fn());
    const first = createTestEnvelope('daily.data.steps.created');
    source.send(first.raw);
    source.send(first.raw);
    source.send(createTestEnvelope('daily.data.steps.created', { secret: previous }).raw);
    source.send(forgedEnvelope('daily.data.steps.created').raw);
    await consumer.start();
    await consumer.stopped;
    const logged = lines.map((l) => JSON.parse(l));
    expect(logged.filter((l) => l.msg === 'event acked')).toEqual([]);
    expect(logged.filter((l) => l.msg === 'event dead-lettered')).toHaveLength(1);
    const summaries = logged.filter((l) => l.msg === 'events settled');
    expect(summaries).toHaveLength(1);
    expect(summaries[0]).toMatchObject({
      level: 30,
      settled: 4,
      handled: 2,
      duplicate: 1,
      ignored: 0,
      retried: 0,
      dead_lettered: 1,
      key_ids: { current: 2, previous: 1 },
    });
  });
  it('counts any key id, even one named like an object property', async () => {
    const { createTestEnvelope } = await import('../src/consumer/testing.js');
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    const source = createMemorySource({ endWhenEmpty: true });
    const consumer = createConsumer({
      source,
      logger,
      secrets: [{ id: '__proto__', secret: TEST_SIGNING_SECRET }],
      deadLetter: join(dir.path, 'dead.jsonl'),
    });
    consumer.on('*', vi.fn());
    source.send(createTestEnvelope('daily.data.steps.created').raw);
    await consumer.start();
    await consumer.stopped;
    const summary = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'events settled');
    expect(Object.entries(summary.key_ids)).toEqual([['__proto__', 1]]);
  });
});

describe('secrets never leak', () => {
  it('logs the matched key id on every outcome line, and never a secret', async () => {
    const { createTestEnvelope, forgedEnvelope } = await import('../src/consumer/testing.js');
    const lines: string[] = [];
    const logger = pino({ level: 'trace' }, { write: (line: string) => void lines.push(line) });
    const source = createMemorySource({ endWhenEmpty: true });
    const previous = 'previous-secret-value-0123456789';
    const consumer = createConsumer({
      source,
      logger,
      secrets: [
        { id: 'current', secret: TEST_SIGNING_SECRET },
        { id: 'previous', secret: previous },
      ],
      deadLetter: join(dir.path, 'dead.jsonl'),
      retry: { maxAttempts: 1 },
    });
    consumer.on('*', vi.fn());
    source.send(createTestEnvelope('daily.data.steps.created').raw);
    source.send(createTestEnvelope('daily.data.steps.created', { secret: previous }).raw);
    source.send(forgedEnvelope('daily.data.steps.created').raw);
    await consumer.start();
    await consumer.stopped;
    const text = lines.join('');
    const acked = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'event acked');
    expect(acked.map((l) => l.key_id).sort()).toEqual(['current', 'previous']);
    expect(text).not.toContain(TEST_SIGNING_SECRET);
    expect(text).not.toContain(previous);
    expect(readFileSync(join(dir.path, 'dead.jsonl'), 'utf8')).not.toContain(TEST_SIGNING_SECRET);
  });
});

describe('secrets never leak into spans', () => {
  it('exports no secret, signature or body in any span (a real SDK registered)', async () => {
    const { createTestEnvelope, forgedEnvelope } = await import('../src/consumer/testing.js');
    const { recordSpans, spanText } = await import('./support/spans.js');
    const recorder = recordSpans();
    try {
      const previous = 'previous-secret-value-0123456789';
      const source = createMemorySource({ endWhenEmpty: true });
      const consumer = createConsumer({
        source,
        logger: pino({ level: 'silent' }),
        secrets: [
          { id: 'current', secret: TEST_SIGNING_SECRET },
          { id: 'previous', secret: previous },
        ],
        deadLetter: join(dir.path, 'dead.jsonl'),
        retry: { maxAttempts: 1 },
      });
      consumer.on('*', (_event, context) => {
        // A failing handler whose error message holds the body: not exported either.
        if (context.attempt > 0 && context.eventType === 'coach.nudge.created')
          throw new Error(context.rawBody);
      });
      const sent = [
        createTestEnvelope('daily.data.steps.created'),
        createTestEnvelope('daily.data.steps.created', { secret: previous }),
        createTestEnvelope('coach.nudge.created'),
        forgedEnvelope('daily.data.steps.created'),
      ];
      for (const e of sent) source.send(e.raw);
      await consumer.start();
      await consumer.stopped;
      const spans = recorder.spans();
      expect(spans.filter((s) => s.name.startsWith('process ')).length).toBe(4);
      const text = spanText(spans);
      expect(text).toContain('partner_events.key_id'); // the probe sees attributes at all
      expect(text).not.toContain(TEST_SIGNING_SECRET);
      expect(text).not.toContain(previous);
      for (const e of sent) {
        expect(text).not.toContain(e.envelope.signature);
        expect(text).not.toContain(e.envelope.body);
      }
    } finally {
      await recorder.stop();
    }
  });
});

describe('the default logger', () => {
  it('redacts secret-looking fields wherever they appear', () => {
    const lines: string[] = [];
    const logger = createLogger({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    logger.info(
      { secret: 'a-secret', config: { signingSecret: 'b-secret', connectionString: 'c-secret' } },
      'x',
    );
    expect(lines.join('')).not.toMatch(/[abc]-secret/);
    expect(lines.join('')).toContain('[redacted]');
  });
});
