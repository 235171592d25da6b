/**
 * `replay azure-event-hubs:HUB` against the test Event Hubs broker: a poison hub the worker fills
 * itself, and a main hub replayed over a time window with events before and after it. A hub is
 * read, never consumed: every event is still there afterwards, and a second run (after a SIGKILL
 * half-way) sends only what the first had not done.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createEventHubsAdapter, type EventHubsMessage } from '../adapters/event-hubs/index.js';
import { createConsumer } from '../src/consumer/consumer.js';
import {
  createTestEnvelope,
  forgedEnvelope,
  TEST_SIGNING_SECRET,
  type TestEnvelope,
} from '../src/consumer/testing.js';
import { silentLogger } from '../src/core/logger.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { runCli, startApp, startCli } from './support/cli.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import type { TestHub } from './support/event-hubs-server.js';
import { tempDir } from './support/harness.js';
import { jsonLines, readJsonl } from './support/records.js';

/** Validly signed, but the envelope's event_id is not the body's: ENVELOPE_MISMATCH, dead at once. */
function mismatchedEnvelope(): TestEnvelope {
  const valid = createTestEnvelope('daily.data.steps.created');
  const envelope = { ...valid.envelope, event_id: 'not-the-body-event-id' };
  return { ...valid, raw: JSON.stringify(envelope), envelope };
}

let broker: EventHubsBroker;
let dir: ReturnType<typeof tempDir>;
let main: TestHub;
let poison: TestHub;
let dedupePath: string;
const good = [
  createTestEnvelope('daily.data.steps.created'),
  createTestEnvelope('coach.nudge.created'),
  createTestEnvelope('daily.data.hrv.created'),
];
const forged = forgedEnvelope('daily.data.weight.created');
const mismatched = mismatchedEnvelope();
/** good[2] is done in the worker's store by the time replay runs. */
const done = good[2] as TestEnvelope;

async function markDone(eventId: string): Promise<void> {
  const store = createSqliteDedupe({ path: dedupePath });
  const claim = await store.claim(eventId, 60_000);
  if (claim.status === 'claimed') await store.complete(eventId, claim.token, 3_600_000);
  await store.close();
}

function replay(hub: TestHub, args: string[]) {
  return runCli(
    [
      'replay',
      `azure-event-hubs:${hub.name}`,
      '--dedupe',
      `sqlite:${dedupePath}`,
      '--consumer-group',
      'replay',
      '--dead-letter',
      join(dir.path, `failed-${hub.name}.jsonl`),
      ...args,
    ],
    { env: { EVENTHUBS_CONNECTION_STRING: main.connectionString }, killAfterMs: 90_000 },
  );
}

async function allEvents(hub: TestHub): Promise<number> {
  let n = 0;
  for (const id of hub.partitionIds) n += (await hub.events(id)).length;
  return n;
}

beforeAll(async () => {
  dir = tempDir('phe-replay-eh-');
  dedupePath = join(dir.path, 'dedupe.db');
  broker = await EventHubsBroker.start();
  main = await broker.createHub(2);
  poison = await broker.createHub(1);
  // The worker: its app fails every event, so each ends on the poison hub (the mismatch at once).
  const consumer = createConsumer<EventHubsMessage>({
    source: createEventHubsAdapter({
      connectionString: main.connectionString,
      checkpointStore: join(dir.path, 'checkpoints.db'),
      deadLetterQueue: poison.name,
      logger: silentLogger(),
    }),
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    dedupe: createSqliteDedupe({ path: dedupePath }),
    deadLetter: join(dir.path, 'worker-dead.jsonl'),
    logger: silentLogger(),
    retry: { maxAttempts: 2, baseDelayMs: 10, maxDelayMs: 20 },
  });
  consumer.on('*', () => {
    throw new Error('the app is down');
  });
  await consumer.start();
  try {
    for (const [i, e] of [...good, forged, mismatched].entries()) await main.publish(String(i % 2), e.raw);
    await vi.waitFor(async () => expect((await poison.events('0')).length).toBe(5), {
      timeout: 30_000,
      interval: 50,
    });
  } finally {
    await consumer.stop();
  }
  await markDone(done.eventId);
}, 60_000);

afterAll(async () => {
  await broker?.stop();
  dir?.cleanup();
});

