/**
 * One contract for every dedupe store ("a lease, not a flag"), run against the memory and the
 * SQLite store with an injected clock; then what only SQLite promises (group commit, shared file
 * across processes, purge, closing).
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DedupeUnavailableError } from '../src/core/errors.js';
import Database from '../src/core/sqlite-driver.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import { createSqliteDedupe, type SqliteDedupeStore } from '../src/dedupe/sqlite.js';
import { ABANDONED_CLAIM_MEMORY_MS, type ClaimResult, type DedupeStore } from '../src/dedupe/types.js';

const LEASE = 1_000;
const RETENTION = 5_000;
const T0 = 1_700_000_000_000;

interface Harness {
  readonly store: DedupeStore;
  cleanup(): Promise<void> | void;
}

/** A store built on the given clock; `cleanup` closes it and removes what it left on disk. */
type StoreFactory = (now: () => number) => Harness;

function token(result: ClaimResult): string {
  expect(result.status).toBe('claimed');
  if (result.status !== 'claimed') throw new Error('not claimed');
  expect(result.token).toBeTypeOf('string');
  expect(result.token.length).toBeGreaterThan(0);
  return result.token;
}

function dedupeContract(name: string, factory: StoreFactory): void {
  describe(`DedupeStore contract: ${name}`, () => {
    let t: number;
    let harness: Harness;
    let store: DedupeStore;
    const advance = (ms: number) => {
      t += ms;
    };

    beforeEach(() => {
      t = T0;
      harness = factory(() => t);
      store = harness.store;
    });
    afterEach(async () => {
      await harness.cleanup();
    });

    it('claim → claimed with a token; the event is then in progress', async () => {
      expect(await store.peek('evt-1')).toBe('absent');
      token(await store.claim('evt-1', LEASE));
      expect(await store.peek('evt-1')).toBe('in_progress');
    });

    it('a second claim while the lease is held → in_progress with the remaining lease as retryAfterMs', async () => {
      token(await store.claim('evt-1', LEASE));
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: LEASE });
      advance(300);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: 700 });
      advance(699);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: 1 });
      // A claim that failed does not take or prolong the lease.
      advance(1);
      token(await store.claim('evt-1', LEASE));
    });

    it('complete → later claims are duplicates (also after the lease would have ended)', async () => {
      const tk = token(await store.claim('evt-1', LEASE));
      expect(await store.complete('evt-1', tk, RETENTION)).toBe(true);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'duplicate' });
      expect(await store.peek('evt-1')).toBe('done');
      advance(LEASE * 3);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'duplicate' });
      expect(await store.peek('evt-1')).toBe('done');
    });

    it('a completed event cannot be completed, extended or released again', async () => {
      const tk = token(await store.claim('evt-1', LEASE));
      expect(await store.complete('evt-1', tk, RETENTION)).toBe(true);
      expect(await store.complete('evt-1', tk, RETENTION)).toBe(false);
      expect(await store.extend('evt-1', tk, LEASE)).toBe(false);
      await store.release('evt-1', tk);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'duplicate' });
    });

    it('release → the next claim gets the event again, with a new token', async () => {
      const first = token(await store.claim('evt-1', LEASE));
      await store.release('evt-1', first);
      expect(await store.peek('evt-1')).toBe('absent');
      const second = token(await store.claim('evt-1', LEASE));
      expect(second).not.toBe(first);
      // The released token is dead, even though the same event is leased again.
      expect(await store.complete('evt-1', first, RETENTION)).toBe(false);
      expect(await store.complete('evt-1', second, RETENTION)).toBe(true);
    });

    it('a wrong token changes nothing', async () => {
      const tk = token(await store.claim('evt-1', LEASE));
      expect(await store.complete('evt-1', `${tk}x`, RETENTION)).toBe(false);
      expect(await store.extend('evt-1', 'not-a-token', LEASE)).toBe(false);
      await store.release('evt-1', 'not-a-token');
      expect(await store.peek('evt-1')).toBe('in_progress');
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: LEASE });
      // Tokens are per event.
      const other = token(await store.claim('evt-2', LEASE));
      expect(await store.complete('evt-1', other, RETENTION)).toBe(false);
      expect(await store.complete('evt-2', tk, RETENTION)).toBe(false);
      expect(await store.complete('evt-1', tk, RETENTION)).toBe(true);
    });

    it('operations on an unknown event are no-ops', async () => {
      expect(await store.complete('nope', 'token', RETENTION)).toBe(false);
      expect(await store.extend('nope', 'token', LEASE)).toBe(false);
      await store.release('nope', 'token');
      expect(await store.peek('nope')).toBe('absent');
    });

    it('lease expiry → another claimer takes over; the old token can no longer complete, extend or release', async () => {
      const a = token(await store.claim('evt-1', LEASE));
      advance(LEASE - 1);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: 1 });
      advance(1); // the lease ends exactly now
      const b = token(await store.claim('evt-1', LEASE));
      expect(b).not.toBe(a);

      expect(await store.complete('evt-1', a, RETENTION)).toBe(false);
      expect(await store.extend('evt-1', a, LEASE)).toBe(false);
      await store.release('evt-1', a);
      // None of that touched B's lease.
      expect(await store.peek('evt-1')).toBe('in_progress');
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: LEASE });
      expect(await store.complete('evt-1', b, RETENTION)).toBe(true);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'duplicate' });
      // ...and A still cannot, after B completed.
      expect(await store.complete('evt-1', a, RETENTION)).toBe(false);
    });

    it('an expired lease that nobody took over still belongs to its token', async () => {
      const a = token(await store.claim('evt-1', LEASE));
      advance(LEASE + 10);
      expect(await store.peek('evt-1')).toBe('absent');
      expect(await store.complete('evt-1', a, RETENTION)).toBe(true);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'duplicate' });
      // Extending takes the lease back; releasing gives it back uncounted.
      const b = token(await store.claim('evt-2', LEASE));
      advance(LEASE + 10);
      expect(await store.extend('evt-2', b, LEASE)).toBe(true);
      expect(await store.claim('evt-2', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: LEASE });
      advance(LEASE + 10);
      await store.release('evt-2', b);
      const next = await store.claim('evt-2', LEASE);
      expect(next).toMatchObject({ status: 'claimed', abandoned: 0 });
    });

    it('the documented crash window: handler done, no complete → the event is claimable after the lease', async () => {
      token(await store.claim('evt-1', LEASE)); // the worker ran the handler, then crashed
      expect((await store.claim('evt-1', LEASE)).status).toBe('in_progress');
      advance(LEASE);
      token(await store.claim('evt-1', LEASE)); // the handler may run again: bounded by the lease
    });

    it('extend keeps the lease', async () => {
      const tk = token(await store.claim('evt-1', LEASE));
      advance(900);
      expect(await store.extend('evt-1', tk, LEASE)).toBe(true); // now ends at +1900
      advance(600);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: 400 });
      advance(300);
      expect(await store.extend('evt-1', tk, LEASE)).toBe(true); // now ends at +2800
      advance(899);
      expect((await store.claim('evt-1', LEASE)).status).toBe('in_progress');
      expect(await store.complete('evt-1', tk, RETENTION)).toBe(true);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'duplicate' });
    });

    it('extend can shorten the lease too (it sets, it does not add)', async () => {
      const tk = token(await store.claim('evt-1', 10_000));
      expect(await store.extend('evt-1', tk, 100)).toBe(true);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: 100 });
    });

    it('retention expiry → the event is claimable again', async () => {
      const tk = token(await store.claim('evt-1', LEASE));
      advance(100);
      expect(await store.complete('evt-1', tk, RETENTION)).toBe(true); // done until T0 + 100 + RETENTION
      advance(RETENTION - 1);
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'duplicate' });
      expect(await store.peek('evt-1')).toBe('done');
      advance(1);
      expect(await store.peek('evt-1')).toBe('absent');
      const again = token(await store.claim('evt-1', LEASE));
      expect(again).not.toBe(tk);
      expect(await store.complete('evt-1', tk, RETENTION)).toBe(false);
      expect(await store.peek('evt-1')).toBe('in_progress');
    });

    it('counts abandoned claims: a lease that expired without complete or release', async () => {
      const abandoned = (r: ClaimResult) => (r.status === 'claimed' ? (r.abandoned ?? 0) : -1);
      expect(abandoned(await store.claim('evt-1', LEASE))).toBe(0);
      advance(LEASE); // the worker died: its lease ran out
      expect(abandoned(await store.claim('evt-1', LEASE))).toBe(1);
      advance(LEASE);
      const third = await store.claim('evt-1', LEASE);
      expect(abandoned(third)).toBe(2);
      await store.release('evt-1', token(third)); // a failure the worker reported: not abandoned
      expect(abandoned(await store.claim('evt-1', LEASE))).toBe(0);

      const tk = token(await store.claim('evt-2', LEASE));
      advance(LEASE - 1);
      expect(await store.complete('evt-2', tk, RETENTION)).toBe(true);
      advance(RETENTION);
      expect(abandoned(await store.claim('evt-2', LEASE))).toBe(0); // done, then retention ended

      // Remembered a day after the lease ended (the memory store sweeps, SQLite purges).
      token(await store.claim('evt-3', LEASE));
      advance(LEASE + ABANDONED_CLAIM_MEMORY_MS - 1);
      expect(abandoned(await store.claim('evt-3', LEASE))).toBe(1);
    });

    it('forget deletes a done record only: the event is claimable again; leases and expired records stay', async () => {
      expect(store.forget).toBeTypeOf('function');
      const forget = (id: string) => store.forget?.(id);
      expect(await forget('evt-1')).toBe(false); // absent
      const tk = token(await store.claim('evt-1', LEASE));
      expect(await forget('evt-1')).toBe(false); // a live lease is someone's handler: left alone
      expect(await store.peek('evt-1')).toBe('in_progress');
      expect(await store.complete('evt-1', tk, RETENTION)).toBe(true);
      expect(await forget('evt-1')).toBe(true);
      expect(await store.peek('evt-1')).toBe('absent');
      expect(await forget('evt-1')).toBe(false);
      token(await store.claim('evt-1', LEASE)); // handled again on its next delivery
      const tk2 = token(await store.claim('evt-2', LEASE));
      await store.complete('evt-2', tk2, RETENTION);
      advance(RETENTION);
      expect(await forget('evt-2')).toBe(false); // already expired: nothing to forget
    });

    it('peek walks absent → in_progress → done → absent and changes nothing', async () => {
      expect(await store.peek('evt-1')).toBe('absent');
      expect(await store.peek('evt-1')).toBe('absent');
      const tk = token(await store.claim('evt-1', LEASE));
      expect(await store.peek('evt-1')).toBe('in_progress');
      expect(await store.claim('evt-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: LEASE });
      await store.complete('evt-1', tk, RETENTION);
      expect(await store.peek('evt-1')).toBe('done');
      advance(RETENTION);
      expect(await store.peek('evt-1')).toBe('absent');
      // Expired lease: absent too.
      token(await store.claim('evt-2', LEASE));
      advance(LEASE);
      expect(await store.peek('evt-2')).toBe('absent');
    });

    it('ids are independent and compared exactly', async () => {
      const ids = [
        'evt-1',
        'EVT-1',
        'evt-1 ',
        'événement-☃-😀',
        'x'.repeat(2000),
        "evt'; DROP TABLE dedupe;--",
        // Lone surrogates (a JSON body may spell them as \ud800): UTF-8 cannot carry them, and
        // an encoder that writes U+FFFD for each would give these one key.
        'evt_\ud800',
        'evt_\ud801',
        'evt_\udfff',
        'evt_\ufffd',
        '\ude00\ud83d',
        '\ud83d',
      ];
      const tokens = await Promise.all(ids.map(async (id) => token(await store.claim(id, LEASE))));
      expect(new Set(tokens).size).toBe(ids.length);
      for (const id of ids) expect(await store.peek(id)).toBe('in_progress');
      expect(await store.complete(ids[3] as string, tokens[3] as string, RETENTION)).toBe(true);
      expect(await store.peek(ids[3] as string)).toBe('done');
      expect(await store.peek(ids[0] as string)).toBe('in_progress');
    });

    it('50 concurrent claims of one id in one tick → exactly one claimed, the rest in_progress', async () => {
      const results = await Promise.all(Array.from({ length: 50 }, () => store.claim('evt-hot', LEASE)));
      const claimed = results.filter((r) => r.status === 'claimed');
      expect(claimed).toHaveLength(1);
      expect(results.filter((r) => r.status === 'in_progress')).toHaveLength(49);
      for (const r of results) if (r.status === 'in_progress') expect(r.retryAfterMs).toBe(LEASE);
      expect(results[0]?.status).toBe('claimed'); // operations take effect in call order
    });

    it('concurrent claims of many ids in one tick → one claim per id', async () => {
      const ids = Array.from({ length: 20 }, (_, i) => `evt-${i}`);
      const calls = ids.flatMap((id) => Array.from({ length: 5 }, () => id));
      const results = await Promise.all(calls.map((id) => store.claim(id, LEASE)));
      const claimedIds = calls.filter((_, i) => results[i]?.status === 'claimed');
      expect(claimedIds.sort()).toEqual([...ids].sort());
    });

    it('operations queued in one tick take effect in call order', async () => {
      const tk = token(await store.claim('evt-1', LEASE));
      const [completed, afterComplete] = await Promise.all([
        store.complete('evt-1', tk, RETENTION),
        store.claim('evt-1', LEASE),
      ]);
      expect(completed).toBe(true);
      expect(afterComplete).toEqual({ status: 'duplicate' });

      const tk2 = token(await store.claim('evt-2', LEASE));
      const [, reclaimed, lateComplete] = await Promise.all([
        store.release('evt-2', tk2),
        store.claim('evt-2', LEASE),
        store.complete('evt-2', tk2, RETENTION),
      ]);
      expect(reclaimed.status).toBe('claimed');
      expect(lateComplete).toBe(false);
    });

    describe('batches: claimMany and completeMany answer each event as claim and complete would', () => {
      it('claimMany: in order; a repeated id sees the lease its first copy took; done and leased events too', async () => {
        const claimMany = store.claimMany?.bind(store);
        expect(claimMany).toBeTypeOf('function');
        if (!claimMany) return;
        const done = token(await store.claim('evt-done', LEASE));
        await store.complete('evt-done', done, RETENTION);
        token(await store.claim('evt-held', LEASE));
        const answers = await claimMany(['evt-a', 'evt-b', 'evt-a', 'evt-done', 'evt-held'], LEASE);
        expect(answers.map((a) => a.status)).toEqual([
          'claimed',
          'claimed',
          'in_progress',
          'duplicate',
          'in_progress',
        ]);
        const [a, b] = answers.map((r) => (r.status === 'claimed' ? r.token : ''));
        expect(a).not.toBe(b);
        expect(await store.claim('evt-b', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: LEASE });
        // A batch of one, and an empty one.
        expect((await claimMany(['evt-c'], LEASE))[0]?.status).toBe('claimed');
        expect(await claimMany([], LEASE)).toEqual([]);
      });

      it('claimMany counts abandoned claims as claim does', async () => {
        token(await store.claim('evt-1', LEASE));
        advance(LEASE);
        const [again] = (await store.claimMany?.(['evt-1'], LEASE)) ?? [];
        expect(again).toMatchObject({ status: 'claimed', abandoned: 1 });
      });

      it('completeMany: true for a claim held, false for a wrong token, per item in order', async () => {
        const completeMany = store.completeMany?.bind(store);
        expect(completeMany).toBeTypeOf('function');
        if (!completeMany) return;
        const a = token(await store.claim('evt-a', LEASE));
        const b = token(await store.claim('evt-b', LEASE));
        const answers = await completeMany(
          [
            { eventId: 'evt-a', token: a },
            { eventId: 'evt-b', token: `${b}x` },
            { eventId: 'evt-never', token: a },
          ],
          RETENTION,
        );
        expect(answers).toEqual([true, false, false]);
        expect(await store.claim('evt-a', LEASE)).toEqual({ status: 'duplicate' });
        expect(await store.peek('evt-b')).toBe('in_progress');
        expect(await store.complete('evt-b', b, RETENTION)).toBe(true);
        advance(RETENTION);
        expect((await store.claim('evt-a', LEASE)).status).toBe('claimed'); // retention from completeMany
      });
    });
  });
}

