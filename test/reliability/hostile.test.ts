/**
 * Hostile input through a real consumer (MemorySource → Consumer → pipeline, concurrency 16,
 * memory dedupe, an in-memory dead-letter sink): fast-check generated envelopes and byte-level
 * mutations of valid ones. For every message, an independent oracle (support/hostile.ts) says
 * whether it is valid; the consumer must handle exactly the valid ones and dead-letter every
 * other one with the oracle's code, never crash, never hand a handler anything not validly
 * signed, keep Object.prototype clean, and classify a replayed message the same way again.
 *
 * fast-check prints its seed and the shrunk batch on failure; the seed comes from RELIABILITY_SEED.
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemorySource } from '../../adapters/memory/index.js';
import { type Consumer, createConsumer, type SettledReport } from '../../src/consumer/consumer.js';
import type { DeadLetterSink } from '../../src/consumer/dead-letter-sink.js';
import type { HandlerContext } from '../../src/consumer/router.js';
import {
  DEFAULT_DEAD_LETTER_MAX_UNVERIFIED_BYTES,
  type DeadLetterRecord,
  deadLetterRecord,
  rawOfDeadLetter,
  storedRawOfDeadLetter,
} from '../../src/core/dead-letter-record.js';
import { ERROR_CODES } from '../../src/core/errors.js';
import { createLogger } from '../../src/core/logger.js';
import { createMemoryDedupe } from '../../src/dedupe/memory.js';
import {
  build,
  type HostileCase,
  type Keys,
  mutate,
  mutationArb,
  NOW,
  oracle,
  type Region,
  recipeArb,
  sizeCases,
  validRecipeArb,
} from './support/hostile.js';
import { report, SIZES, seedFor, timeout } from './support/profile.js';
import { SecretScan, suiteSecret } from './support/secrets.js';

const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

const keys: Keys = {
  current: suiteSecret('hostile-current'),
  previous: suiteSecret('hostile-previous'),
  attacker: 'an-attacker-guess-at-the-signing-secret',
};
const scan = new SecretScan([keys.current, keys.previous]);

interface Final {
  readonly kind: 'ack' | 'dead';
  readonly detail: string;
}

/** The consumer under attack and everything it produced. */
class Target {
  readonly source = createMemorySource({ now: () => NOW });
  readonly cases = new Map<string, HostileCase>();
  readonly finals = new Map<string, Final>();
  readonly violations: string[] = [];
  readonly deadRecords: DeadLetterRecord[] = [];
  readonly codes = new Map<string, number>();
  readonly allCodes = new Map<string, number>();
  handlerCalls = 0;
  logLines = 0;
  deadLetters = 0;
  forgedAccepted = 0;
  #waiting: { ids: Set<string>; resolve: () => void } | undefined;
  readonly consumer: Consumer;

