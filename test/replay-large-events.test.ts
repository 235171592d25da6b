/**
 * `partner-events replay` and events larger than the default `maxEnvelopeBytes` (1 MiB): a worker
 * that raised its limit accepted them, so its replay must too (from `--config`, the environment
 * or `--max-envelope-bytes`); and whatever replay cannot re-drive, its new dead-letter file keeps
 * whole, never as a 64 KiB prefix of a record that was whole in its input.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createTestEnvelope, type TestEnvelope } from '../src/consumer/testing.js';
import { deadLetterRecord } from '../src/core/dead-letter-record.js';
import { DEFAULT_MAX_ENVELOPE_BYTES } from '../src/core/envelope.js';
import { runCli, runReplay, startApp } from './support/cli.js';
import { tempDir } from './support/harness.js';
import { readJsonl, writeJsonl } from './support/records.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-replay-large-');
});
afterEach(() => dir.cleanup());

const FOUR_MIB = 4 * 1024 * 1024;

/** A valid, signed event of about 1.2 MB: over the default limit, under the worker's raised one. */
function bigEvent(): TestEnvelope {
  const event = createTestEnvelope('daily.data.steps.created', { fields: { note: 'z'.repeat(1_200_000) } });
  expect(Buffer.byteLength(event.raw)).toBeGreaterThan(DEFAULT_MAX_ENVELOPE_BYTES);
  return event;
}

/**
 * The worker's record of a verified event its app refused: kept whole, with the ids from the signed
 * body (test/support/records.ts's `deadRecord` records an unverified message, which a worker cuts
 * to `deadLetterMaxUnverifiedBytes`).
 */
function handlerFailedRecord(event: TestEnvelope): string {
  const failure = {
    code: 'HANDLER_FAILED' as const,
    reason: 'app was down',
    eventId: event.eventId,
    eventType: String(event.event.event_type),
  };
  const record = deadLetterRecord({ id: 'sqs-1', body: event.raw, attempt: 10 }, failure, 'sqs:q');
  expect(record.raw).toBe(event.raw);
  return JSON.stringify(record);
}

/** A worker config that raises both limits for large events, as docs/concepts.md advises. */
function workerConfig(appUrl: string): string {
  const path = join(dir.path, 'worker.yaml');
  writeFileSync(
    path,
    [
      'source: http://127.0.0.1:0/events',
      `forward: ${appUrl}`,
      `dedupe: sqlite:${join(dir.path, 'dedupe.db')}`,
      `maxEnvelopeBytes: ${FOUR_MIB}`,
      `deadLetterMaxUnverifiedBytes: ${FOUR_MIB}`,
    ].join('\n'),
  );
  return path;
}

