/**
 * The dedupe contract on the wall clock, run against every store — including Redis, whose
 * leases and retention are kept by the server (no injectable clock). Times are short but real.
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MemoryDedupeStore } from '../src/dedupe/memory.js';
import { RedisDedupeStore } from '../src/dedupe/redis.js';
import { SqliteDedupeStore } from '../src/dedupe/sqlite.js';
import type { ClaimResult, DedupeStore } from '../src/dedupe/types.js';
import { silentLogger } from '../src/logger.js';
import { tempDir } from './support/harness.js';
import { HAS_REDIS, RedisServer } from './support/redis-server.js';

const LEASE = 300;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function tokenOf(result: ClaimResult): string {
  if (result.status !== 'claimed') throw new Error(`expected claimed, got ${result.status}`);
  return result.token;
}

function realTimeContract(name: string, open: () => DedupeStore, skip = false): void {
  describe.skipIf(skip)(`DedupeStore contract on the wall clock: ${name}`, () => {
    let store: DedupeStore;
    let n = 0;
    const id = () => `evt-${process.pid}-${Date.now()}-${++n}`;
    beforeEach(() => {
      store = open();
    });
    afterEach(async () => {
      await store.close();
    });

    it('claim, then duplicate only after complete; in progress meanwhile', async () => {
      const e = id();
      expect(await store.peek(e)).toBe('absent');
      const t = tokenOf(await store.claim(e, LEASE));
      const second = await store.claim(e, LEASE);
      expect(second.status).toBe('in_progress');
      if (second.status === 'in_progress') {
        expect(second.retryAfterMs).toBeGreaterThan(0);
        expect(second.retryAfterMs).toBeLessThanOrEqual(LEASE);
      }
      expect(await store.peek(e)).toBe('in_progress');
      expect(await store.complete(e, t, 60_000)).toBe(true);
      expect(await store.claim(e, LEASE)).toEqual({ status: 'duplicate' });
      expect(await store.peek(e)).toBe('done');
      expect(await store.complete(e, t, 60_000)).toBe(false);
    });

    it('release gives the event back; the released token is dead', async () => {
      const e = id();
      const first = tokenOf(await store.claim(e, LEASE));
      await store.release(e, first);
      expect(await store.peek(e)).toBe('absent');
      const second = tokenOf(await store.claim(e, LEASE));
      expect(second).not.toBe(first);
      expect(await store.complete(e, first, 60_000)).toBe(false);
      expect(await store.extend(e, first, LEASE)).toBe(false);
      expect(await store.complete(e, second, 60_000)).toBe(true);
    });

    it('a wrong token changes nothing', async () => {
      const e = id();
      const t = tokenOf(await store.claim(e, LEASE));
      expect(await store.complete(e, `${t}x`, 60_000)).toBe(false);
      expect(await store.extend(e, 'nope', LEASE)).toBe(false);
      await store.release(e, 'nope');
      expect(await store.peek(e)).toBe('in_progress');
    });

    it('an expired lease is taken over, and the old owner can no longer act', async () => {
      const e = id();
      const a = tokenOf(await store.claim(e, LEASE));
      await sleep(LEASE + 60);
      const b = tokenOf(await store.claim(e, LEASE));
      expect(await store.complete(e, a, 60_000)).toBe(false);
      expect(await store.extend(e, a, LEASE)).toBe(false);
      await store.release(e, a);
      expect(await store.peek(e)).toBe('in_progress');
      expect(await store.complete(e, b, 60_000)).toBe(true);
    });

    it('extend keeps a lease past its first expiry', async () => {
      const e = id();
      const t = tokenOf(await store.claim(e, LEASE));
      for (let i = 0; i < 3; i++) {
        await sleep(LEASE / 2);
        expect(await store.extend(e, t, LEASE)).toBe(true);
      }
      expect((await store.claim(e, LEASE)).status).toBe('in_progress');
    });

    it('counts abandoned claims (leases that ran out), and forgets them on complete or release', async () => {
      const e = id();
      const abandoned = (r: ClaimResult) => (r.status === 'claimed' ? (r.abandoned ?? 0) : -1);
      expect(abandoned(await store.claim(e, 50))).toBe(0);
      await new Promise((r) => setTimeout(r, 80));
      const second = await store.claim(e, 50);
      expect(abandoned(second)).toBe(1);
      await new Promise((r) => setTimeout(r, 80));
      const third = await store.claim(e, LEASE);
      expect(abandoned(third)).toBe(2);
      await store.release(e, tokenOf(third));
      const fourth = await store.claim(e, LEASE);
      expect(abandoned(fourth)).toBe(0);
      expect(await store.complete(e, tokenOf(fourth), 60_000)).toBe(true);
      expect(await store.forget?.(e)).toBe(true);
      expect(abandoned(await store.claim(e, LEASE))).toBe(0);
    });

    it('forget deletes a done record, never a live lease', async () => {
      const e = id();
      const t = tokenOf(await store.claim(e, LEASE));
      expect(await store.forget?.(e)).toBe(false);
      expect(await store.peek(e)).toBe('in_progress');
      expect(await store.complete(e, t, 60_000)).toBe(true);
      expect(await store.forget?.(e)).toBe(true);
      expect(await store.peek(e)).toBe('absent');
      expect((await store.claim(e, LEASE)).status).toBe('claimed');
    });

    it('a done event is forgotten after its retention', async () => {
      const e = id();
      const t = tokenOf(await store.claim(e, LEASE));
      expect(await store.complete(e, t, 150)).toBe(true);
      await sleep(220);
      expect(await store.peek(e)).toBe('absent');
      tokenOf(await store.claim(e, LEASE));
    });

    it('of 50 concurrent claims of one event exactly one wins; 200 distinct claims all win', async () => {
      const e = id();
      const same = await Promise.all(Array.from({ length: 50 }, () => store.claim(e, LEASE)));
      expect(same.filter((r) => r.status === 'claimed')).toHaveLength(1);
      const distinct = await Promise.all(Array.from({ length: 200 }, () => store.claim(id(), LEASE)));
      expect(distinct.every((r) => r.status === 'claimed')).toBe(true);
    });
  });
}

let redis: RedisServer | undefined;
beforeAll(async () => {
  if (HAS_REDIS) redis = await RedisServer.start();
});
afterAll(async () => {
  await redis?.stop();
});

const dirs: ReturnType<typeof tempDir>[] = [];
afterAll(() => {
  for (const d of dirs) d.cleanup();
});

realTimeContract('MemoryDedupeStore', () => new MemoryDedupeStore());
realTimeContract('SqliteDedupeStore', () => {
  const dir = tempDir('phe-rt-');
  dirs.push(dir);
  return new SqliteDedupeStore({ path: join(dir.path, 'dedupe.db') });
});
realTimeContract(
  'RedisDedupeStore',
  () => new RedisDedupeStore({ url: redis?.url ?? 'redis://127.0.0.1:1', logger: silentLogger() }),
  !HAS_REDIS,
);
