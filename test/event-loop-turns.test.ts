/**
 * A busy consumer lets the event loop turn: a source that answers without I/O (the memory
 * source, posted HTTP requests) must not hold timers, the ops server and signals until its
 * whole backlog is handled, whatever store commits the claims.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { createMemorySource } from '../adapters/memory/index.js';
import { createConsumer } from '../src/consumer/consumer.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { silentLogger } from '../src/core/logger.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import type { DedupeStore } from '../src/dedupe/types.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const stores: Record<string, () => DedupeStore> = {
  memory: () => createMemoryDedupe(),
  // Large batches: committed at once, without a turn of their own (src/consumer/pipeline.ts).
  sqlite: () => {
    const dir = mkdtempSync(join(tmpdir(), 'phe-turns-'));
    dirs.push(dir);
    return createSqliteDedupe({ path: join(dir, 'dedupe.sqlite') });
  },
};

describe('a busy consumer lets the event loop turn', () => {
  for (const [name, store] of Object.entries(stores)) {
    it(`with the ${name} store, a timer set at the start runs long before a backlog of 400 events is handled`, async () => {
      const source = createMemorySource({ endWhenEmpty: true });
      const padding = 'x'.repeat(40_000);
      for (let i = 0; i < 400; i++) {
        source.send(
          createTestEnvelope('daily.data.steps.created', { fields: { raw_data: { padding } } }).raw,
        );
      }
      let handled = 0;
      const consumer = createConsumer({
        source,
        secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
        dedupe: store(),
        logger: silentLogger(),
        concurrency: 64,
        maxInFlightBytes: 0,
      });
      consumer.on('daily.data.steps.created', () => {
        handled++;
      });
      const atTimer = new Promise<number>((resolve) => setTimeout(() => resolve(handled), 0));
      await consumer.start();
      await consumer.stopped;
      expect(handled).toBe(400);
      // The first receives of 64 each let the loop turn: the timer sees at most a few batches done.
      expect(await atTimer).toBeLessThan(200);
    });
  }
});

describe('a stopped consumer is let go at once', () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;

  /** Runs a consumer over `events` small events until `stopped`; only a WeakRef to it is kept. */
  async function runToTheEnd(store: DedupeStore, events: number): Promise<WeakRef<object>> {
    const source = createMemorySource({ endWhenEmpty: true });
    for (let i = 0; i < events; i++) source.send(createTestEnvelope('daily.data.steps.created').raw);
    const consumer = createConsumer({
      source,
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      dedupe: store,
      logger: silentLogger(),
      concurrency: 64,
    });
    consumer.on('daily.data.steps.created', () => {});
    // Made before the run: a WeakRef holds its target until the task that made it ends.
    const ref = new WeakRef(consumer);
    await consumer.start();
    await consumer.stopped;
    expect(source.settled).toHaveLength(events);
    return ref;
  }

  it('a SQLite store closed with a commit scheduled for the next turn commits at once and cancels it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'phe-turns-'));
    dirs.push(dir);
    const closeWithAClaimQueued = async (): Promise<WeakRef<object>> => {
      const store = createSqliteDedupe({ path: join(dir, 'dedupe.sqlite') });
      const ref = new WeakRef(store);
      // A WeakRef holds its target until the task that made it ends.
      await new Promise((resolve) => setTimeout(resolve, 0));
      const claim = store.claim('evt_queued', 60_000); // its commit waits for the next turn
      await store.close();
      expect(await claim).toMatchObject({ status: 'claimed' });
      return ref;
    };
    const store = await closeWithAClaimQueued();
    gc();
    expect(store.deref()).toBeUndefined();
  });

  for (const [name, store] of Object.entries(stores)) {
    it(`with the ${name} store, nothing it scheduled keeps it reachable once stopped resolves`, async () => {
      // The receive loop's mark of the next turn and the store's flush in the next turn were
      // left pending, and held the consumer (~3 MB after 20,000 events) until the loop turned.
      const consumer = await runToTheEnd(store(), 300);
      gc();
      expect(consumer.deref()).toBeUndefined();
    });
  }
});
