/**
 * The dedupe contract on the wall clock, for stores whose leases and retention are kept by a
 * server (Redis, Redis Cluster: no injectable clock). Times are real, with margins that survive
 * the process stalling for half a second anywhere (GC, a busy machine):
 * - a lease that must not run out during a test is a minute long (LIVE);
 * - a lease or retention that must run out is waited for well past its end (a stall only makes
 *   that wait longer);
 * - a lease kept alive is extended at a quarter of its length.
 * PARTNER_EVENTS_TEST_STALL_MS=500 blocks the process that long at each test's most fragile
 * point, to check those margins. Used by test/dedupe.realtime.test.ts and test/redis-cluster.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ClaimResult, DedupeStore } from '../../src/dedupe/types.js';

/** A lease no test outlives. */
const LIVE = 60_000;
/** A lease that runs out during the test; `sleep(PAST_SHORT)` waits until it surely has. */
const SHORT = 300;
const PAST_SHORT = SHORT + 100;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const STALL_MS = Number(process.env.PARTNER_EVENTS_TEST_STALL_MS ?? 0);
/** Blocks the event loop for STALL_MS (0 by default): a GC pause or a starved process. */
function stall(): void {
  const until = performance.now() + STALL_MS;
  while (performance.now() < until) {
    // busy: nothing else of this process runs meanwhile
  }
}

function tokenOf(result: ClaimResult): string {
  if (result.status !== 'claimed') throw new Error(`expected claimed, got ${result.status}`);
  return result.token;
}