describe("replay takes the worker's maxEnvelopeBytes", () => {
  it('re-drives a >1 MiB event with --config raising the limit, exactly once; the dry run agrees', async () => {
    const big = bigEvent();
    const file = writeJsonl(dir.path, 'dead.jsonl', [handlerFailedRecord(big)]);
    const app = await startApp();
    try {
      const config = workerConfig(app.url);
      const dry = await runReplay(file, ['--config', config, '--dry-run']);
      expect(dry.code, dry.stderr).toBe(0);
      expect(dry.lines[0]).toMatchObject({ event_id: big.eventId, action: 'forward' });

      // The worker's store (runReplay's default is memory): a second run finds the event done.
      const replay = ['--config', config, '--dedupe', `sqlite:${join(dir.path, 'dedupe.db')}`];
      const first = await runReplay(file, replay);
      expect(first.code, first.stderr).toBe(0);
      expect(first.summary).toMatchObject({ forwarded: 1, rejected: 0, failed: 0, dead_letter_file: null });
      const second = await runReplay(file, replay);
      expect(second.code, second.stderr).toBe(0);
      expect(second.summary).toMatchObject({ forwarded: 0, duplicates: 1 });
      expect(app.received).toHaveLength(1);
      expect(app.received[0]?.body).toBe(big.envelope.body); // the signed body, all of it
    } finally {
      await app.close();
    }
  }, 60_000);

  it('--max-envelope-bytes wins over PARTNER_EVENTS_MAX_ENVELOPE_BYTES, which wins over the file', async () => {
    const big = bigEvent();
    const file = writeJsonl(dir.path, 'dead.jsonl', [big.raw]);
    const config = workerConfig('http://127.0.0.1:9/events');
    const small = { env: { PARTNER_EVENTS_MAX_ENVELOPE_BYTES: '1048576' } };
    const action = (result: Awaited<ReturnType<typeof runReplay>>) => [result.lines[0]?.action, result.code];

    expect(action(await runReplay(file, ['--config', config, '--dry-run'], small))).toEqual(['reject', 1]);
    const flag = ['--config', config, '--dry-run', '--max-envelope-bytes', String(FOUR_MIB)];
    expect(action(await runReplay(file, flag, small))).toEqual(['forward', 0]);
    const raisedByEnv = { env: { PARTNER_EVENTS_MAX_ENVELOPE_BYTES: String(FOUR_MIB) } };
    expect(action(await runReplay(file, ['--dry-run'], raisedByEnv))).toEqual(['forward', 0]);
    const bad = await runReplay(file, ['--dry-run', '--max-envelope-bytes', '0']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--max-envelope-bytes must be a positive integer');
  }, 60_000);
});

describe('the new dead-letter file keeps what replay could not re-drive whole', () => {
  it('with the default limit a >1 MiB event is rejected, and its copy is byte-equal to the input', async () => {
    const recorded = bigEvent();
    const bare = bigEvent();
    const input = [handlerFailedRecord(recorded), bare.raw];
    const file = writeJsonl(dir.path, 'dead.jsonl', input);
    const app = await startApp();
    try {
      const failed = join(dir.path, 'failed.jsonl');
      const result = await runReplay(file, ['--forward', app.url, '--dead-letter', failed]);
      expect(result.code).toBe(1);
      expect(result.summary).toMatchObject({ rejected: 2, failure_codes: { ENVELOPE_TOO_LARGE: 2 } });
      expect(app.received).toEqual([]);
      const records = readJsonl(failed);
      expect(records.map((r) => [r.code, r.raw_encoding, r.raw_truncated])).toEqual([
        ['ENVELOPE_TOO_LARGE', 'utf8', undefined],
        ['ENVELOPE_TOO_LARGE', 'utf8', undefined],
      ]);
      expect(records[0]?.raw === recorded.raw).toBe(true); // no diff of two 1.2 MB strings on failure
      expect(records[1]?.raw === bare.raw).toBe(true);
      expect(records[0]?.metadata).toMatchObject({ original_code: 'HANDLER_FAILED' });

      // The operator's copy replays, once the limit is raised.
      const again = await runReplay(failed, ['--forward', app.url, '--max-envelope-bytes', String(FOUR_MIB)]);
      expect(again.code, again.stderr).toBe(0);
      expect(again.summary).toMatchObject({ forwarded: 2 });
      expect(app.eventIds().sort()).toEqual([recorded.eventId, bare.eventId].sort());
    } finally {
      await app.close();
    }
  }, 60_000);
});

describe('verify judges a large event with the limit replay would use', () => {
  it('ENVELOPE_TOO_LARGE at the default limit; ok with --max-envelope-bytes or the environment, as the worker', async () => {
    const file = join(dir.path, 'big.jsonl');
    writeFileSync(file, `${handlerFailedRecord(bigEvent())}\n`);
    const byDefault = await runCli(['verify', file, '--json']);
    expect(byDefault.code).toBe(1);
    expect(JSON.parse(byDefault.stdout)).toMatchObject({ ok: false, code: 'ENVELOPE_TOO_LARGE' });
    const byFlag = await runCli(['verify', file, '--json', '--max-envelope-bytes', String(FOUR_MIB)]);
    expect(byFlag.code).toBe(0);
    expect(JSON.parse(byFlag.stdout)).toMatchObject({ ok: true, code: null });
    const byEnv = await runCli(['verify', file, '--json'], {
      env: { PARTNER_EVENTS_MAX_ENVELOPE_BYTES: String(FOUR_MIB) },
    });
    expect(byEnv.code).toBe(0);
    const badFlag = await runCli(['verify', file, '--max-envelope-bytes', 'lots']);
    expect(badFlag.code).toBe(2);
  });
});
