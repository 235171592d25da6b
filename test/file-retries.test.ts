/**
 * A file's bytes never change and its run should end: its retries are bounded by the short
 * schedule the file adapter declares (`FILE_RETRY_BOUND`), on the library path (README's
 * `createConsumer` with a file source) as in `run`. Asserted on attempts and outcomes, never on
 * wall time.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createFileSource, FILE_RETRY_BOUND } from '../adapters/file/index.js';
import { type ConsumerOptions, createConsumer, type SettledReport } from '../src/consumer/consumer.js';
import { createTestEnvelope, forgedEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { silentLogger } from '../src/core/logger.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import { tempDir } from './support/harness.js';
import { readJsonl } from './support/records.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-file-retries-');
});
afterEach(() => dir.cleanup());

/** Runs the README's library example over `lines` to the file's end; every settled report, in order. */
async function runFile(
  lines: readonly string[],
  { handler = () => undefined, retry }: { handler?: () => void; retry?: ConsumerOptions['retry'] } = {},
) {
  const path = join(dir.path, 'events.jsonl');
  writeFileSync(path, `${lines.join('\n')}\n`);
  const source = createFileSource({ path });
  const reports: SettledReport[] = [];
  const consumer = createConsumer({
    source,
    dedupe: createMemoryDedupe(),
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    deadLetter: join(dir.path, 'dead.jsonl'),
    logger: silentLogger(),
    onSettled: (report) => reports.push(report),
    ...(retry ? { retry } : {}),
  });
  consumer.on('*', handler);
  await consumer.start();
  await consumer.stopped;
  return { reports, source, consumer };
}

describe('a file source bounds the retries', () => {
  it('declares 3 deliveries with retries after about 1 s and 2 s', () => {
    expect(FILE_RETRY_BOUND).toEqual({ maxAttempts: 3, baseDelayMs: 1000, maxDelayMs: 2000 });
  });

  it("the README example with one forged line: dead-lettered after the file's 3 attempts, not the default 10", async () => {
    const good = createTestEnvelope('daily.data.steps.created');
    const forged = forgedEnvelope('daily.data.heart_rate.created');
    const { reports, source, consumer } = await runFile([good.raw, forged.raw]);
    // The consumer runs with the bounded schedule, whatever its default (10 attempts, 2 s doubling to 10 min).
    expect(consumer.settings.retry).toEqual(FILE_RETRY_BOUND);
    const forgedReports = reports.filter((r) => r.message.id === 'line:2');
    expect(forgedReports.map((r) => [r.attempt, r.outcome.kind])).toEqual([
      [1, 'retry'],
      [2, 'retry'],
      [3, 'dead'],
    ]);
    for (const r of forgedReports.slice(0, 2)) {
      expect(r.outcome).toMatchObject({ code: 'SIGNATURE_MISMATCH' });
      // Each delay within the file's schedule: at most maxDelayMs.
      expect(r.outcome.kind === 'retry' && r.outcome.delayMs).toBeLessThanOrEqual(
        FILE_RETRY_BOUND.maxDelayMs,
      );
    }
    expect(forgedReports[2]?.outcome).toMatchObject({
      code: 'SIGNATURE_MISMATCH',
      reason: expect.stringContaining('gave up after 3 attempts'),
    });
    expect(reports.find((r) => r.message.id === 'line:1')?.outcome).toEqual({
      kind: 'ack',
      result: 'handled',
    });
    expect(readJsonl(join(dir.path, 'dead.jsonl'))).toEqual([
      expect.objectContaining({ code: 'SIGNATURE_MISMATCH', message_id: 'line:2' }),
    ]);
    expect(source.progress).toEqual({ done: true, pendingRetries: 0, nextRetryAt: undefined });
  });

  it('HANDLER_FAILED with a file source: the same 3 attempts', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const { reports } = await runFile([event.raw], {
      handler: () => {
        throw new Error('app down');
      },
    });
    expect(reports.map((r) => [r.attempt, r.outcome.kind, 'code' in r.outcome && r.outcome.code])).toEqual([
      [1, 'retry', 'HANDLER_FAILED'],
      [2, 'retry', 'HANDLER_FAILED'],
      [3, 'dead', 'HANDLER_FAILED'],
    ]);
  });

  it('a shorter retry setting than the bound stays as it is', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const { reports, consumer } = await runFile([event.raw], {
      handler: () => {
        throw new Error('app down');
      },
      retry: { maxAttempts: 2, baseDelayMs: 10, maxDelayMs: 50_000 },
    });
    expect(consumer.settings.retry).toEqual({ maxAttempts: 2, baseDelayMs: 10, maxDelayMs: 2000 });
    expect(reports.map((r) => r.outcome.kind)).toEqual(['retry', 'dead']);
  });
});
