/**
 * How close to the floor a consumer built another way could get: the least machinery a
 * batch-at-a-time consumer would have (docs/performance-log.md, "A receive as one batch").
 *
 * Per receive of as many messages as the pipeline holds in flight (64, or fewer where the
 * default `maxInFlightBytes` binds: 27 at 64 KB) from the memory source: verify each
 * (`verifyMessage`), claim all in ONE transaction of the store's own claim statement, validate
 * each body and call a no-op handler, decide each outcome, complete all in ONE transaction of the
 * store's complete statements, each after a turn of the event loop (as the store's group commit
 * of small batches waits), settle each message. No promise per event, no per-event store call, no router, no
 * lease keeper, no tracing, no logging: everything the real pipeline does per event beyond that
 * is left out. Run beside the pipeline and both floors, interleaved:
 *
 *   npx tsx bench/batch-bound.ts [--size 300B] [--n 20000] [--reps 6]
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createMemorySource } from '../adapters/memory/index.js';
import { DEFAULT_MAX_ENVELOPE_BYTES } from '../src/core/envelope.js';
import { validateEvent } from '../src/core/events/validate.js';
import { DEFAULT_RETRY_POLICY, type DecisionPolicy, decide, type Outcome } from '../src/core/outcome.js';
import { Keyring } from '../src/core/secrets.js';
import { verifyMessage } from '../src/core/verify.js';

import { makeEnvelopes, OUR_SECRET, sizeByLabel } from './fixtures.js';
import { floorBatchFor, runFloorOnce, runPipelineOnce } from './pipeline.js';
import { fmtFixed, fmtInt, median, runInterleaved, table } from './stats.js';
import { openStoreFileBare } from './store-file.js';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: '300B' },
    n: { type: 'string', default: '20000' },
    reps: { type: 'string', default: '6' },
  },
});

const BATCH = 64;
const LEASE_MS = 60_000;
const RETENTION_MS = 7 * 24 * 3600_000;
const POLICY: DecisionPolicy = {
  retry: DEFAULT_RETRY_POLICY,
  leaseMs: LEASE_MS,
  handlerTimeoutMs: 30_000,
  unknownEventTypes: 'ack',
};

interface Timed {
  readonly ms: number;
  readonly cpuUs: number;
}

export async function runBoundOnce(raws: readonly string[]): Promise<Timed> {
  const dir = mkdtempSync(join(tmpdir(), 'phe-bound-'));
  try {
    const { db, claim, endLease, recordDone } = await openStoreFileBare(join(dir, 'bound.sqlite'));
    const prefix = randomBytes(6).toString('base64url');
    let seq = 0;
    const claimAll = db.transaction((ids: readonly string[]) => {
      const now = Date.now();
      return ids.map((id) => {
        const token = prefix + (++seq).toString(36);
        return claim.run(id, token, now + LEASE_MS, id, now).changes === 1 ? token : undefined;
      });
    });
    const completeAll = db.transaction((ids: readonly string[], tokens: readonly string[]) => {
      const expiresAt = Date.now() + RETENTION_MS;
      for (let i = 0; i < ids.length; i++) {
        if (endLease.run(ids[i], tokens[i]).changes !== 1) throw new Error('bound: complete missed');
        recordDone.run(ids[i], expiresAt);
      }
    });
    // Each store step after a turn of the event loop, as the store's group commit does.
    const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
    const keyring = new Keyring([{ id: 'current', secret: OUR_SECRET }]);
    const source = createMemorySource({ endWhenEmpty: true });
    for (const raw of raws) source.send(raw);
    const signal = new AbortController().signal;
    const handler = (_event: unknown) => {};
    // As many as the pipeline holds in flight (its default maxInFlightBytes binds for large events).
    const receiveSize = floorBatchFor(BATCH, (raws[0] as string).length);

    // As the pipeline's and the floors' runs do: a full GC first, its sweeping done by the timing.
    (globalThis as { gc?: () => void }).gc?.();
    const cpu = process.cpuUsage();
    const started = performance.now();
    for (;;) {
      const batch = await source.receive(receiveSize, signal);
      if (batch === null) break;
      const verified = batch.map((m) =>
        verifyMessage(m.body, {
          keyring,
          now: Date.now(),
          enqueuedAt: m.enqueuedAt,
          maxEnvelopeBytes: DEFAULT_MAX_ENVELOPE_BYTES,
        }),
      );
      const ids = verified.map((v) => v.eventId);
      await nextTurn();
      const tokens = claimAll.immediate(ids);
      const outcomes: Outcome[] = [];
      for (let i = 0; i < verified.length; i++) {
        const v = verified[i] as (typeof verified)[number];
        const validation = validateEvent(v.eventType, v.payload);
        if (tokens[i] === undefined || !validation.ok) throw new Error('bound: not claimed or invalid');
        handler(validation.event);
        outcomes.push(
          decide({ kind: 'handled' }, (batch[i] as (typeof batch)[number]).attempt, POLICY).outcome,
        );
      }
      await nextTurn();
      completeAll.immediate(ids, tokens as string[]);
      await Promise.all(batch.map((m, i) => source.settle(m, outcomes[i] as Outcome)));
    }
    db.close();
    const ms = performance.now() - started;
    const used = process.cpuUsage(cpu);
    if (source.settled.length !== raws.length) throw new Error('bound: not every message settled');
    return { ms, cpuUs: used.user + used.system };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const n = Number(values.n);
const reps = Number(values.reps);
const size = sizeByLabel(values.size);
const raws = makeEnvelopes(size.bytes, n);
const sides = {
  bound: () => runBoundOnce(raws),
  pipeline: () => runPipelineOnce(raws, BATCH),
  floor: () =>
    runFloorOnce(raws, { complete: false, batch: floorBatchFor(BATCH, (raws[0] as string).length) }),
  'floor+c': () =>
    runFloorOnce(raws, { complete: true, batch: floorBatchFor(BATCH, (raws[0] as string).length) }),
} as const;
type Side = keyof typeof sides;
const names = Object.keys(sides) as Side[];
const timed = await runInterleaved(sides, reps);

const perSec = (t: Timed) => (n / t.ms) * 1000;
const cpuPer = (t: Timed) => t.cpuUs / n;
/** Per repetition, `a` ÷ `b` by events/s and by CPU, medians. */
const ratio = (a: Side, b: Side) => ({
  wall: median(timed[a].map((t, i) => perSec(t) / perSec(timed[b][i] as Timed))),
  cpu: median(timed[a].map((t, i) => cpuPer(timed[b][i] as Timed) / cpuPer(t))),
});
console.log(`${size.label} bodies, ${fmtInt(n)} events, ${reps} interleaved repetitions, medians\n`);
const rows = [['', 'events/s', 'CPU µs/event', '÷ floor', '÷ floor+c', '÷ floor (CPU)', '÷ floor+c (CPU)']];
for (const side of names) {
  const f = ratio(side, 'floor');
  const fc = ratio(side, 'floor+c');
  rows.push([
    side,
    fmtInt(median(timed[side].map(perSec))),
    fmtFixed(median(timed[side].map(cpuPer)), 2),
    fmtFixed(f.wall, 2),
    fmtFixed(fc.wall, 2),
    fmtFixed(f.cpu, 2),
    fmtFixed(fc.cpu, 2),
  ]);
}
console.log(table(rows));