  constructor() {
    const deadLetter: DeadLetterSink = {
      write: async (record) => {
        this.deadRecords.push(record);
        scan.scan('dead-letter record', JSON.stringify(record));
      },
      close: async () => undefined,
    };
    const logger = createLogger(
      { level: 'debug' },
      {
        write: (line: string) => {
          this.logLines++;
          scan.scan('log line', line);
        },
      },
    );
    this.consumer = createConsumer({
      source: this.source,
      secrets: [
        { id: 'current', secret: keys.current },
        { id: 'previous', secret: keys.previous },
      ],
      dedupe: createMemoryDedupe(),
      deadLetter,
      logger,
      concurrency: 16,
      now: () => NOW,
      // One delivery: every failure is final (IN_PROGRESS, never a failure, still retries).
      retry: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 },
      onSettled: (r) => this.#settled(r),
    });
    const spy = (event: { event_id: string; event_type: string }, ctx: HandlerContext) =>
      this.#spy(event, ctx);
    this.consumer.on('*', spy).onUnknown(spy);
  }

  #spy(event: { event_id: string; event_type: string }, ctx: HandlerContext): void {
    this.handlerCalls++;
    const c = this.cases.get(ctx.messageId);
    if (!c) {
      this.violations.push(`handler saw unknown message ${ctx.messageId}`);
      return;
    }
    const expected = oracle(c.raw, c.enqueuedAt, keys);
    if (!expected.valid)
      this.violations.push(`handler ran for an invalid message (${expected.code}): ${c.label}`);
    if (!c.signedPairs.includes(`${ctx.signedAt}.${ctx.rawBody}`)) {
      this.violations.push(`handler saw a body/signed_at pair nobody signed: ${c.label}`);
    }
    const body = JSON.parse(ctx.rawBody) as { event_id?: unknown; event_type?: unknown };
    if (
      event.event_id !== body.event_id ||
      ctx.eventId !== body.event_id ||
      event.event_type !== body.event_type
    ) {
      this.violations.push(`handler's event ids differ from the signed body: ${c.label}`);
    }
  }

  #settled(r: SettledReport): void {
    const { outcome } = r;
    if (outcome.kind !== 'ack') scan.scan('outcome reason', outcome.reason);
    if (outcome.kind === 'retry') {
      if (outcome.code !== 'IN_PROGRESS')
        this.violations.push(`unexpected retry ${outcome.code} for ${r.message.id}`);
      return;
    }
    const detail = outcome.kind === 'ack' ? outcome.result : outcome.code;
    this.finals.set(r.message.id, { kind: outcome.kind, detail });
    this.codes.set(detail, (this.codes.get(detail) ?? 0) + 1);
    const w = this.#waiting;
    if (w?.ids.delete(r.message.id) && w.ids.size === 0) w.resolve();
  }

  /** Outcome counts since the last call (first deliveries and replays), most frequent first. */
  takeCodes(): Record<string, number> {
    const out = Object.fromEntries([...this.codes.entries()].sort((a, b) => b[1] - a[1]));
    for (const [code, n] of this.codes) this.allCodes.set(code, (this.allCodes.get(code) ?? 0) + n);
    this.codes.clear();
    return out;
  }

  /** Delivers the messages and waits for a final outcome of each. */
  async deliver(messages: readonly { id: string; c: HostileCase }[]): Promise<void> {
    const ids = new Set(messages.map((m) => m.id));
    if (ids.size === 0) return;
    const done = new Promise<void>((resolve) => {
      this.#waiting = { ids, resolve };
    });
    for (const { id, c } of messages) {
      this.cases.set(id, c);
      this.source.send(c.raw, { id, enqueuedAt: c.enqueuedAt });
    }
    await done;
    this.#waiting = undefined;
  }

  /**
   * After a batch: every dead letter holds the exact bytes received (replay needs them), except
   * that one that never verified keeps at most a 64 KiB prefix (with the length and SHA-256) and
   * is never more than 4/3 of what it keeps (amplification); count forged messages acked; then
   * forget the batch (deep-nesting and megabyte cases add up).
   */
  settleBatch(): string[] {
    const problems: string[] = [];
    for (const record of this.deadRecords) {
      const original = this.cases.get(record.message_id)?.raw;
      if (original === undefined) {
        problems.push(`dead letter ${record.message_id} for a message never sent`);
        continue;
      }
      const originalBytes = Buffer.from(original);
      const stored = Buffer.from(storedRawOfDeadLetter(record));
      if (
        record.event_id === null &&
        Buffer.byteLength(JSON.stringify(record.raw)) - 2 > Math.ceil(stored.length / 3) * 4
      ) {
        problems.push(`dead letter ${record.message_id} (${record.raw_encoding}) grows beyond base64`);
      }
      if (record.raw_truncated) {
        const described =
          record.event_id === null &&
          stored.length === DEFAULT_DEAD_LETTER_MAX_UNVERIFIED_BYTES &&
          originalBytes.subarray(0, stored.length).equals(stored) &&
          record.raw_bytes === originalBytes.length &&
          record.raw_sha256 === createHash('sha256').update(originalBytes).digest('hex');
        if (!described) problems.push(`truncated dead letter ${record.message_id} misdescribes the bytes`);
        continue;
      }
      const keptBytes = Buffer.from(rawOfDeadLetter(record));
      if (originalBytes.equals(keptBytes)) continue;
      problems.push(
        `dead letter ${record.message_id} (${record.raw_encoding}) does not hold the bytes received`,
      );
    }
    this.deadLetters += this.deadRecords.length;
    for (const [id, final] of this.finals) {
      const c = this.cases.get(id);
      if (final.kind === 'ack' && c !== undefined && !oracle(c.raw, c.enqueuedAt, keys).valid)
        this.forgedAccepted++;
    }
    this.deadRecords.length = 0;
    this.finals.clear();
    this.cases.clear();
    this.source.settled.length = 0;
    return problems;
  }

  /** Checks each case against the oracle; returns mismatch descriptions. */
  check(messages: readonly { id: string; c: HostileCase; replayOf?: Final }[]): string[] {
    const problems: string[] = [];
    for (const { id, c, replayOf } of messages) {
      const final = this.finals.get(id);
      const expected = oracle(c.raw, c.enqueuedAt, keys);
      const show = () =>
        `${c.label} ${JSON.stringify(typeof c.raw === 'string' ? c.raw.slice(0, 300) : Buffer.from(c.raw).toString('base64').slice(0, 300))}`;
      if (!final) {
        problems.push(`no outcome: ${show()}`);
        continue;
      }
      if (!(ERROR_CODES as readonly string[]).includes(final.detail) && final.kind === 'dead') {
        problems.push(`unknown code ${final.detail}: ${show()}`);
      }
      if (expected.valid) {
        const want = replayOf ? 'duplicate' : 'handled';
        if (final.kind !== 'ack' || final.detail !== want) {
          problems.push(`valid message became ${final.kind}/${final.detail}, want ack/${want}: ${show()}`);
        }
      } else if (final.kind !== 'dead' || final.detail !== expected.code) {
        problems.push(
          `invalid message became ${final.kind}/${final.detail}, want dead/${expected.code}: ${show()}`,
        );
      }
      if (replayOf && !expected.valid && (replayOf.kind !== final.kind || replayOf.detail !== final.detail)) {
        problems.push(`replay classified ${final.detail}, first time ${replayOf.detail}: ${show()}`);
      }
    }
    return problems;
  }
}

