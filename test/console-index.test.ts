import { appendFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { deadLetterRecord } from '../src/core/dead-letter-record.js';
import { DeadLetterIndex } from '../src/sidecar/console/dead-letter-index.js';
import { LiveStats } from '../src/sidecar/console/live-stats.js';
import { tempDir } from './support/harness.js';

const line = (code: 'HANDLER_FAILED' | 'SCHEMA_INVALID', type = 'daily.data.steps.created') => {
  const e = createTestEnvelope(type);
  const record = deadLetterRecord(
    { id: 'm', body: Buffer.from(e.raw), attempt: 1 },
    { code, reason: code, eventId: e.eventId, eventType: type },
    's',
  );
  return `${JSON.stringify(record)}\n`;
};

describe('the dead-letter index', () => {
  const dir = tempDir('phe-console-index-');
  const file = join(dir.path, 'dead.jsonl');
  afterEach(() => writeFileSync(file, ''));

  it('reads only what was appended, and a torn last line waits for its newline', () => {
    writeFileSync(file, line('HANDLER_FAILED') + line('SCHEMA_INVALID'));
    const index = new DeadLetterIndex(file);
    expect(index.page({}, 0, 10).total).toBe(2);
    const third = line('HANDLER_FAILED', 'coach.nudge.created');
    appendFileSync(file, third.slice(0, 40)); // a writer in the middle of its line
    expect(index.page({}, 0, 10).total).toBe(2);
    appendFileSync(file, third.slice(40));
    const page = index.page({}, 0, 10);
    expect(page.total).toBe(3);
    expect(page.letters[0]).toMatchObject({ n: 2, eventType: 'coach.nudge.created' }); // newest first
    expect(JSON.parse(index.line(2) as string).event_type).toBe('coach.nudge.created');
  });

  it('pages and filters by code and dotted type', () => {
    writeFileSync(
      file,
      Array.from({ length: 25 }, (_, i) => line(i % 5 === 0 ? 'SCHEMA_INVALID' : 'HANDLER_FAILED')).join(''),
    );
    const index = new DeadLetterIndex(file);
    expect(index.page({}, 2, 10).letters.map((l) => l.n)).toEqual([4, 3, 2, 1, 0]);
    const schema = index.page({ codes: ['SCHEMA_INVALID'] }, 0, 10);
    expect(schema.matching).toBe(5);
    expect(schema.letters.map((l) => l.n)).toEqual([20, 15, 10, 5, 0]);
    expect(index.page({ type: 'daily.data.*' }, 0, 10).matching).toBe(25);
    expect(index.page({ type: 'coach.*' }, 0, 10).matching).toBe(0);
    expect(index.select({ codes: ['SCHEMA_INVALID'] })).toEqual([0, 5, 10, 15, 20]);
  });

  it('parses every line for a filter a chunk at a time, letting the event loop run in between', async () => {
    writeFileSync(
      file,
      Array.from({ length: 5000 }, () => line('HANDLER_FAILED')).join('') + line('SCHEMA_INVALID'),
    );
    const index = new DeadLetterIndex(file);
    let turns = 0;
    const ticker = setInterval(() => turns++, 0);
    try {
      await index.summarizeAll();
    } finally {
      clearInterval(ticker);
    }
    expect(turns).toBeGreaterThan(0); // timers ran while the 5,001 lines were parsed
    expect(index.page({ codes: ['SCHEMA_INVALID'] }, 0, 10).letters.map((l) => l.n)).toEqual([5000]);
  });

  it('a replaced file is a new generation, indexed from its start', () => {
    writeFileSync(file, line('HANDLER_FAILED') + line('HANDLER_FAILED'));
    const index = new DeadLetterIndex(file);
    const before = index.page({}, 0, 10);
    const rotated = join(dir.path, 'new.jsonl');
    writeFileSync(rotated, line('SCHEMA_INVALID'));
    renameSync(rotated, file);
    const after = index.page({}, 0, 10);
    expect(after.generation).not.toBe(before.generation);
    expect(after.letters.map((l) => l.code)).toEqual(['SCHEMA_INVALID']);
  });
});

describe('the live numbers', () => {
  it('count per second over the window, and forget what fell out of it', () => {
    let now = 1_000_000_000;
    const stats = new LiveStats({ windowSeconds: 10, now: () => now });
    const handled = {
      outcome: { kind: 'ack', result: 'handled' },
      keyId: 'k1',
      attempt: 1,
      handlerDurationMs: 5,
    };
    const forged = {
      outcome: { kind: 'retry', code: 'SIGNATURE_MISMATCH', delayMs: 1 },
      keyId: undefined,
      attempt: 1,
    };
    for (let i = 0; i < 3; i++) stats.observe(handled as never);
    stats.observe(forged as never);
    now += 1000;
    stats.observe(handled as never);
    const s = stats.snapshot();
    expect(s.series.handled.slice(-2)).toEqual([3, 1]);
    expect(s.totals).toMatchObject({ handled: 4, retried: 1 });
    expect(s.rejectedByCode).toEqual({ SIGNATURE_MISMATCH: 1 });
    expect(s.verifiedByKeyId).toEqual({ k1: 4 });
    expect(s.handlerLatencyMs.p50).toBe(5);
    now += 10_000; // the whole window later
    expect(stats.snapshot().totals.handled).toBe(0);
  });
});