export function realTimeContract(name: string, open: () => DedupeStore, skip = false): void {
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
      const t = tokenOf(await store.claim(e, LIVE));
      stall();
      const second = await store.claim(e, LIVE);
      expect(second.status).toBe('in_progress');
      if (second.status === 'in_progress') {
        expect(second.retryAfterMs).toBeGreaterThan(0);
        expect(second.retryAfterMs).toBeLessThanOrEqual(LIVE);
      }
      expect(await store.peek(e)).toBe('in_progress');
      expect(await store.complete(e, t, 60_000)).toBe(true);
      expect(await store.claim(e, LIVE)).toEqual({ status: 'duplicate' });
      expect(await store.peek(e)).toBe('done');
      expect(await store.complete(e, t, 60_000)).toBe(false);
    });

    it('release gives the event back; the released token is dead', async () => {
      const e = id();
      const first = tokenOf(await store.claim(e, LIVE));
      stall();
      await store.release(e, first);
      expect(await store.peek(e)).toBe('absent');
      const second = tokenOf(await store.claim(e, LIVE));
      stall();
      expect(second).not.toBe(first);
      expect(await store.complete(e, first, 60_000)).toBe(false);
      expect(await store.extend(e, first, LIVE)).toBe(false);
      expect(await store.complete(e, second, 60_000)).toBe(true);
    });

    it('a wrong token changes nothing', async () => {
      const e = id();
      const t = tokenOf(await store.claim(e, LIVE));
      stall();
      expect(await store.complete(e, `${t}x`, 60_000)).toBe(false);
      expect(await store.extend(e, 'nope', LIVE)).toBe(false);
      await store.release(e, 'nope');
      expect(await store.peek(e)).toBe('in_progress');
    });

    it('an expired lease is taken over, and the old owner can no longer act', async () => {
      const e = id();
      const a = tokenOf(await store.claim(e, SHORT));
      await sleep(PAST_SHORT);
      const b = tokenOf(await store.claim(e, LIVE));
      stall();
      expect(await store.complete(e, a, 60_000)).toBe(false);
      expect(await store.extend(e, a, LIVE)).toBe(false);
      await store.release(e, a);
      expect(await store.peek(e)).toBe('in_progress');
      expect(await store.complete(e, b, 60_000)).toBe(true);
    });

    it('a lease that ran out with nobody claiming the event since still belongs to its token: complete, extend and release act', async () => {
      const [done, extended, released] = [id(), id(), id()];
      const a = tokenOf(await store.claim(done, SHORT));
      const b = tokenOf(await store.claim(extended, SHORT));
      const c = tokenOf(await store.claim(released, SHORT));
      await sleep(PAST_SHORT);
      expect(await store.peek(done)).toBe('absent');
      // A handler that finished after its lease ran out: the event is recorded as done.
      expect(await store.complete(done, a, 60_000)).toBe(true);
      expect(await store.claim(done, LIVE)).toEqual({ status: 'duplicate' });
      // A heartbeat that came late takes the lease back.
      expect(await store.extend(extended, b, LIVE)).toBe(true);
      stall();
      expect((await store.claim(extended, LIVE)).status).toBe('in_progress');
      expect(await store.complete(extended, b, 60_000)).toBe(true);
      // A release after the lease ran out (a handler that overran it, then failed): not abandoned.
      await store.release(released, c);
      const next = await store.claim(released, LIVE);
      expect(next.status === 'claimed' ? next.abandoned : next.status).toBe(0);
      expect(await store.complete(released, c, 60_000)).toBe(false);
    });

    it('extend keeps a lease past its first expiry', async () => {
      // Extended every quarter of the lease: a stall of half a second between two extensions
      // leaves the lease running. Kept until past the first expiry: the store took the claim
      // before it answered, so a lease after the answer has surely run out.
      const lease = 1600;
      const e = id();
      const t = tokenOf(await store.claim(e, lease));
      const claimedBy = performance.now();
      let extensions = 0;
      while (performance.now() - claimedBy <= lease) {
        await sleep(lease / 4);
        stall();
        expect(await store.extend(e, t, lease)).toBe(true);
        extensions++;
      }
      expect(extensions).toBeGreaterThan(0);
      stall();
      expect((await store.claim(e, lease)).status).toBe('in_progress');
    });

    it('counts abandoned claims (leases that ran out), and forgets them on complete or release', async () => {
      const e = id();
      const abandoned = (r: ClaimResult) => (r.status === 'claimed' ? (r.abandoned ?? 0) : -1);
      expect(abandoned(await store.claim(e, SHORT))).toBe(0);
      await sleep(PAST_SHORT);
      const second = await store.claim(e, SHORT);
      expect(abandoned(second)).toBe(1);
      await sleep(PAST_SHORT);
      const third = await store.claim(e, LIVE);
      expect(abandoned(third)).toBe(2);
      stall();
      await store.release(e, tokenOf(third));
      const fourth = await store.claim(e, LIVE);
      stall();
      expect(abandoned(fourth)).toBe(0);
      expect(await store.complete(e, tokenOf(fourth), 60_000)).toBe(true);
      expect(await store.forget?.(e)).toBe(true);
      expect(abandoned(await store.claim(e, LIVE))).toBe(0);
    });

    it('forget deletes a done record, never a live lease', async () => {
      const e = id();
      const t = tokenOf(await store.claim(e, LIVE));
      stall();
      expect(await store.forget?.(e)).toBe(false);
      expect(await store.peek(e)).toBe('in_progress');
      expect(await store.complete(e, t, 60_000)).toBe(true);
      expect(await store.forget?.(e)).toBe(true);
      expect(await store.peek(e)).toBe('absent');
      expect((await store.claim(e, LIVE)).status).toBe('claimed');
    });

    it('a done event is forgotten after its retention', async () => {
      const e = id();
      const t = tokenOf(await store.claim(e, LIVE));
      stall();
      expect(await store.complete(e, t, SHORT)).toBe(true);
      await sleep(PAST_SHORT);
      expect(await store.peek(e)).toBe('absent');
      tokenOf(await store.claim(e, LIVE));
    });

    it('ids are kept apart exactly, also ids that are not well-formed UTF-16 (lone surrogates)', async () => {
      const base = id();
      const suffixes = ['\ud800', '\ud801', '\udfff', '\ufffd', '\ude00\ud83d', '\ud83d\ude00', '\u0000', ''];
      const ids = suffixes.map((suffix) => `${base}${suffix}`);
      const tokens = await Promise.all(ids.map(async (e) => tokenOf(await store.claim(e, LIVE))));
      stall();
      expect(await store.complete(ids[0] as string, tokens[0] as string, 60_000)).toBe(true);
      expect(await Promise.all(ids.map((e) => store.peek(e)))).toEqual(
        ids.map((_, i) => (i === 0 ? 'done' : 'in_progress')),
      );
      expect(await store.complete(ids[1] as string, tokens[0] as string, 60_000)).toBe(false);
      expect(await store.complete(ids[1] as string, tokens[1] as string, 60_000)).toBe(true);
    });

    it('of 50 concurrent claims of one event exactly one wins; 200 distinct claims all win', async () => {
      const e = id();
      const same = await Promise.all(
        Array.from({ length: 50 }, (_, i) => {
          if (i === 25) stall(); // half of the claims sent, the other half not yet
          return store.claim(e, LIVE);
        }),
      );
      expect(same.filter((r) => r.status === 'claimed')).toHaveLength(1);
      const distinct = await Promise.all(Array.from({ length: 200 }, () => store.claim(id(), LIVE)));
      expect(distinct.every((r) => r.status === 'claimed')).toBe(true);
    });
  });
}
