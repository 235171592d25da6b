/**
 * One contract for `partner-events replay` from every broker's side channel (`replayContract`): a
 * worker whose app fails every event fills the side channel (a DLQ, a poison queue or hub) with
 * three good events, a forgery and a mismatch, one good event is marked done in the worker's
 * store, then replay drains it: a dry run changes nothing and `--code` selects by the recorded
 * code, filters leave messages where they were, a failure stays (on the side channel and in the
 * dead-letter file) while a done event is skipped, and a replay SIGKILLed half-way loses nothing;
 * on a second side channel, `--max` reads that many and says what it left unread.
 * A transport plugs in with one `ReplayHarness`: how to fill its side channel, name it to the CLI
 * and count what it holds, and what it declares where transports differ (`ReplayDeclarations`).
 *
 * The checks run in order on one side channel (each starts from what the one before left).
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { ConsumerOptions } from '../../src/consumer/consumer.js';
import { createConsumer } from '../../src/consumer/consumer.js';
import {
  createTestEnvelope,
  forgedEnvelope,
  TEST_SIGNING_SECRET,
  type TestEnvelope,
} from '../../src/consumer/testing.js';
import { silentLogger } from '../../src/core/logger.js';
import type { RawMessage, SourceAdapter } from '../../src/core/source-adapter.js';
import { createSqliteDedupe } from '../../src/dedupe/sqlite.js';
import { runCli, startApp, startCli } from './cli.js';
import { tempDir } from './harness.js';
import { jsonLines, readJsonl } from './records.js';

/** Where transports differ. */
export interface ReplayDeclarations {
  /**
   * How replay reads the side channel:
   * - `queue`: it holds each message for a visibility timeout and deletes what it is done with;
   * - `log`: it reads, never consumes (an Event Hub keeps every event).
   */
  readonly reading: 'queue' | 'log';
  /**
   * The code each copy on the side channel carries (`null`: none), in any order: what the worker
   * recorded with it (a broker that moves a message on by itself records none).
   */
  readonly recordedCodes: readonly (string | null)[];
}

/** What the contract hands the harness to fill the side channel with. */
export interface ReplaySetup {
  /** A temp folder for this file, removed after it. */
  readonly dir: string;
  /** The worker's SQLite dedupe store, which replay shares. */
  readonly dedupePath: string;
  /** What the worker must receive (and fail), in this order. */
  readonly envelopes: readonly TestEnvelope[];
}

/** A side channel that holds a dead copy of each of the setup's envelopes. */
export interface ReplayFixture {
  /** The side channel as `partner-events replay` takes it (`sqs:URL`, `azure-event-hubs:HUB`, …). */
  readonly spec: string;
  /** The environment the CLI finds its connection in. */
  readonly env: NodeJS.ProcessEnv;
  /** Flags every replay of this side channel takes (a consumer group, how long to wait for more). */
  readonly args: readonly string[];
  /** A part of the spec the replay audit record must name (never a secret). */
  readonly auditNames: string;
  /** Messages another reader could take now (a queue: once replay's holds are released). */
  available(): Promise<number>;
  /** Every message the side channel holds, taken or not. */
  stored(): Promise<number>;
  /** Removes what setup made, if the server's own end does not. */
  cleanup?(): Promise<void>;
}

export interface ReplayHarness {
  readonly declares: ReplayDeclarations;
  /**
   * Fills a fresh side channel: a worker whose app fails every event receives `envelopes` until
   * each has a copy there. Once per file; the test file starts the server in its `beforeAll`.
   */
  setup(context: ReplaySetup): Promise<ReplayFixture>;
  /** Another side channel, holding a copy of each envelope put there directly (no code). */
  fresh(envelopes: readonly TestEnvelope[]): Promise<ReplayFixture>;
}

/** The codes with which a replay rejects an envelope (never forwarded, in any replay). */
const REJECTIONS = new Set(['ENVELOPE_MISMATCH', 'SIGNATURE_MISMATCH']);
/** A replay child's own deadline: past it, the test fails with the child's output. */
const CHILD = { killAfterMs: 90_000 };

/** Validly signed, but the envelope's event_id is not the body's: ENVELOPE_MISMATCH, dead at once. */
function mismatchedEnvelope(): TestEnvelope {
  const valid = createTestEnvelope('daily.data.steps.created');
  const envelope = { ...valid.envelope, event_id: 'not-the-body-event-id' };
  return { ...valid, raw: JSON.stringify(envelope), envelope };
}

async function markDone(dedupePath: string, eventId: string): Promise<void> {
  const store = createSqliteDedupe({ path: dedupePath });
  const claim = await store.claim(eventId, 60_000);
  if (claim.status === 'claimed') await store.complete(eventId, claim.token, 3_600_000);
  await store.close();
}