let target: Target;
let seq = 0;
const nextId = () => `evt-h-${(++seq).toString(36)}`;
const prototypeBefore = Object.getOwnPropertyNames(Object.prototype).sort();
const crashes: unknown[] = [];
const onCrash = (error: unknown) => void crashes.push(error);
const totals = { generated: 0, mutated: 0, sized: 0, replayed: 0, valid: 0 };

beforeAll(async () => {
  process.on('uncaughtException', onCrash);
  process.on('unhandledRejection', onCrash);
  target = new Target();
  await target.consumer.start();
});
afterAll(async () => {
  await target?.consumer.stop();
  process.off('uncaughtException', onCrash);
  process.off('unhandledRejection', onCrash);
});

/** Runs one batch: deliver, check, then replay every 10th case (same bytes, new message). */
async function runBatch(cases: readonly HostileCase[]): Promise<void> {
  const first = cases.map((c) => ({ id: `m-${c.id}`, c }));
  await target.deliver(first);
  const problems = target.check(first);
  const replays = first
    .filter((_, i) => i % 10 === 0)
    .map(({ id, c }) => ({ id: `r-${c.id}`, c, replayOf: target.finals.get(id) as Final }));
  await target.deliver(replays);
  problems.push(...target.check(replays));
  problems.push(...target.settleBatch());
  totals.replayed += replays.length;
  totals.valid += cases.filter((c) => oracle(c.raw, c.enqueuedAt, keys).valid).length;
  expect(problems).toEqual([]);
  expect(target.violations).toEqual([]);
  expect(target.consumer.status.state).toBe('running');
}

const mutatedCaseArb = fc.record({
  base: validRecipeArb,
  region: fc.constantFrom<Region>('anywhere', 'anywhere', 'body', 'body', 'signature', 'signed_at', 'ids'),
  mutations: fc.array(mutationArb, { minLength: 1, maxLength: 4 }),
  asString: fc.boolean(),
});

