import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createFileSource } from '../adapters/file/index.js';
import { createMemorySource } from '../adapters/memory/index.js';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { deadLetterRecord } from '../src/core/dead-letter-record.js';
import { tempDir } from './support/harness.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-sources-');
});
afterEach(() => dir.cleanup());

const never = new AbortController().signal;

/** `receive` may return [] after a wait: call it until something (or the end) arrives. */
async function receiveSome<M>(source: {
  receive(max: number, s: AbortSignal): Promise<readonly M[] | null>;
}) {
  for (;;) {
    const batch = await source.receive(10, never);
    if (batch === null || batch.length > 0) return batch ?? [];
  }
}

describe('FileSource', () => {
  it('stamps each line with its first read time and keeps it on retries (no false TIMESTAMP_TOO_OLD)', async () => {
    const file = join(dir.path, 'in.jsonl');
    writeFileSync(file, `${createTestEnvelope('daily.data.steps.created').raw}\n\n`);
    const source = createFileSource({ path: file });
    const before = Date.now();
    const [first] = (await source.receive(10, never)) ?? [];
    expect(first?.enqueuedAt).toBeGreaterThanOrEqual(before);
    await source.settle(first!, { kind: 'retry', code: 'HANDLER_FAILED', reason: 'x', delayMs: 5 });
    const [second] = await receiveSome(source);
    expect(second).toMatchObject({ line: 1, attempt: 2, enqueuedAt: first?.enqueuedAt });
    await source.settle(second!, { kind: 'ack', result: 'handled' });
    expect(await source.receive(10, never)).toBeNull();
    expect(source.stats).toEqual({ lines: 2, acked: 1, dead: 0 });
    await source.close();
  });

  it('replays the original message of a dead-letter record with its broker enqueue time', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const enqueuedAt = Date.parse('2026-11-20T10:00:00.000Z');
    const record = deadLetterRecord(
      { id: 'sqs-7', body: event.raw, attempt: 10, enqueuedAt },
      { code: 'HANDLER_FAILED', reason: 'down' },
      'sqs:q',
    );
    const file = join(dir.path, 'dead.jsonl');
    writeFileSync(file, `${JSON.stringify(record)}\n`);
    const source = createFileSource({ path: file });
    const [message] = (await source.receive(10, never)) ?? [];
    expect(message).toMatchObject({
      body: event.raw,
      attempt: 1,
      enqueuedAt,
      metadata: { original_code: 'HANDLER_FAILED', original_source: 'sqs:q', original_message_id: 'sqs-7' },
    });
    await source.close();
  });

  it('returns promptly from a waiting receive when its signal aborts', async () => {
    const file = join(dir.path, 'in.jsonl');
    writeFileSync(file, `${createTestEnvelope('daily.data.steps.created').raw}\n`);
    const source = createFileSource({ path: file });
    const [m] = (await source.receive(10, never)) ?? [];
    await source.settle(m!, { kind: 'retry', code: 'HANDLER_FAILED', reason: 'x', delayMs: 60_000 });
    const stop = new AbortController();
    const waiting = source.receive(10, stop.signal);
    stop.abort();
    expect(await waiting).toEqual([]);
    await source.close();
  });
});

describe('MemorySource', () => {
  it('raises the attempt on retry, keeps the enqueue time, and ends when empty if asked', async () => {
    const source = createMemorySource({ endWhenEmpty: true, now: () => 1_000 });
    source.send('x');
    const [m] = (await source.receive(10, never)) ?? [];
    await source.settle(m!, { kind: 'retry', code: 'HANDLER_FAILED', reason: 'x', delayMs: 1 });
    const [again] = await receiveSome(source);
    expect(again).toMatchObject({ id: m?.id, attempt: 2, enqueuedAt: 1_000 });
    await source.settle(again!, { kind: 'dead', code: 'HANDLER_FAILED', reason: 'x' });
    expect(await source.receive(10, never)).toBeNull();
    await source.idle();
    expect(source.settled.map((s) => s.outcome.kind)).toEqual(['retry', 'dead']);
  });
});