/** Sorted as text, `null` included, so that two lists of codes compare whatever their order. */
function sortedCodes(codes: readonly unknown[]): string[] {
  return codes.map(String).sort();
}

/** How an in-process worker fills a side channel (`fillWithFailingWorker`). */
export interface FailingWorker<M extends RawMessage> {
  /** A source that sends each dead message to the side channel. */
  readonly source: SourceAdapter<M>;
  readonly retry: ConsumerOptions<M>['retry'];
  /** Publishes one envelope (the `index`th) where the source reads. */
  send(envelope: TestEnvelope, index: number): Promise<void>;
  /** Messages on the side channel so far. */
  sideChannel(): Promise<number>;
}

/**
 * For harnesses with an in-process worker: a consumer on `worker.source` fails every event
 * (after `retry.maxAttempts`, each goes to the side channel) until each envelope has its copy.
 */
export async function fillWithFailingWorker<M extends RawMessage>(
  context: ReplaySetup,
  worker: FailingWorker<M>,
): Promise<void> {
  const consumer = createConsumer<M>({
    source: worker.source,
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    dedupe: createSqliteDedupe({ path: context.dedupePath }),
    deadLetter: join(context.dir, 'worker-dead.jsonl'),
    logger: silentLogger(),
    retry: worker.retry,
  });
  consumer.on('*', () => {
    throw new Error('the app is down');
  });
  await consumer.start();
  try {
    for (const [i, e] of context.envelopes.entries()) await worker.send(e, i);
    await vi.waitFor(async () => expect(await worker.sideChannel()).toBe(context.envelopes.length), {
      timeout: 30_000,
      interval: 50,
    });
  } finally {
    await consumer.stop();
  }
}