describe('replay from an Event Hubs poison hub', () => {
  it('--dry-run judges each copy by its recorded code; --code selects them', async () => {
    const result = await replay(poison, ['--dry-run', '--json']);
    expect(result.code, result.stderr).toBe(1);
    const lines = jsonLines(result.stdout);
    expect(lines.at(-1)).toMatchObject({ total: 5, would_forward: 2, duplicates: 1, rejected: 2 });
    const codes = lines.filter((l) => l.action).map((l) => l.recorded_code);
    expect(codes.sort()).toEqual([
      'ENVELOPE_MISMATCH',
      'HANDLER_FAILED',
      'HANDLER_FAILED',
      'HANDLER_FAILED',
      'SIGNATURE_MISMATCH',
    ]);
    const coded = await replay(poison, ['--dry-run', '--json', '--code', 'SIGNATURE_MISMATCH']);
    expect(jsonLines(coded.stdout).at(-1)).toMatchObject({ total: 1, rejected: 1, filtered_out: 4 });
  }, 60_000);

  it('a failure is written to the dead-letter file; the hub keeps every event', async () => {
    const failing = await startApp(() => 500);
    try {
      const result = await replay(poison, ['--forward', failing.url, '--attempts', '1', '--json']);
      expect(result.code, result.stderr).toBe(1);
      expect(jsonLines(result.stdout).at(-1)).toMatchObject({
        total: 5,
        duplicates: 1,
        failed: 2,
        rejected: 2,
      });
      expect(failing.eventIds().sort()).toEqual([good[0], good[1]].map((e) => e?.eventId).sort());
      expect(readJsonl(join(dir.path, `failed-${poison.name}.jsonl`))).toHaveLength(4);
      expect(await allEvents(poison)).toBe(5);
    } finally {
      await failing.close();
    }
  }, 60_000);

  it('a replay SIGKILLed half-way loses nothing; the second run sends only what was not done', async () => {
    const app = await startApp();
    try {
      const first = startCli(
        [
          'replay',
          `azure-event-hubs:${poison.name}`,
          '--dedupe',
          `sqlite:${dedupePath}`,
          '--consumer-group',
          'replay',
          '--forward',
          app.url,
          '--rate',
          '20/min',
          '--dead-letter',
          join(dir.path, 'killed.jsonl'),
        ],
        { env: { EVENTHUBS_CONNECTION_STRING: main.connectionString }, killAfterMs: 90_000 },
      );
      await vi.waitFor(() => expect(app.received).toHaveLength(1), { timeout: 30_000, interval: 20 });
      // Killed once the first event is recorded done (the next send is 3 s later): a kill between a
      // send and its record would send that event again, as the worker would (docs/security.md).
      const store = createSqliteDedupe({ path: dedupePath });
      const sent = app.eventIds()[0] ?? '';
      await vi.waitFor(async () => expect(await store.peek(sent)).toBe('done'), {
        timeout: 30_000,
        interval: 20,
      });
      await store.close();
      first.child.kill('SIGKILL');
      await first.done;
      const second = await replay(poison, ['--forward', app.url, '--json']);
      expect(second.code, second.stderr).toBe(1); // the two bad ones, again
      const summary = jsonLines(second.stdout).at(-1);
      expect(summary).toMatchObject({ total: 5, rejected: 2 });
      expect(app.eventIds().sort()).toEqual([good[0], good[1]].map((e) => e?.eventId).sort());
      expect(await allEvents(poison)).toBe(5); // read, never consumed
    } finally {
      await app.close();
    }
  }, 120_000);
});

describe('replay a main hub over a time window', () => {
  it('reads only the events the hub accepted between --since and --until, on every partition', async () => {
    const hub = await broker.createHub(2);
    const before = [
      createTestEnvelope('daily.data.steps.created'),
      createTestEnvelope('daily.data.steps.created'),
    ];
    const inside = [
      createTestEnvelope('daily.data.steps.created'),
      createTestEnvelope('coach.nudge.created'),
    ];
    const after = [createTestEnvelope('daily.data.steps.created')];
    const publishAll = async (events: TestEnvelope[]) => {
      for (const [i, e] of events.entries()) await hub.publish(String(i % 2), e.raw);
    };
    /** Enqueue times are in ms: wait for the clock to pass the last one, so the window's edge is clean. */
    const edge = async () => {
      const last = Math.max(
        ...(
          await Promise.all(
            hub.partitionIds.map(async (id) => (await hub.events(id)).map((e) => e.enqueuedTime)),
          )
        ).flat(),
      );
      await vi.waitFor(() => expect(Date.now()).toBeGreaterThan(last + 1), { interval: 1 });
      return new Date(last + 1).toISOString();
    };
    await publishAll(before);
    const since = await edge();
    await publishAll(inside);
    const until = await edge();
    await publishAll(after);
    const app = await startApp();
    try {
      const env = { EVENTHUBS_CONNECTION_STRING: hub.connectionString };
      const args = [
        'replay',
        `azure-event-hubs:${hub.name}`,
        '--dedupe',
        `sqlite:${dedupePath}`,
        '--consumer-group',
        'replay',
      ];
      const window = [
        '--since',
        since,
        '--until',
        until,
        '--dead-letter',
        join(dir.path, 'window.jsonl'),
        '--json',
      ];
      const result = await runCli([...args, '--forward', app.url, ...window], { env, killAfterMs: 90_000 });
      expect(result.code, result.stderr).toBe(0);
      expect(jsonLines(result.stdout).at(-1)).toMatchObject({ total: 2, forwarded: 2 });
      expect(app.eventIds().sort()).toEqual(inside.map((e) => e.eventId).sort());
      // The rewind again: all done now, so skipped without --force.
      const again = await runCli([...args, '--forward', app.url, ...window], { env, killAfterMs: 90_000 });
      expect(jsonLines(again.stdout).at(-1)).toMatchObject({ total: 2, forwarded: 0, duplicates: 2 });
      expect(app.received).toHaveLength(2);
      expect(await allEvents(hub)).toBe(5);
    } finally {
      await app.close();
    }
  }, 90_000);
});
