/**
 * Dead-letter records at the edges: a write cut short by a real file-size limit, torn lines,
 * and every other place that appends a line with a durability claim (replay's failed file,
 * `--to file:`).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { deadLetterRecord, JsonlDeadLetterSink } from '../src/dead-letter.js';
import { appendLine } from '../src/durable-append.js';
import { createTestEnvelope } from '../src/testing.js';
import { runCli, startApp, startCli } from './support/cli.js';
import { tempDir } from './support/harness.js';
import { jsonLines } from './support/records.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-dead-letter-');
});
afterEach(() => dir.cleanup());

/** The file's lines, each parsed; fails on a line that is not whole JSON or a missing final newline. */
function wholeLines(path: string): Record<string, unknown>[] {
  const text = readFileSync(path, 'utf8');
  expect(text.endsWith('\n')).toBe(true);
  return text
    .slice(0, -1)
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

async function post(url: string, body: string) {
  const res = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** A validly signed event that fails its schema (dead at once, full raw kept), padded to `bytes`. */
function deadOnArrival(bytes: number) {
  return createTestEnvelope('daily.data.steps.created', {
    fields: { user_id: 'not-a-guid', padding: 'x'.repeat(bytes) },
  });
}

describe('a dead letter cut short by a file-size limit', () => {
  it('is not acked as dead-lettered, leaves only whole lines, and the next record gets its own line', async () => {
    const app = await startApp();
    const deadLetter = join(dir.path, 'dead.jsonl');
    const cli = startCli(
      ['run', '--source', 'http://127.0.0.1:0/events', '--forward', app.url, '--dedupe', 'memory'],
      { env: { LOG_LEVEL: 'info', PARTNER_EVENTS_DEAD_LETTER: deadLetter } },
    );
    try {
      const logs = () => jsonLines(cli.output());
      await vi.waitFor(() => expect(logs().some((l) => l.msg === 'consumer started')).toBe(true), {
        timeout: 15_000,
        interval: 25,
      });
      const ingress = String(logs().find((l) => l.msg === 'listening for envelopes')?.ingress);
      // A real limit on the running worker (after start-up, so tsx's cache is not limited):
      // writes past 100 KiB fail with EFBIG (Node ignores SIGXFSZ) or come back short.
      execFileSync('prlimit', [`--pid=${cli.child.pid}`, '--fsize=102400:102400']);

      const first = deadOnArrival(1000);
      expect(await post(ingress, first.raw)).toMatchObject({ status: 422, body: { code: 'SCHEMA_INVALID' } });
      const big = deadOnArrival(300_000);
      const refused = await post(ingress, big.raw);
      expect(refused.status).toBe(503);
      expect(refused.body).toMatchObject({ outcome: 'retry', reason: 'dead-letter sink unavailable' });
      expect(wholeLines(deadLetter).map((r) => r.event_id)).toEqual([first.eventId]);

      const next = deadOnArrival(1000);
      expect(await post(ingress, next.raw)).toMatchObject({ status: 422 });
      const records = wholeLines(deadLetter);
      expect(records.map((r) => r.event_id)).toEqual([first.eventId, next.eventId]);
      expect(records[1]?.raw).toBe(next.raw);
      const failed = logs().find((l) => l.msg === 'dead-letter write failed: will retry');
      expect(String(failed?.err)).toMatch(
        /cannot append to .*dead\.jsonl: .*\(.*bytes written, then removed\)/,
      );
    } finally {
      cli.child.kill('SIGTERM');
      await cli.done;
      await app.close();
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
    const sink = new JsonlDeadLetterSink(path);
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
    expect(wholeLines(path).map((r) => r.message_id)).toEqual(['a', 'b', 'c']);
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