/** The contract, as a `describe` block named `replay contract: <transport>`. */
export function replayContract(transport: string, harness: ReplayHarness): void {
  const { declares } = harness;
  const queue = declares.reading === 'queue';
  const good = [
    createTestEnvelope('daily.data.steps.created'),
    createTestEnvelope('coach.nudge.created'),
    createTestEnvelope('daily.data.hrv.created'),
  ];
  const forged = forgedEnvelope('daily.data.weight.created');
  const mismatched = mismatchedEnvelope();
  /** good[2] is done in the worker's store by the time replay runs (say its ack was lost). */
  const done = good[2] as TestEnvelope;
  const forwardable = [good[0], good[1]].map((e) => e?.eventId).sort();
  const total = good.length + 2;

  describe(`replay contract: ${transport}`, () => {
    let dir: ReturnType<typeof tempDir>;
    let dedupePath: string;
    let fixture: ReplayFixture;

    beforeAll(async () => {
      dir = tempDir('phe-replay-');
      dedupePath = join(dir.path, 'dedupe.db');
      fixture = await harness.setup({
        dir: dir.path,
        dedupePath,
        envelopes: [...good, forged, mismatched],
      });
      await markDone(dedupePath, done.eventId);
    }, 90_000);

    afterAll(async () => {
      await fixture?.cleanup?.();
      dir?.cleanup();
    });

    /** `partner-events replay SPEC` with the worker's dedupe store; later flags win. */
    function replayArgs(args: readonly string[]): string[] {
      return [
        'replay',
        fixture.spec,
        '--dedupe',
        `sqlite:${dedupePath}`,
        ...fixture.args,
        '--dead-letter',
        join(dir.path, 'replay-failed.jsonl'),
        ...args,
      ];
    }

    function replay(args: readonly string[]) {
      return runCli(replayArgs(args), { env: fixture.env, ...CHILD });
    }

    it('--dry-run judges every message and changes nothing; --code selects by the recorded code', async () => {
      const result = await replay(['--dry-run', '--json']);
      const lines = jsonLines(result.stdout);
      expect(result.code, result.stderr).toBe(1); // the forgery and the mismatch would be rejected
      expect(lines.at(-1)).toMatchObject({
        total,
        would_forward: 2,
        duplicates: 1,
        rejected: 2,
        dry_run: true,
      });
      const rows = lines.filter((l) => l.action);
      expect(rows.every((l) => typeof l.message_id === 'string')).toBe(true);
      expect(sortedCodes(rows.map((l) => l.recorded_code))).toEqual(sortedCodes(declares.recordedCodes));
      const recordedRejections = rows.filter((l) => REJECTIONS.has(String(l.recorded_code)));
      expect(recordedRejections.map((l) => l.action)).toEqual(recordedRejections.map(() => 'reject'));
      expect(await fixture.available()).toBe(total);
      // Each code recorded on one copy selects that copy; with none recorded, --code selects none.
      const once = [...new Set(declares.recordedCodes)].filter(
        (code): code is string =>
          code !== null && declares.recordedCodes.indexOf(code) === declares.recordedCodes.lastIndexOf(code),
      );
      for (const code of once.length > 0 ? once : ['ENVELOPE_MISMATCH']) {
        const coded = await replay(['--dry-run', '--json', '--code', code]);
        const selected = once.length > 0 ? 1 : 0;
        expect(jsonLines(coded.stdout).at(-1), code).toMatchObject({
          total: selected,
          rejected: selected,
          filtered_out: total - selected,
        });
        expect(await fixture.available()).toBe(total);
      }
    }, 60_000);

    it('messages the filters leave out are available again at once; --max caps what is read', async () => {
      const app = await startApp();
      try {
        const result = await replay(['--forward', app.url, '--type', 'no.such.type', '--json']);
        expect(result.code, result.stderr).toBe(0);
        expect(jsonLines(result.stdout).at(-1)).toMatchObject({ total: 0, filtered_out: total });
        expect(app.received).toHaveLength(0);
        expect(await fixture.available()).toBe(total);
        const capped = await replay(['--dry-run', '--json', '--max', '2']);
        expect(jsonLines(capped.stdout).at(-1)).toMatchObject({ total: 2 });
        expect(await fixture.available()).toBe(total);
      } finally {
        await app.close();
      }
    }, 60_000);

    it(`a failure stays in the dead-letter file${queue ? ' and on the queue; a done event is deleted' : '; the log keeps every event'}`, async () => {
      const failing = await startApp(() => 500);
      const deadLetter = join(dir.path, 'failed-1.jsonl');
      try {
        const result = await replay([
          '--forward',
          failing.url,
          '--attempts',
          '1',
          '--dead-letter',
          deadLetter,
          '--json',
        ]);
        expect(result.code, result.stderr).toBe(1);
        expect(jsonLines(result.stdout).at(-1)).toMatchObject({
          total,
          forwarded: 0,
          duplicates: 1,
          failed: 2,
          rejected: 2,
          dead_letter_file: deadLetter,
        });
        expect(
          readJsonl(deadLetter)
            .map((r) => r.code)
            .sort(),
        ).toEqual(['ENVELOPE_MISMATCH', 'HANDLER_FAILED', 'HANDLER_FAILED', 'SIGNATURE_MISMATCH']);
        // Forged and mismatched envelopes were never forwarded.
        expect(failing.eventIds().sort()).toEqual(forwardable);
        // A queue: at once (released, not left to a visibility timeout), all but the done event.
        const left = queue ? total - 1 : total;
        expect(await fixture.available()).toBe(left);
        expect(await fixture.stored()).toBe(left);
        // One audit record per replay, beside the dead-letter file.
        const audit = readJsonl(join(dir.path, 'partner-events-replays.jsonl'));
        expect(audit.at(-1)).toMatchObject({ dry_run: false, exit_code: 1, counts: { failed: 2 } });
        expect(String(audit.at(-1)?.source)).toContain(fixture.auditNames);
      } finally {
        await failing.close();
      }
    }, 60_000);

    it('a replay SIGKILLed half-way loses nothing; the second run sends only what was not done', async () => {
      const app = await startApp();
      const before = await fixture.stored();
      try {
        // 20/min: one event every 3 s, so the kill lands between two sends. A queue's messages
        // held by the killed run come back after its visibility timeout (2 s).
        const first = startCli(
          replayArgs([
            '--forward',
            app.url,
            '--rate',
            '20/min',
            ...(queue ? ['--visibility-timeout', '2'] : []),
            '--dead-letter',
            join(dir.path, 'killed.jsonl'),
            '--json',
          ]),
          { env: fixture.env, ...CHILD },
        );
        await vi.waitFor(() => expect(app.received).toHaveLength(1), { timeout: 30_000, interval: 20 });
        // Killed once the first event is recorded done (and, from a queue, deleted): a kill
        // between a send and its record would send that event again, as the worker would
        // (docs/security.md).
        const store = createSqliteDedupe({ path: dedupePath });
        const sent = app.eventIds()[0] ?? '';
        try {
          await vi.waitFor(async () => expect(await store.peek(sent)).toBe('done'), {
            timeout: 30_000,
            interval: 20,
          });
        } finally {
          await store.close();
        }
        if (queue) {
          await vi.waitFor(async () => expect(await fixture.stored()).toBe(before - 1), {
            timeout: 30_000,
            interval: 50,
          });
        }
        first.child.kill('SIGKILL');
        await first.done;
        expect(app.received).toHaveLength(1);
        // The second run waits longer than the visibility timeout for messages before it calls
        // the queue drained.
        const settle = queue ? ['--settle-seconds', '5'] : [];
        const second = await replay(['--forward', app.url, '--json', ...settle]);
        expect(second.code, second.stderr).toBe(1); // the two bad ones, again
        // A queue no longer holds the event the killed run sent; a log still does (a duplicate now).
        expect(jsonLines(second.stdout).at(-1)).toMatchObject({
          total: queue ? before - 1 : before,
          forwarded: 1,
          rejected: 2,
        });
        expect(app.eventIds().sort()).toEqual(forwardable);
        // The forgery and the mismatch stay on the side channel; a log keeps everything.
        expect(await fixture.available()).toBe(queue ? 2 : total);
      } finally {
        await app.close();
      }
    }, 120_000);

    it('--max N replays N messages and says the read stopped with messages left; they stay, untouched', async () => {
      const events = Array.from({ length: 5 }, () => createTestEnvelope('daily.data.steps.created'));
      const source = await harness.fresh(events);
      const app = await startApp();
      const run = (args: readonly string[]) =>
        runCli(
          [
            'replay',
            source.spec,
            '--dedupe',
            `sqlite:${join(dir.path, 'max-dedupe.db')}`,
            ...source.args,
            '--dead-letter',
            join(dir.path, 'max-failed.jsonl'),
            ...args,
          ],
          { env: source.env, ...CHILD },
        );
      try {
        // As many as --max allows, or fewer: nothing is said.
        const all = await run(['--dry-run', '--max', '10', '--json']);
        const allSummary = jsonLines(all.stdout).at(-1);
        expect(allSummary, all.stderr).toMatchObject({ total: 5, would_forward: 5 });
        expect(allSummary).not.toHaveProperty('stopped_at_max');
        expect(await source.available()).toBe(5);
        // Without --max, one message at a time, nothing is said either (all fail here, and stay).
        const down = await startApp(() => 500);
        try {
          const unlimited = await run([
            '--forward',
            down.url,
            '--attempts',
            '1',
            '--concurrency',
            '1',
            '--json',
          ]);
          const unlimitedSummary = jsonLines(unlimited.stdout).at(-1);
          expect(unlimitedSummary, unlimited.stderr).toMatchObject({ total: 5, failed: 5 });
          expect(unlimitedSummary).not.toHaveProperty('stopped_at_max');
        } finally {
          await down.close();
        }
        expect(await source.available()).toBe(5);

        // A queue's long visibility timeout: a message received beyond --max and not let go at
        // once would stay hidden past the checks below.
        const hidden = queue ? ['--visibility-timeout', '600'] : [];
        const capped = await run(['--forward', app.url, '--max', '2', ...hidden, '--json']);
        const summary = jsonLines(capped.stdout).at(-1);
        expect(capped.code, capped.stderr).toBe(0);
        expect(summary).toMatchObject({ total: 2, forwarded: 2, stopped_at_max: true, unread: 'remain' });
        expect(app.received).toHaveLength(2);
        // The three not read are where they were, visible to the next reader now.
        expect(await source.available()).toBe(queue ? 3 : 5);
        expect(await source.stored()).toBe(queue ? 3 : 5);
        const resume = summary?.resume as { since: string | null } | undefined;
        if (!queue) expect(resume).toMatchObject({ sequence_numbers: expect.any(Object) });
        else expect(summary).not.toHaveProperty('resume');

        const text = await run(['--dry-run', '--max', '2']);
        expect(text.stdout).toContain(
          queue
            ? 'stopped at --max: messages remain in the queue (those not read were left there, untouched): run again'
            : 'stopped at --max: events remain on the hub after those read (last sequence number read: partition',
        );

        // Run again (a hub: from where the summary says): the rest, and nothing more is claimed.
        // A queue's --max 3 reads exactly what is left; the queue then says it is empty.
        const since = resume?.since ? ['--since', resume.since] : [];
        const max = queue ? '3' : '10';
        const rest = await run(['--forward', app.url, '--max', max, ...since, ...hidden, '--json']);
        const restSummary = jsonLines(rest.stdout).at(-1);
        expect(rest.code, rest.stderr).toBe(0);
        expect(restSummary).toMatchObject({ forwarded: 3 });
        expect(restSummary).not.toHaveProperty('stopped_at_max');
        expect(restSummary).not.toHaveProperty('unread');
        expect(app.eventIds().sort()).toEqual(events.map((e) => e.eventId).sort());
        expect(await source.stored()).toBe(queue ? 0 : 5);
        if (!queue) {
          // Exactly the hub's events: it knows it read to the end, so nothing is claimed.
          const exact = await run(['--dry-run', '--max', '5', '--json']);
          const exactSummary = jsonLines(exact.stdout).at(-1);
          expect(exactSummary, exact.stderr).toMatchObject({ total: 5, duplicates: 5 });
          expect(exactSummary).not.toHaveProperty('stopped_at_max');
        }
      } finally {
        await app.close();
        await source.cleanup?.();
      }
    }, 120_000);
  });
}