describe('hostile input through a real consumer', () => {
  const { generated, mutated, batch } = SIZES.hostile;

  it(
    `${generated} generated envelopes: valid ones handled, every other one dead-lettered with the oracle's code`,
    async () => {
      const seed = seedFor('hostile-generated');
      report('hostile-seed', { property: 'generated', fast_check_seed: seed });
      await fc.assert(
        fc.asyncProperty(fc.array(recipeArb, { minLength: batch, maxLength: batch }), async (recipes) => {
          await runBatch(recipes.map((r) => build(r, nextId(), keys)));
          totals.generated += recipes.length;
        }),
        { seed, numRuns: Math.ceil(generated / batch), endOnFailure: true },
      );
      report('hostile-generated', { cases: totals.generated, outcomes: target.takeCodes() });
    },
    timeout(60_000, 900_000),
  );

  it(
    `${mutated} byte-level mutations of valid envelopes: accepted only when the signed bytes survived`,
    async () => {
      const seed = seedFor('hostile-mutated');
      report('hostile-seed', { property: 'mutated', fast_check_seed: seed });
      await fc.assert(
        fc.asyncProperty(fc.array(mutatedCaseArb, { minLength: batch, maxLength: batch }), async (items) => {
          const cases = items.map(({ base, region, mutations, asString }) => {
            const valid = build(base, nextId(), keys);
            const bytes = mutate(valid.raw as Uint8Array, mutations, region);
            const raw = asString ? new TextDecoder().decode(bytes) : bytes;
            return { ...valid, raw, label: `mutated:${region}:${mutations.map((m) => m.op).join('+')}` };
          });
          await runBatch(cases);
          totals.mutated += items.length;
        }),
        { seed, numRuns: Math.ceil(mutated / batch), endOnFailure: true },
      );
      report('hostile-mutated', { cases: totals.mutated, outcomes: target.takeCodes() });
    },
    timeout(60_000, 900_000),
  );

  it('oversize and near-limit envelopes (1 MiB exactly, 1 MiB + 1, multi-byte, 5 MiB)', async () => {
    const cases = sizeCases(keys, nextId);
    await runBatch(cases);
    totals.sized += cases.length;
    report('hostile-sizes', { cases: cases.length, outcomes: target.takeCodes() });
  });

  // Found by this suite (fixed): deadLetterRecord() decoded byte bodies with a TextDecoder that
  // dropped a leading BOM, so `raw` was not the bytes received.
  it('the dead letter of a byte message that starts with a UTF-8 BOM keeps the BOM', () => {
    const received = Buffer.concat([BOM, Buffer.from('{"not":"an envelope"}')]);
    const record = deadLetterRecord(
      { id: 'm-bom', body: new Uint8Array(received), attempt: 1 },
      { code: 'MALFORMED_ENVELOPE', reason: 'test' },
      'test',
    );
    expect(Buffer.from(rawOfDeadLetter(record)).equals(received)).toBe(true);
  });

  it('never crashed, kept Object.prototype clean, and leaked no secret; figures', () => {
    expect(crashes).toEqual([]);
    expect(Object.getOwnPropertyNames(Object.prototype).sort()).toEqual(prototypeBefore);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(({} as Record<string, unknown>).event_id).toBeUndefined();
    const forgedAccepted = target.forgedAccepted;
    const cases = totals.generated + totals.mutated + totals.sized;
    report('hostile', {
      cases,
      deliveries: cases + totals.replayed,
      ...totals,
      handler_calls: target.handlerCalls,
      forged_accepted: forgedAccepted,
      invalid_handled: target.violations.length,
      crashes: crashes.length,
      dead_letter_records: target.deadLetters,
      log_lines: target.logLines,
      outcomes: Object.fromEntries([...target.allCodes.entries()].sort((a, b) => b[1] - a[1])),
      prototype_clean: true,
      ...scan.figures,
    });
    expect(forgedAccepted).toBe(0);
    expect(scan.hits).toEqual([]);
  });
});
