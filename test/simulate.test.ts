/** `partner-events simulate`, run as a child process against real local targets. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { runCli, startApp, startRun } from './support/cli.js';
import { startFauxqsQueue } from './support/fauxqs.js';
import { tempDir } from './support/harness.js';
import { jsonLines } from './support/records.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-simulate-');
});
afterEach(() => dir.cleanup());

interface Summary {
  sent: number;
  errors: number;
  by_kind: Record<'first' | 'duplicate' | 'retry' | 'forged' | 'stale', number>;
  expected_event_ids: string[];
  must_not_handle: string[];
  undelivered_event_ids: string[];
  seed: number;
}

describe('partner-events simulate', () => {
  it('publishes to SQS like the service; the worker handles each expected event exactly once', async () => {
    const { queue, env, close } = await startFauxqsQueue('simulate');
    const app = await startApp();
    try {
      const sim = await runCli(
        [
          'simulate',
          '--to',
          `sqs:${queue.url}`,
          '--rate',
          '20/s',
          '--duration',
          '1',
          '--duplicates',
          '30%',
          '--retries',
          '30%',
          '--forged',
          '10%',
          '--stale',
          '10%',
          '--time-scale',
          '600',
          '--drain',
          '5',
          '--seed',
          '11',
          '--json',
        ],
        { env },
      );
      expect(sim.code).toBe(0);
      const lines = jsonLines(sim.stdout);
      const summary = lines.at(-1) as unknown as Summary;
      const k = summary.by_kind;
      expect(k.first + k.forged + k.stale).toBe(20);
      expect(k.duplicate).toBeGreaterThan(0);
      expect(k.retry).toBeGreaterThan(0);
      expect(summary.sent).toBe(lines.length - 1);
      expect(summary.expected_event_ids).toHaveLength(k.first);
      // A duplicate is the first delivery's envelope again; a retry is the same event re-signed later.
      const deliveries = lines.slice(0, -1) as {
        kind: string;
        event_id: string;
        attempt: number;
        t_ms: number;
        due_ms: number;
      }[];
      for (const d of deliveries.filter((x) => x.kind === 'retry')) {
        const first = deliveries.find((x) => x.kind === 'first' && x.event_id === d.event_id);
        expect(d.attempt).toBe(2);
        // Planned 100 ms (60 s / 600) after the first, and never sent before it is due (on a busy
        // machine both may go late, by different amounts: compare the plan, then each send to it).
        expect(d.due_ms - (first?.due_ms ?? 0)).toBeGreaterThanOrEqual(99);
        expect(d.t_ms).toBeGreaterThanOrEqual(d.due_ms);
        expect(first?.t_ms).toBeGreaterThanOrEqual(first?.due_ms ?? Number.POSITIVE_INFINITY);
      }

      const dedupe = `sqlite:${join(dir.path, 'd.db')}`;
      const deadLetter = join(dir.path, 'dead.jsonl');
      const source = `sqs:${queue.url}`;
      const worker = await startRun(
        ['--source', source, '--forward', app.url, '--dedupe', dedupe, '--dead-letter', deadLetter],
        { env: { ...env, LOG_LEVEL: 'debug' } },
      );
      try {
        const genuine = k.first + k.duplicate + k.retry;
        // Every genuine delivery acked (handled or duplicate), every stale one dead-lettered.
        await vi.waitFor(
          () => {
            const log = worker.logs();
            expect(log.filter((l) => l.msg === 'event acked')).toHaveLength(genuine);
            expect(log.filter((l) => l.msg === 'event dead-lettered')).toHaveLength(k.stale);
          },
          { timeout: 20_000, interval: 50 },
        );
        const received = app.eventIds();
        expect(received.sort()).toEqual([...summary.expected_event_ids].sort());
        for (const id of summary.must_not_handle) expect(received).not.toContain(id);
      } finally {
        expect((await worker.stop()).code).toBe(0);
      }
    } finally {
      await app.close();
      await close();
    }
  }, 40_000);

  it('retries on the compressed schedule when an HTTP ingress does not answer 2xx', async () => {
    const seen = new Set<string>();
    const app = await startApp((req) => {
      const id = String(JSON.parse(req.body).event_id);
      if (seen.has(id)) return 200;
      seen.add(id);
      return 503;
    });
    try {
      const result = await runCli([
        'simulate',
        '--to',
        app.url,
        '--rate',
        '10/s',
        '--duration',
        '0.5',
        '--duplicates',
        '0',
        '--retries',
        '0',
        '--forged',
        '0',
        '--stale',
        '0',
        '--time-scale',
        '300',
        '--json',
      ]);
      expect(result.code).toBe(0);
      const lines = jsonLines(result.stdout);
      const summary = lines.at(-1) as unknown as Summary;
      expect(summary.by_kind).toMatchObject({ first: 5, retry: 5 });
      expect(summary.undelivered_event_ids).toEqual([]);
      expect(summary.expected_event_ids).toHaveLength(5);
      const deliveries = lines.slice(0, -1) as {
        kind: string;
        event_id: string;
        t_ms: number;
        detail: string;
        accepted: boolean;
      }[];
      for (const id of summary.expected_event_ids) {
        const mine = deliveries.filter((d) => d.event_id === id);
        expect(mine.map((d) => [d.kind, d.detail])).toEqual([
          ['first', 'HTTP 503'],
          ['retry', 'HTTP 200'],
        ]);
        expect((mine[1]?.t_ms ?? 0) - (mine[0]?.t_ms ?? 0)).toBeGreaterThanOrEqual(190); // 60 s / 300
      }
    } finally {
      await app.close();
    }
  });

  it('is bounded, repeatable with --seed (but never reuses event ids), and prints the expected set', async () => {
    const run = (file: string, ...extra: string[]) =>
      runCli([
        'simulate',
        '--to',
        `file:${join(dir.path, file)}`,
        '--rate',
        '40/s',
        '--duration',
        '0.5',
        '--types',
        'daily.data.*',
        '--seed',
        '5',
        '--forged',
        '20%',
        '--time-scale',
        '1000',
        ...extra,
      ]);
    const a = await run('a.jsonl', '--json');
    const b = await run('b.jsonl', '--json');
    const summaryA = jsonLines(a.stdout).at(-1) as unknown as Summary;
    const summaryB = jsonLines(b.stdout).at(-1) as unknown as Summary;
    expect(summaryA.seed).toBe(5);
    expect(summaryA.by_kind).toEqual(summaryB.by_kind);
    expect(summaryA.by_kind.first + summaryA.by_kind.forged + summaryA.by_kind.stale).toBe(20);
    const shape = (text: string) =>
      jsonLines(text)
        .slice(0, -1)
        .map((d) => `${d.kind}:${d.event_type}`)
        .sort();
    expect(shape(a.stdout)).toEqual(shape(b.stdout));
    expect(summaryA.expected_event_ids.some((id) => summaryB.expected_event_ids.includes(id))).toBe(false);
    const written = readFileSync(join(dir.path, 'a.jsonl'), 'utf8').trim().split('\n');
    expect(written).toHaveLength(summaryA.sent);
    for (const line of written) expect(JSON.parse(line).event_type).toMatch(/^daily\.data\./);

    const text = await run('c.jsonl');
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/must handle each of these \d+ event ids exactly once/);
    expect(
      text.stdout
        .trim()
        .split('\n')
        .filter((l) => l.startsWith('evt_')).length,
    ).toBeGreaterThan(0);
  }, 60_000);

  it('exits 2 on usage errors', async () => {
    expect((await runCli(['simulate', '--rate', '5/s'])).stderr).toContain('simulate needs --to');
    const bad = await runCli(['simulate', '--to', 'file:x', '--duplicates', '150%']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--duplicates must be a share');
    expect((await runCli(['simulate', '--to', 'file:x', '--types', 'lab.*'])).stderr).toContain(
      'matches no catalog event type',
    );
  });
});