// ---------------------------------------------------------------------------------------------

const tempDirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'phe-dedupe-'));
  tempDirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

dedupeContract('MemoryDedupeStore', (now) => {
  const store = createMemoryDedupe({ now });
  return { store, cleanup: () => store.close() };
});

dedupeContract('SqliteDedupeStore', (now) => {
  const store = createSqliteDedupe({ path: join(tempDir(), 'dedupe.db'), now });
  return { store, cleanup: () => store.close() };
});

// ---------------------------------------------------------------------------------------------

describe('SqliteDedupeStore only', () => {
  let dir: string;
  let path: string;
  let t: number;
  const open = (extra: { busyTimeoutMs?: number; path?: string } = {}) =>
    createSqliteDedupe({ path, now: () => t, ...extra });
  const opened: SqliteDedupeStore[] = [];
  const openTracked = (extra: { busyTimeoutMs?: number; path?: string } = {}) => {
    const s = open(extra);
    opened.push(s);
    return s;
  };

  beforeEach(() => {
    dir = tempDir();
    path = join(dir, 'nested', 'dedupe.db'); // the folder is created on open
    t = T0;
  });
  afterEach(async () => {
    for (const s of opened.splice(0)) await s.close();
  });

  /** WAL frames written since `before` (each commit appends at least one frame). */
  const walFrames = (db: Database.Database, before: number) => {
    const pageSize = db.pragma('page_size', { simple: true }) as number;
    // Whole frames: a WAL that restarted also gains its 32-byte header.
    return Math.floor((statSync(`${path}-wal`).size - before) / (24 + pageSize));
  };

  it('group-commits the operations queued in one tick: one transaction, not one per claim', async () => {
    const store = openTracked();
    token(await store.claim('warm-up', LEASE));
    const reader = new Database(path, { readonly: true });
    try {
      const before = statSync(`${path}-wal`).size;
      const results = await Promise.all(Array.from({ length: 50 }, () => store.claim('evt-hot', LEASE)));
      expect(results.filter((r) => r.status === 'claimed')).toHaveLength(1);
      const batched = walFrames(reader, before);

      // The same amount of work awaited one by one: one commit each.
      const before2 = statSync(`${path}-wal`).size;
      for (let i = 0; i < 50; i++) await store.claim(`evt-seq-${i}`, LEASE);
      const sequential = walFrames(reader, before2);

      expect(batched).toBeGreaterThan(0);
      expect(batched).toBeLessThanOrEqual(4);
      expect(sequential).toBeGreaterThanOrEqual(50);
    } finally {
      reader.close();
    }
  });

  it('a batch call with commitAtOnce commits before the next turn of the event loop, with the calls queued before it; without it, it waits for that turn', async () => {
    const store = openTracked();
    token(await store.claim('warm-up', LEASE));
    const order: string[] = [];
    setImmediate(() => order.push('turn'));
    const single = store.claim('evt-single', LEASE).then(() => order.push('single'));
    const claims = store.claimMany(['evt-a', 'evt-b'], LEASE, { commitAtOnce: true }).then((r) => {
      order.push('claimMany');
      return r;
    });
    const [, claimed] = await Promise.all([single, claims]);
    expect(order).toEqual(['single', 'claimMany']);
    const held = claimed.map((r, i) => ({ eventId: i === 0 ? 'evt-a' : 'evt-b', token: token(r) }));
    await store.completeMany(held, RETENTION, { commitAtOnce: true }).then(() => order.push('completeMany'));
    expect(order).toEqual(['single', 'claimMany', 'completeMany']);
    expect(await store.peek('evt-a')).toBe('done');
    await new Promise(setImmediate);
    expect(order).toEqual(['single', 'claimMany', 'completeMany', 'turn']);

    // Without it the batch waits for the turn, to share its commit with the calls made meanwhile.
    const order2: string[] = [];
    setImmediate(() => order2.push('turn'));
    const batch = store.claimMany(['evt-c', 'evt-d'], LEASE).then(() => order2.push('claimMany'));
    const later = store.claimMany(['evt-e'], LEASE, {}).then(() => order2.push('claimMany {}'));
    await Promise.all([batch, later]);
    expect(order2).toEqual(['turn', 'claimMany', 'claimMany {}']);
  });

  it('first claims write only the small leases table: 64 of them, a handful of pages (not one or two each)', async () => {
    const store = openTracked();
    // Random ids (no common prefix: they must spread over the table as real event ids do).
    const ids = (n: number) => Array.from({ length: n }, () => randomUUID());
    // Days of done events: many leaf pages, so 64 random ids fall on about 64 different pages.
    for (const batch of [ids(4000), ids(4000)]) {
      const tokens = await Promise.all(batch.map(async (id) => token(await store.claim(id, LEASE))));
      await Promise.all(batch.map((id, i) => store.complete(id, tokens[i] as string, RETENTION)));
    }
    // An empty WAL, so that its growth counts every frame written (it restarts after a checkpoint).
    const checkpointer = new Database(path);
    checkpointer.pragma('wal_checkpoint(TRUNCATE)');
    checkpointer.close();
    const reader = new Database(path, { readonly: true });
    try {
      const fresh = ids(64);
      const before = statSync(`${path}-wal`).size;
      const tokens = await Promise.all(fresh.map(async (id) => token(await store.claim(id, LEASE))));
      const claimFrames = walFrames(reader, before);
      const before2 = statSync(`${path}-wal`).size;
      await Promise.all(fresh.map((id, i) => store.complete(id, tokens[i] as string, RETENTION)));
      const completeFrames = walFrames(reader, before2);
      // The done records are the writes to the large table (a leaf page, its splits, the index).
      expect(claimFrames).toBeGreaterThan(0);
      expect(claimFrames).toBeLessThanOrEqual(12);
      expect(completeFrames).toBeGreaterThanOrEqual(64);
    } finally {
      reader.close();
    }
  });

  it('close then claim (or any other operation) rejects with DedupeUnavailableError', async () => {
    const store = open();
    const tk = token(await store.claim('evt-1', LEASE));
    await store.close();
    await expect(store.claim('evt-2', LEASE)).rejects.toBeInstanceOf(DedupeUnavailableError);
    await expect(store.claim('evt-2', LEASE)).rejects.toMatchObject({ code: 'DEDUPE_UNAVAILABLE' });
    await expect(store.complete('evt-1', tk, RETENTION)).rejects.toBeInstanceOf(DedupeUnavailableError);
    await expect(store.extend('evt-1', tk, LEASE)).rejects.toBeInstanceOf(DedupeUnavailableError);
    await expect(store.release('evt-1', tk)).rejects.toBeInstanceOf(DedupeUnavailableError);
    await expect(store.peek('evt-1')).rejects.toBeInstanceOf(DedupeUnavailableError);
    await store.close(); // idempotent
    expect(store.purgeExpired()).toBe(0);
  });

  it('operations queued before close are still written', async () => {
    const store = open();
    const pending = [store.claim('evt-1', LEASE), store.claim('evt-2', LEASE)];
    await store.close();
    const results = await Promise.all(pending);
    expect(results.map((r) => r.status)).toEqual(['claimed', 'claimed']);
    const again = openTracked();
    expect(await again.peek('evt-1')).toBe('in_progress');
    expect(await again.peek('evt-2')).toBe('in_progress');
  });

  it('state survives a reopen of the file', async () => {
    const first = open();
    const tk = token(await first.claim('done-1', LEASE));
    await first.complete('done-1', tk, RETENTION);
    const leased = token(await first.claim('leased-1', LEASE));
    await first.close();

    const second = openTracked();
    expect(await second.claim('done-1', LEASE)).toEqual({ status: 'duplicate' });
    expect(await second.claim('leased-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: LEASE });
    // The token is data in the file: a restarted worker holding it could still complete.
    expect(await second.complete('leased-1', leased, RETENTION)).toBe(true);
  });

  it('a new file gets 4 KiB pages; a file made with 1 KiB pages keeps them, and its rows', async () => {
    const pageSize = (file: string) => {
      const reader = new Database(file, { readonly: true });
      try {
        return reader.pragma('page_size', { simple: true }) as number;
      } finally {
        reader.close();
      }
    };
    const fresh = openTracked();
    await fresh.complete('done-1', token(await fresh.claim('done-1', LEASE)), RETENTION);
    expect(pageSize(path)).toBe(4096);

    // A file of a pre-release, whose page size was fixed at 1 KiB by its first write.
    const older = join(dir, 'older.db');
    const made = new Database(older);
    made.pragma('page_size = 1024');
    made.exec('CREATE TABLE page_size_fixed (x)');
    made.close();
    const first = open({ path: older });
    await first.complete('done-2', token(await first.claim('done-2', LEASE)), RETENTION);
    await first.close();
    const reopened = openTracked({ path: older });
    expect(await reopened.claim('done-2', LEASE)).toEqual({ status: 'duplicate' });
    expect(pageSize(older)).toBe(1024);
  });

  it('a file from before claims were counted gets the column, and keeps its rows', async () => {
    mkdirSync(dirname(path), { recursive: true });
    const old = new Database(path);
    old.exec(`CREATE TABLE dedupe (event_id TEXT PRIMARY KEY, done INTEGER NOT NULL,
      token TEXT NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID`);
    old.prepare('INSERT INTO dedupe VALUES (?, 1, ?, ?)').run('done-1', 't', T0 + RETENTION);
    old.prepare('INSERT INTO dedupe VALUES (?, 0, ?, ?)').run('crashed-1', 't', T0 - 1);
    old.close();
    const store = openTracked();
    expect(await store.claim('done-1', LEASE)).toEqual({ status: 'duplicate' });
    const taken = await store.claim('crashed-1', LEASE);
    expect(taken).toMatchObject({ status: 'claimed', abandoned: 1 });
  });

  /** Rows of each table, read from the file by a second connection. */
  function rows(): { dedupe: number; leases: number } {
    const db = new Database(path, { readonly: true });
    try {
      const count = (table: string) =>
        (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
      return { dedupe: count('dedupe'), leases: count('leases') };
    } finally {
      db.close();
    }
  }

  it('a lease lives in the small leases table; complete moves the event to dedupe, one row', async () => {
    const store = openTracked();
    const tk = token(await store.claim('evt-1', LEASE));
    expect(rows()).toEqual({ dedupe: 0, leases: 1 });
    expect(await store.complete('evt-1', tk, RETENTION)).toBe(true);
    expect(rows()).toEqual({ dedupe: 1, leases: 0 });
    const released = token(await store.claim('evt-2', LEASE));
    token(await store.claim('evt-3', LEASE));
    await store.release('evt-2', released);
    expect(rows()).toEqual({ dedupe: 1, leases: 1 });
  });

  it('a file whose leases are in dedupe (done = 0) has them moved once, with tokens and counts', async () => {
    mkdirSync(dirname(path), { recursive: true });
    const old = new Database(path);
    old.exec(`CREATE TABLE dedupe (event_id TEXT PRIMARY KEY, done INTEGER NOT NULL, token TEXT NOT NULL,
      expires_at INTEGER NOT NULL, claims INTEGER NOT NULL DEFAULT 1) WITHOUT ROWID`);
    const insert = old.prepare('INSERT INTO dedupe VALUES (?, ?, ?, ?, ?)');
    insert.run('done-1', 1, 'td', T0 + RETENTION, 1);
    insert.run('held-1', 0, 'th', T0 + LEASE, 1);
    insert.run('abandoned-1', 0, 'ta', T0 - 1, 2);
    old.close();

    const store = openTracked();
    expect(rows()).toEqual({ dedupe: 1, leases: 2 });
    expect(await store.claim('done-1', LEASE)).toEqual({ status: 'duplicate' });
    expect(await store.claim('held-1', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: LEASE });
    expect(await store.complete('held-1', 'th', RETENTION)).toBe(true); // its token still holds it
    expect(await store.claim('abandoned-1', LEASE)).toMatchObject({ status: 'claimed', abandoned: 2 });
    // Once: a reopen finds the file moved (user_version) and changes nothing.
    await store.close();
    openTracked();
    expect(rows()).toEqual({ dedupe: 2, leases: 1 });
  });

  it('a lease an earlier version writes later (done = 0 in dedupe) holds its event until it expires', async () => {
    const store = openTracked();
    token(await store.claim('warm-up', LEASE));
    const old = new Database(path);
    old.prepare('INSERT INTO dedupe VALUES (?, 0, ?, ?, 1)').run('evt-old', 'told', T0 + LEASE);
    old.close();
    expect(await store.claim('evt-old', LEASE)).toEqual({ status: 'in_progress', retryAfterMs: LEASE });
    expect(await store.peek('evt-old')).toBe('in_progress');
    t += LEASE;
    const tk = token(await store.claim('evt-old', LEASE));
    expect(await store.complete('evt-old', tk, RETENTION)).toBe(true);
    expect(await store.claim('evt-old', LEASE)).toEqual({ status: 'duplicate' });
  });

  it('two stores on one file in one process: one claim wins, tokens are distinct', async () => {
    const a = openTracked();
    const b = openTracked();
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? a : b).claim('evt-shared', LEASE)),
    );
    expect(results.filter((r) => r.status === 'claimed')).toHaveLength(1);
    const ta = token(await a.claim('evt-a', LEASE));
    const tb = token(await b.claim('evt-b', LEASE));
    expect(ta).not.toBe(tb);
    expect(await b.complete('evt-a', ta, RETENTION)).toBe(true); // the token is what counts, not the connection
    expect(await a.claim('evt-a', LEASE)).toEqual({ status: 'duplicate' });
  });

  it('claimMany and completeMany are all or nothing: a batch whose write fails changes none of its events', async () => {
    const store = openTracked();
    const done = token(await store.claim('evt-3', LEASE));
    const held = token(await store.claim('evt-4', LEASE));
    const db = new Database(path);
    // A write that fails for one event of the batch, as a full disk or an I/O error would.
    db.exec(`
      CREATE TRIGGER no_poison_lease BEFORE INSERT ON leases WHEN NEW.event_id = 'evt-poison'
        BEGIN SELECT RAISE(ABORT, 'no room'); END;
      CREATE TRIGGER no_done_4 BEFORE INSERT ON dedupe WHEN NEW.event_id = 'evt-4'
        BEGIN SELECT RAISE(ABORT, 'no room'); END;`);
    db.close();
    await expect(store.claimMany(['evt-1', 'evt-poison', 'evt-2'], LEASE)).rejects.toBeInstanceOf(
      DedupeUnavailableError,
    );
    expect([await store.peek('evt-1'), await store.peek('evt-2')]).toEqual(['absent', 'absent']);
    const completing = [
      { eventId: 'evt-3', token: done },
      { eventId: 'evt-4', token: held },
    ];
    await expect(store.completeMany(completing, RETENTION)).rejects.toBeInstanceOf(DedupeUnavailableError);
    expect([await store.peek('evt-3'), await store.peek('evt-4')]).toEqual(['in_progress', 'in_progress']);
    expect(await store.complete('evt-3', done, RETENTION)).toBe(true); // its lease is still its own
  });

  it('rows stay small: a done record keeps no token, and tokens are short', async () => {
    // Every commit writes the pages of the rows it touched: a 22-character token in the lease
    // and in the done record cost about 1 µs per event (docs/performance.md).
    const store = openTracked();
    const tk = token(await store.claim('evt-small', LEASE));
    expect(tk.length).toBeLessThanOrEqual(12);
    expect(await store.complete('evt-small', tk, RETENTION)).toBe(true);
    const db = new Database(path, { readonly: true });
    try {
      const row = db.prepare('SELECT done, token FROM dedupe WHERE event_id = ?').get('evt-small');
      expect(row).toEqual({ done: 1, token: '' });
    } finally {
      db.close();
    }
    expect(await store.claim('evt-small', LEASE)).toEqual({ status: 'duplicate' });
  });

  it('purgeExpired() removes expired rows (expired leases and ended retention), nothing else', async () => {
    const store = openTracked();
    const count = () => {
      const db = new Database(path, { readonly: true });
      try {
        const rows = 'SELECT (SELECT count(*) FROM dedupe) + (SELECT count(*) FROM leases) AS n';
        return (db.prepare(rows).get() as { n: number }).n;
      } finally {
        db.close();
      }
    };
    const tokens = await Promise.all(
      Array.from({ length: 30 }, async (_, i) => token(await store.claim(`evt-${i}`, LEASE))),
    );
    // 0..9 done (retention), 10..19 abandoned leases, 20..29 leases extended.
    await Promise.all(tokens.slice(0, 10).map((tk, i) => store.complete(`evt-${i}`, tk, RETENTION)));
    await Promise.all(tokens.slice(20).map((tk, i) => store.extend(`evt-${i + 20}`, tk, 10 * RETENTION)));
    expect(count()).toBe(30);
    expect(store.purgeExpired()).toBe(0);

    t += LEASE;
    // Abandoned leases no longer hold their event, but are remembered for a day (to count them).
    expect(store.purgeExpired()).toBe(0);
    expect(await store.peek('evt-15')).toBe('absent');
    expect(await store.peek('evt-5')).toBe('done');

    t += RETENTION;
    expect(store.purgeExpired()).toBe(10); // the ended retention
    expect(count()).toBe(20);
    expect(await store.peek('evt-25')).toBe('in_progress');
    token(await store.claim('evt-5', LEASE));

    t = T0 + LEASE + ABANDONED_CLAIM_MEMORY_MS;
    expect(store.purgeExpired()).toBe(10); // the abandoned leases, a day after their lease ended
    // A purged lease's token is gone with its row.
    expect(await store.complete('evt-15', tokens[15] as string, RETENTION)).toBe(false);
  });

  it('purges more rows than one purge batch', async () => {
    const store = openTracked();
    const n = 12_000;
    await Promise.all(Array.from({ length: n }, (_, i) => store.claim(`evt-${i}`, LEASE)));
    t += LEASE + ABANDONED_CLAIM_MEMORY_MS;
    expect(store.purgeExpired()).toBe(n);
  });

  it('a locked database fails the whole batch with DedupeUnavailableError, and the store recovers', async () => {
    const store = openTracked({ busyTimeoutMs: 0 });
    token(await store.claim('warm-up', LEASE));
    const locker = new Database(path);
    try {
      locker.exec('BEGIN IMMEDIATE');
      const results = await Promise.allSettled([store.claim('evt-1', LEASE), store.claim('evt-2', LEASE)]);
      for (const r of results) {
        expect(r.status).toBe('rejected');
        if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(DedupeUnavailableError);
      }
      locker.exec('ROLLBACK');
      token(await store.claim('evt-1', LEASE));
    } finally {
      locker.close();
    }
  });

  it('an unusable path is DedupeUnavailableError at construction', () => {
    const notADb = tempDir(); // a directory, not a file
    expect(() => createSqliteDedupe({ path: notADb })).toThrow(DedupeUnavailableError);
  });

  describe('two processes sharing one database file', () => {
    const here = fileURLToPath(new URL('.', import.meta.url));
    const claimer = join(here, 'support', 'sqlite-claimer.ts');
    const repo = join(here, '..');

    interface ClaimReport {
      claimed: string[];
      duplicate: string[];
      inProgress: string[];
      errors: string[];
    }

    /** A child process running `script` with tsx, read line by line. */
    function startChild(script: string, args: string[]) {
      const child: ChildProcessWithoutNullStreams = spawn(
        process.execPath,
        ['--import', 'tsx', script, ...args],
        { cwd: repo, stdio: ['pipe', 'pipe', 'pipe'] },
      );
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => {
        stderr += d.toString();
      });
      const lines = createInterface({ input: child.stdout });
      const queue: string[] = [];
      const waiters: Array<(line: string) => void> = [];
      lines.on('line', (line) => {
        const w = waiters.shift();
        if (w) w(line);
        else queue.push(line);
      });
      // 'close', not 'exit': by then every line the child wrote has been read.
      const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
      const nextLine = () =>
        new Promise<string>((resolve, reject) => {
          const queued = queue.shift();
          if (queued !== undefined) return resolve(queued);
          waiters.push(resolve);
          void exited.then((code) => reject(new Error(`${script} exited (${code}) early:\n${stderr}`)));
        });
      return { child, nextLine, exited, stderr: () => stderr };
    }

    function startClaimer(args: string[]) {
      return startChild(claimer, args);
    }

    const children: ChildProcessWithoutNullStreams[] = [];
    afterEach(() => {
      for (const c of children.splice(0)) if (c.exitCode === null) c.kill();
    });

    async function report(c: ReturnType<typeof startClaimer>): Promise<ClaimReport> {
      const report = JSON.parse(await c.nextLine()) as ClaimReport;
      c.child.stdin.end();
      expect(await c.exited, c.stderr()).toBe(0);
      expect(report.errors, c.stderr()).toEqual([]);
      return report;
    }

    function expectEachClaimedOnce(n: number, ra: ClaimReport, rb: ClaimReport): void {
      const all = [...ra.claimed, ...rb.claimed];
      expect(all).toHaveLength(n);
      expect(new Set(all).size).toBe(n);
      // Whatever one process did not claim, the other did; it saw it as duplicate or in progress.
      for (const r of [ra, rb]) expect(r.claimed.length + r.duplicate.length + r.inProgress.length).toBe(n);
      const claimedByA = new Set(ra.claimed);
      expect(rb.claimed.filter((id) => claimedByA.has(id))).toEqual([]);
    }

    it('500 ids in opposite orders, in lockstep: each claimed exactly once, the two meet in the middle', async () => {
      const n = 500;
      // Chunks of 12: after 20 rounds A has 0..239 and B 499..260; round 21 both go for 248..251.
      const a = startClaimer([path, String(n), 'forward', '12', 'lockstep']);
      const b = startClaimer([path, String(n), 'reverse', '12', 'lockstep']);
      children.push(a.child, b.child);
      expect(await a.nextLine()).toBe('ready');
      expect(await b.nextLine()).toBe('ready');
      const rounds = Math.ceil(n / 12);
      for (let round = 1; round < rounds; round++) {
        a.child.stdin.write('go\n');
        b.child.stdin.write('go\n');
        expect(await Promise.all([a.nextLine(), b.nextLine()])).toEqual(['step', 'step']);
      }
      a.child.stdin.write('go\n');
      b.child.stdin.write('go\n');
      const [ra, rb] = await Promise.all([report(a), report(b)]);
      expectEachClaimedOnce(n, ra, rb);
      // Both really worked on the file: each got its half, give or take the contested ids.
      expect(ra.claimed.length).toBeGreaterThanOrEqual(248);
      expect(rb.claimed.length).toBeGreaterThanOrEqual(248);
      expect(ra.claimed).toEqual(expect.arrayContaining(['id-0', 'id-239']));
      expect(rb.claimed).toEqual(expect.arrayContaining(['id-499', 'id-260']));

      const check = openTracked();
      t = Date.now();
      const states = await Promise.all(Array.from({ length: n }, (_, i) => check.peek(`id-${i}`)));
      expect(new Set(states)).toEqual(new Set(['done']));
    });

    it('500 ids free-running (forward vs shuffled) on a file both open at once: each claimed exactly once', async () => {
      const n = 500;
      const a = startClaimer([path, String(n), 'forward', '10']);
      const b = startClaimer([path, String(n), 'shuffle', '7']);
      children.push(a.child, b.child);
      expect(await a.nextLine()).toBe('ready');
      expect(await b.nextLine()).toBe('ready');
      a.child.stdin.write('go\n');
      b.child.stdin.write('go\n');
      const [ra, rb] = await Promise.all([report(a), report(b)]);
      expectEachClaimedOnce(n, ra, rb);
    });

    // SQLite does not wait on its busy handler to switch a file to WAL: before the store retried
    // the switch, 4 of 40 such starts of three processes failed with "database is locked".
    it('three processes opening one new file at the same moment all open it (40 rounds)', async () => {
      const opener = join(here, 'support', 'sqlite-opener.ts');
      const dir = tempDir();
      const rounds = 40;
      const openers = Array.from({ length: 3 }, () => startChild(opener, [dir, String(rounds), '60']));
      children.push(...openers.map((o) => o.child));
      for (const o of openers) expect(await o.nextLine()).toBe('ready');
      const start = String(Date.now() + 300);
      for (const o of openers) o.child.stdin.end(`${start}\n`);
      for (const o of openers) {
        const results: { round: number; error: string | null }[] = [];
        for (let r = 0; r < rounds; r++) results.push(JSON.parse(await o.nextLine()));
        expect(await o.exited, o.stderr()).toBe(0);
        expect(results).toHaveLength(rounds);
        expect(results.filter((r) => r.error !== null)).toEqual([]);
      }
    }, 30_000);
  });
});
