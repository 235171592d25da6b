/**
 * `replay azure-event-hubs:HUB` against the test Event Hubs broker: the replay contract
 * (test/support/replay-contract.ts) on a poison hub the worker fills itself, and a main hub
 * replayed over a time window with events before and after it. A hub is read, never consumed.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createEventHubsAdapter, type EventHubsMessage } from '../adapters/event-hubs/index.js';
import { eventHubsReplayReader } from '../adapters/event-hubs/replay-reader.js';
import { createTestEnvelope, type TestEnvelope } from '../src/consumer/testing.js';
import { silentLogger } from '../src/core/logger.js';
import type { ReplayMessage } from '../src/core/replay-reader.js';
import { runCli, startApp } from './support/cli.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import type { TestHub } from './support/event-hubs-server.js';
import { tempDir } from './support/harness.js';
import { jsonLines } from './support/records.js';
import { fillWithFailingWorker, replayContract } from './support/replay-contract.js';

let broker: EventHubsBroker;

beforeAll(async () => {
  broker = await EventHubsBroker.start();
});
afterAll(async () => {
  await broker?.stop();
});

async function allEvents(hub: TestHub): Promise<number> {
  let n = 0;
  for (const id of hub.partitionIds) n += (await hub.events(id)).length;
  return n;
}

replayContract('Event Hubs poison hub', {
  declares: {
    reading: 'log',
    // The adapter records the code with each copy it sends to the poison hub.
    recordedCodes: [
      'ENVELOPE_MISMATCH',
      'HANDLER_FAILED',
      'HANDLER_FAILED',
      'HANDLER_FAILED',
      'SIGNATURE_MISMATCH',
    ],
  },
  async setup(context) {
    const main = await broker.createHub(2);
    const poison = await broker.createHub(1);
    // Each failed event ends on the poison hub (the mismatch at once).
    await fillWithFailingWorker<EventHubsMessage>(context, {
      source: createEventHubsAdapter({
        connectionString: main.connectionString,
        checkpointStore: join(context.dir, 'checkpoints.db'),
        deadLetterQueue: poison.name,
        logger: silentLogger(),
      }),
      retry: { maxAttempts: 2, baseDelayMs: 10, maxDelayMs: 20 },
      send: (e, i) => main.publish(String(i % 2), e.raw),
      sideChannel: async () => (await poison.events('0')).length,
    });
    return {
      spec: `azure-event-hubs:${poison.name}`,
      env: { EVENTHUBS_CONNECTION_STRING: main.connectionString },
      args: ['--consumer-group', 'replay'],
      auditNames: poison.name,
      available: () => allEvents(poison),
      stored: () => allEvents(poison),
    };
  },
  async fresh(envelopes) {
    const hub = await broker.createHub(2);
    for (const [i, e] of envelopes.entries()) await hub.publish(String(i % 2), e.raw);
    return {
      spec: `azure-event-hubs:${hub.name}`,
      env: { EVENTHUBS_CONNECTION_STRING: hub.connectionString },
      args: ['--consumer-group', 'replay'],
      auditNames: hub.name,
      available: () => allEvents(hub),
      stored: () => allEvents(hub),
    };
  },
});

describe('replay a main hub over a time window', () => {
  let dir: ReturnType<typeof tempDir>;

  beforeAll(() => {
    dir = tempDir('phe-replay-eh-');
  });
  afterAll(() => {
    dir?.cleanup();
  });

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
        `sqlite:${join(dir.path, 'dedupe.db')}`,
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

describe('the Event Hubs replay reader', () => {
  it("keeps each event's trace context (traceparent, or Diagnostic-Id), so replay spans link to the producer", async () => {
    const hub = await broker.createHub(1);
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const diagnosticId = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await hub.publish('0', createTestEnvelope('daily.data.steps.created').raw, {
      traceparent,
      tracestate: 'vendor=1',
    });
    await hub.publish('0', createTestEnvelope('daily.data.steps.created').raw, {
      'Diagnostic-Id': diagnosticId,
    });
    await hub.publish('0', createTestEnvelope('daily.data.steps.created').raw);
    const reader = await eventHubsReplayReader(
      `azure-event-hubs:${hub.name}`,
      {
        logger: silentLogger(),
        settleMs: 1000,
        max: undefined,
        visibilityTimeoutSeconds: 30,
        since: undefined,
        until: undefined,
        consumerGroup: 'replay',
      },
      { EVENTHUBS_CONNECTION_STRING: hub.connectionString },
    );
    try {
      const read: ReplayMessage[] = [];
      const signal = new AbortController().signal;
      for (;;) {
        const batch = await reader.receive(10, signal);
        if (batch === null) break;
        read.push(...batch);
        // Settled, so the reader can end (a hub's messages are only read: an ack changes nothing).
        for (const message of batch) await reader.settle(message, { kind: 'ack', result: 'handled' });
      }
      expect(read.map((m) => m.traceContext)).toEqual([
        { traceparent, tracestate: 'vendor=1' },
        { traceparent: diagnosticId, tracestate: undefined },
        undefined,
      ]);
    } finally {
      await reader.close();
    }
  }, 60_000);
});
