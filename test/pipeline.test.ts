import { readFileSync } from 'node:fs';
import { type Logger, pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createMemorySource, type MemoryMessage } from '../adapters/memory/index.js';
import { createConsumer } from '../src/consumer/consumer.js';
import {
  COMMIT_AT_ONCE_BYTES,
  Pipeline,
  type PipelineSettings,
  type ProcessResult,
} from '../src/consumer/pipeline.js';
import { Router } from '../src/consumer/router.js';
import {
  createTestEnvelope,
  forgedEnvelope,
  futureEnvelope,
  staleEnvelope,
  TEST_SIGNING_SECRET,
  tamperedEnvelope,
} from '../src/consumer/testing.js';
import { DeadLetterError, DedupeUnavailableError, RetryLaterError } from '../src/core/errors.js';
import { createLogger, silentLogger } from '../src/core/logger.js';
import type { Outcome } from '../src/core/outcome.js';
import { Keyring } from '../src/core/secrets.js';
import type { SourceAdapter } from '../src/core/source-adapter.js';
import { createMemoryDedupe, MemoryDedupeStore } from '../src/dedupe/memory.js';
import type { BatchCallOptions, ClaimResult, DedupeStore, HeldClaim } from '../src/dedupe/types.js';
import { type Harness, harness } from './support/harness.js';

const SETTINGS: PipelineSettings = {
  maxEnvelopeBytes: 1024 * 1024,
  maxAgeSeconds: 300,
  maxFutureSkewSeconds: 300,
  strictAge: false,
  checkAge: true,
  retry: { maxAttempts: 3, baseDelayMs: 10, maxDelayMs: 50 },
  leaseMs: 60_000,
  retentionMs: 7 * 24 * 3600_000,
  handlerTimeoutMs: 5_000,
  unknownEventTypes: 'ack',
};

function pipeline(
  router: Router,
  options: {
    dedupe?: DedupeStore;
    settings?: Partial<PipelineSettings>;
    now?: () => number;
    logger?: Logger;
    keyring?: Keyring;
  } = {},
) {
  const dedupe = options.dedupe ?? createMemoryDedupe(options.now ? { now: options.now } : {});
  const p = new Pipeline(
    { ...SETTINGS, ...options.settings },
    {
      keyring: options.keyring ?? new Keyring([{ id: 'current', secret: TEST_SIGNING_SECRET }]),
      dedupe,
      router,
      logger: options.logger ?? silentLogger(),
      ...(options.now ? { now: options.now } : {}),
    },
  );
  return { pipeline: p, dedupe };
}

function message(body: string | Uint8Array, attempt = 1, enqueuedAt: number | undefined = Date.now()) {
  return { id: `m-${Math.random()}`, body, attempt, enqueuedAt };
}

describe('only the signed part is trusted', () => {
  it('rejects an envelope whose event_id differs from the body, without touching the dedupe store', async () => {
    const valid = createTestEnvelope('daily.data.heart_rate.created');
    const raw = JSON.stringify({ ...valid.envelope, event_id: 'evt_someone_else' });
    const handler = vi.fn();
    const { pipeline: p, dedupe } = pipeline(new Router().on('*', handler));
    const claim = vi.spyOn(dedupe, 'claim');
    const result = await p.process(message(raw));
    expect(result.outcome).toMatchObject({ kind: 'dead', code: 'ENVELOPE_MISMATCH' });
    expect(handler).not.toHaveBeenCalled();
    expect(claim).not.toHaveBeenCalled();
  });

  it('rejects an envelope whose event_type differs from the body (routing uses the signed type)', async () => {
    const valid = createTestEnvelope('daily.data.steps.created');
    const raw = JSON.stringify({ ...valid.envelope, event_type: 'coach.nudge.created' });
    const nudge = vi.fn();
    const { pipeline: p } = pipeline(new Router().on('coach.nudge.created', nudge));
    const result = await p.process(message(raw));
    expect(result.outcome).toMatchObject({ kind: 'dead', code: 'ENVELOPE_MISMATCH' });
    expect(nudge).not.toHaveBeenCalled();
  });

  it('de-duplicates on the event_id of the verified body', async () => {
    const event = createTestEnvelope('daily.data.heart_rate.created');
    const handler = vi.fn();
    const { pipeline: p, dedupe } = pipeline(new Router().on('daily.data.heart_rate.created', handler));
    await p.process(message(event.raw));
    expect(await dedupe.peek(String(event.event.event_id))).toBe('done');
    expect(handler.mock.calls[0]?.[0]).toMatchObject({ event_id: event.event.event_id });
  });

  it('records nothing in the dedupe store for forged, tampered, stale or future messages', async () => {
    const handler = vi.fn();
    const { pipeline: p, dedupe } = pipeline(new Router().on('*', handler));
    const claim = vi.spyOn(dedupe, 'claim');
    const bad = [
      forgedEnvelope('daily.data.steps.created'),
      tamperedEnvelope('daily.data.steps.created'),
      staleEnvelope('daily.data.steps.created'),
      futureEnvelope('daily.data.steps.created'),
    ];
    const codes = [];
    for (const b of bad) codes.push((await p.process(message(b.raw))).outcome);
    expect(codes.map((o) => (o.kind === 'ack' ? o.kind : o.code))).toEqual([
      'SIGNATURE_MISMATCH',
      'SIGNATURE_MISMATCH',
      'TIMESTAMP_TOO_OLD',
      'TIMESTAMP_TOO_NEW',
    ]);
    expect(claim).not.toHaveBeenCalled();
    for (const b of bad) expect(await dedupe.peek(b.eventId)).toBe('absent');
    expect(handler).not.toHaveBeenCalled();
  });
});

/** The memory store, noting how each batch call asked to be committed. */
class CommitRecordingDedupe extends MemoryDedupeStore {
  readonly calls: { readonly call: string; readonly events: number; readonly atOnce: boolean }[] = [];

  override claimMany(
    ids: readonly string[],
    leaseMs: number,
    options?: BatchCallOptions,
  ): Promise<ClaimResult[]> {
    this.calls.push({ call: 'claimMany', events: ids.length, atOnce: options?.commitAtOnce === true });
    return super.claimMany(ids, leaseMs);
  }

  override completeMany(
    claims: readonly HeldClaim[],
    retentionMs: number,
    options?: BatchCallOptions,
  ): Promise<boolean[]> {
    this.calls.push({ call: 'completeMany', events: claims.length, atOnce: options?.commitAtOnce === true });
    return super.completeMany(claims, retentionMs);
  }
}

describe('large batches commit at once', () => {
  /** `n` envelopes whose raw texts hold `each` characters or a little more. */
  const envelopes = (n: number, each: number) =>
    Array.from({ length: n }, () => {
      const padding = 'x'.repeat(Math.max(0, each - 400));
      return createTestEnvelope('daily.data.heart_rate.created', { fields: { raw_data: { padding } } }).raw;
    });

  it('asks the store to commit without waiting a turn when the batch holds COMMIT_AT_ONCE_BYTES or more, and to wait otherwise', async () => {
    const handler = vi.fn();
    const dedupe = new CommitRecordingDedupe();
    const { pipeline: p } = pipeline(new Router().on('daily.data.heart_rate.created', handler), { dedupe });
    const run = (raws: readonly (string | Uint8Array)[]) =>
      p.processBatch(
        raws.map((r) => message(r)),
        () => {},
      );

    const small = envelopes(8, 2048);
    await run(small);
    // Just under and just over the bound, counted as the bodies' lengths (characters of text).
    const each = Math.ceil(COMMIT_AT_ONCE_BYTES / 8);
    const under = envelopes(8, each - 600);
    const over = envelopes(8, each);
    expect(under.reduce((sum, r) => sum + r.length, 0)).toBeLessThan(COMMIT_AT_ONCE_BYTES);
    expect(over.reduce((sum, r) => sum + r.length, 0)).toBeGreaterThanOrEqual(COMMIT_AT_ONCE_BYTES);
    await run(under);
    await run(over);
    // Binary bodies count their bytes (new events: the ones above are done).
    await run(envelopes(8, each).map((r) => new TextEncoder().encode(r)));

    expect(handler).toHaveBeenCalledTimes(32);
    expect(dedupe.calls).toEqual([
      { call: 'claimMany', events: 8, atOnce: false },
      { call: 'completeMany', events: 8, atOnce: false },
      { call: 'claimMany', events: 8, atOnce: false },
      { call: 'completeMany', events: 8, atOnce: false },
      { call: 'claimMany', events: 8, atOnce: true },
      { call: 'completeMany', events: 8, atOnce: true },
      { call: 'claimMany', events: 8, atOnce: true },
      { call: 'completeMany', events: 8, atOnce: true },
    ]);
  });

  it('counts only the messages that reach their claim: a large batch of forgeries asks nothing of the store', async () => {
    const dedupe = new CommitRecordingDedupe();
    const { pipeline: p } = pipeline(new Router().on('*', vi.fn()), { dedupe });
    const forged = envelopes(8, Math.ceil(COMMIT_AT_ONCE_BYTES / 8)).map((r) =>
      r.replace(/"signature":"[0-9a-f]/, '"signature":"g'),
    );
    const good = envelopes(2, 2048);
    await p.processBatch(
      [...forged, ...good].map((r) => message(r)),
      () => {},
    );
    expect(dedupe.calls).toEqual([
      { call: 'claimMany', events: 2, atOnce: false },
      { call: 'completeMany', events: 2, atOnce: false },
    ]);
  });
});

describe('backlog is not an attack', () => {
  it('accepts an event signed 10 minutes ago when the broker enqueued it then', async () => {
    const signedAt = Math.floor(Date.now() / 1000) - 600;
    const event = createTestEnvelope('daily.data.steps.created', { signedAt });
    const handler = vi.fn();
    const { pipeline: p } = pipeline(new Router().on('*', handler));
    const result = await p.process(message(event.raw, 1, signedAt * 1000 + 2000));
    expect(result.outcome).toEqual({ kind: 'ack', result: 'handled' });
    expect(handler).toHaveBeenCalledOnce();
  });

  it('rejects the same old envelope re-sent now (fresh enqueue time)', async () => {
    const event = staleEnvelope('daily.data.steps.created', 600);
    const { pipeline: p } = pipeline(new Router().on('*', vi.fn()));
    const result = await p.process(message(event.raw, 1, Date.now()));
    expect(result.outcome).toMatchObject({ kind: 'dead', code: 'TIMESTAMP_TOO_OLD' });
  });

  it('with strictAge, measures against the clock and rejects the backlog', async () => {
    const signedAt = Math.floor(Date.now() / 1000) - 600;
    const event = createTestEnvelope('daily.data.steps.created', { signedAt });
    const { pipeline: p } = pipeline(new Router().on('*', vi.fn()), { settings: { strictAge: true } });
    const result = await p.process(message(event.raw, 1, signedAt * 1000 + 2000));
    expect(result.outcome).toMatchObject({ kind: 'dead', code: 'TIMESTAMP_TOO_OLD' });
  });

  it('without a broker time (files, HTTP), measures against the clock', async () => {
    const event = staleEnvelope('daily.data.steps.created', 600);
    const { pipeline: p } = pipeline(new Router().on('*', vi.fn()));
    const result = await p.process(message(event.raw, 1, undefined));
    expect(result.outcome).toMatchObject({ kind: 'dead', code: 'TIMESTAMP_TOO_OLD' });
  });
});

describe('dedupe is a lease, not a flag', () => {
  it('acks a proven duplicate without running the handler again', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const handler = vi.fn();
    const { pipeline: p } = pipeline(new Router().on('*', handler));
    expect((await p.process(message(event.raw))).outcome).toEqual({ kind: 'ack', result: 'handled' });
    expect((await p.process(message(event.raw))).outcome).toEqual({ kind: 'ack', result: 'duplicate' });
    expect(handler).toHaveBeenCalledOnce();
  });

  it('treats a re-signed retry of the same event_id as a duplicate', async () => {
    const first = createTestEnvelope('daily.data.steps.created');
    const retry = createTestEnvelope('daily.data.steps.created', {
      fields: first.event,
      signedAt: Math.floor(Date.now() / 1000) - 30,
    });
    expect(retry.envelope.signature).not.toBe(first.envelope.signature);
    const handler = vi.fn();
    const { pipeline: p } = pipeline(new Router().on('*', handler));
    await p.process(message(first.raw));
    expect((await p.process(message(retry.raw))).outcome).toEqual({ kind: 'ack', result: 'duplicate' });
    expect(handler).toHaveBeenCalledOnce();
  });

  it('a failed handler releases the claim, so the next delivery runs it again', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const handler = vi.fn().mockRejectedValueOnce(new Error('app down')).mockResolvedValueOnce(undefined);
    const { pipeline: p, dedupe } = pipeline(new Router().on('*', handler));
    const first = await p.process(message(event.raw, 1));
    expect(first.outcome).toMatchObject({ kind: 'retry', code: 'HANDLER_FAILED' });
    expect(await dedupe.peek(event.eventId)).toBe('absent');
    const second = await p.process(message(event.raw, 2));
    expect(second.outcome).toEqual({ kind: 'ack', result: 'handled' });
    expect(handler).toHaveBeenCalledTimes(2);
  });

  it('a claim held by another live worker means "retry later", not "duplicate"', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    let finish!: () => void;
    const handler = vi.fn(() => new Promise<void>((resolve) => (finish = resolve)));
    const { pipeline: p } = pipeline(new Router().on('*', handler));
    const first = p.process(message(event.raw));
    await vi.waitFor(() => expect(handler).toHaveBeenCalledOnce());
    const second = await p.process(message(event.raw));
    expect(second.outcome).toMatchObject({ kind: 'retry', code: 'IN_PROGRESS' });
    finish();
    expect((await first).outcome).toEqual({ kind: 'ack', result: 'handled' });
  });

  it('never dead-letters an event only because another worker holds it', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const dedupe = createMemoryDedupe();
    await dedupe.claim(event.eventId, 60_000);
    const { pipeline: p } = pipeline(new Router().on('*', vi.fn()), { dedupe });
    const result = await p.process(message(event.raw, 50));
    expect(result.outcome).toMatchObject({ kind: 'retry', code: 'IN_PROGRESS' });
  });

  it('crash window: a worker that dies after claiming blocks others only until its lease expires', async () => {
    let now = Date.now();
    const clock = () => now;
    const dedupe = createMemoryDedupe({ now: clock });
    const event = createTestEnvelope('daily.data.steps.created');
    // Worker A claimed and crashed (never completed, never released).
    expect((await dedupe.claim(event.eventId, 60_000)).status).toBe('claimed');
    const handler = vi.fn();
    const { pipeline: b } = pipeline(new Router().on('*', handler), { dedupe, now: clock });
    expect((await b.process(message(event.raw, 2, now))).outcome).toMatchObject({
      kind: 'retry',
      code: 'IN_PROGRESS',
    });
    now += 60_001;
    expect((await b.process(message(event.raw, 3, now - 60_000))).outcome).toEqual({
      kind: 'ack',
      result: 'handled',
    });
    expect(handler).toHaveBeenCalledOnce();
  });

  it('extends the lease while a slow handler runs, so no second copy starts', async () => {
    const dedupe = createMemoryDedupe();
    const event = createTestEnvelope('daily.data.steps.created');
    let release!: () => void;
    const handler = vi.fn(() => new Promise<void>((resolve) => (release = resolve)));
    const { pipeline: p } = pipeline(new Router().on('*', handler), { dedupe, settings: { leaseMs: 150 } });
    const extend = vi.spyOn(dedupe, 'extend');
    const running = p.process(message(event.raw));
    await vi.waitFor(() => expect(extend.mock.calls.length).toBeGreaterThanOrEqual(4), { timeout: 2000 });
    // Well past the 150 ms lease: a second delivery still finds it in progress.
    expect((await dedupe.claim(event.eventId, 150)).status).toBe('in_progress');
    release();
    expect((await running).outcome).toEqual({ kind: 'ack', result: 'handled' });
    expect(handler).toHaveBeenCalledOnce();
  });

  it('aborts the handler and does not ack when the lease cannot be extended', async () => {
    const dedupe = createMemoryDedupe();
    vi.spyOn(dedupe, 'extend').mockResolvedValue(false);
    const event = createTestEnvelope('daily.data.steps.created');
    let signal: AbortSignal | undefined;
    const handler = vi.fn((_e: unknown, ctx: { signal: AbortSignal }) => {
      signal = ctx.signal;
      return new Promise<void>(() => undefined); // never finishes on its own
    });
    const { pipeline: p } = pipeline(new Router().on('*', handler), { dedupe, settings: { leaseMs: 150 } });
    const result = await p.process(message(event.raw));
    expect(result.outcome).toMatchObject({ kind: 'retry', code: 'LEASE_LOST' });
    expect(signal?.aborted).toBe(true);
  });

  it('rides out a brief store outage during a lease extension without aborting the handler', async () => {
    const dedupe = createMemoryDedupe();
    const extend = vi
      .spyOn(dedupe, 'extend')
      .mockRejectedValueOnce(new DedupeUnavailableError('blip'))
      .mockRejectedValueOnce(new DedupeUnavailableError('blip'));
    let release!: () => void;
    let signal: AbortSignal | undefined;
    const handler = vi.fn((_e: unknown, ctx: { signal: AbortSignal }) => {
      signal = ctx.signal;
      return new Promise<void>((resolve) => (release = resolve));
    });
    const { pipeline: p } = pipeline(new Router().on('*', handler), { dedupe, settings: { leaseMs: 300 } });
    const running = p.process(message(createTestEnvelope('daily.data.steps.created').raw));
    await vi.waitFor(() => expect(extend.mock.calls.length).toBeGreaterThanOrEqual(4), { timeout: 3000 });
    expect(signal?.aborted).toBe(false);
    release();
    expect((await running).outcome).toEqual({ kind: 'ack', result: 'handled' });
  });

  it('aborts the handler before its lease lapses when an extension never answers (a hung store), so no second copy runs beside it', async () => {
    const dedupe = createMemoryDedupe();
    const extend = vi.spyOn(dedupe, 'extend').mockReturnValue(new Promise<boolean>(() => undefined));
    const event = createTestEnvelope('daily.data.steps.created');
    let abortedAt: number | undefined;
    const handler = vi.fn((_e: unknown, ctx: { signal: AbortSignal }) => {
      ctx.signal.addEventListener('abort', () => {
        abortedAt = Date.now();
      });
      return new Promise<void>(() => undefined);
    });
    const { pipeline: p } = pipeline(new Router().on('*', handler), {
      dedupe,
      settings: { leaseMs: 300, handlerTimeoutMs: 5_000 },
    });
    const claimedBy = Date.now() + 300;
    const result = await p.process(message(event.raw));
    expect(result.outcome).toMatchObject({ kind: 'retry', code: 'LEASE_LOST' });
    // Before the lease would lapse, not at the 5 s handler timeout; one extension asked, not one per tick.
    expect(abortedAt).toBeLessThan(claimedBy);
    expect(extend).toHaveBeenCalledOnce();
  });

  it("an extension's late answer does not abort a handler whose event was already settled", async () => {
    const dedupe = createMemoryDedupe();
    let answer: (held: boolean) => void = () => {};
    vi.spyOn(dedupe, 'extend').mockImplementation(
      () =>
        new Promise<boolean>((resolve) => {
          answer = resolve;
        }),
    );
    let signal: AbortSignal | undefined;
    let finish: () => void = () => {};
    const handler = vi.fn((_e: unknown, ctx: { signal: AbortSignal }) => {
      signal = ctx.signal;
      return new Promise<void>((resolve) => {
        finish = resolve;
      });
    });
    const { pipeline: p } = pipeline(new Router().on('*', handler), { dedupe, settings: { leaseMs: 300 } });
    const running = p.process(message(createTestEnvelope('daily.data.steps.created').raw));
    await vi.waitFor(() => expect(dedupe.extend).toHaveBeenCalled(), { timeout: 2000 });
    finish();
    expect((await running).outcome).toEqual({ kind: 'ack', result: 'handled' });
    answer(false); // "taken over", too late to matter: the event is done
    await new Promise((r) => setTimeout(r, 10));
    expect(signal?.aborted).toBe(false);
  });

  it('retries (never acks) while the dedupe store is unreachable', async () => {
    const dedupe = createMemoryDedupe();
    vi.spyOn(dedupe, 'claim').mockRejectedValue(new DedupeUnavailableError('connection refused'));
    const handler = vi.fn();
    const { pipeline: p } = pipeline(new Router().on('*', handler), { dedupe });
    const result = await p.process(message(createTestEnvelope('daily.data.steps.created').raw));
    expect(result.outcome).toMatchObject({ kind: 'retry', code: 'DEDUPE_UNAVAILABLE' });
    expect(handler).not.toHaveBeenCalled();
  });
});

describe("a bug in verification is the kit's fault, not the message's", () => {
  /** A keyring whose lookup throws, as a bug in the kit would (the event itself is good). */
  class ThrowingKeyring extends Keyring {
    override active(): never {
      throw new TypeError("Cannot read properties of undefined (reading 'keyObject')");
    }
  }

  it('retries a good event (INTERNAL_ERROR), dead after N, and logs the error with its stack', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const handler = vi.fn();
    const { pipeline: p, dedupe } = pipeline(new Router().on('*', handler), {
      keyring: new ThrowingKeyring([{ id: 'current', secret: TEST_SIGNING_SECRET }]),
      logger,
    });
    const event = createTestEnvelope('daily.data.steps.created');
    const first = await p.process(message(event.raw, 1));
    expect(first.outcome).toMatchObject({ kind: 'retry', code: 'INTERNAL_ERROR' });
    expect(first.outcome.kind === 'retry' && first.outcome.delayMs).toBeGreaterThan(0);
    expect(first.store).toBe('not-asked');
    const last = await p.process(message(event.raw, SETTINGS.retry.maxAttempts));
    expect(last.outcome).toMatchObject({ kind: 'dead', code: 'INTERNAL_ERROR' });
    expect(handler).not.toHaveBeenCalled();
    expect(await dedupe.peek(event.eventId)).toBe('absent');
    const errors = lines.filter((l) => l.level === 50);
    expect(errors).toHaveLength(2);
    expect(errors[0]).toMatchObject({ attempt: 1, err: expect.stringContaining("reading 'keyObject'") });
    expect(String(errors[0]?.stack)).toMatch(/TypeError[^\n]*\n\s+at ThrowingKeyring\.active/);
  });

  it("a VerificationError is still the message's: dead at once, logged at most as a warning", async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const { pipeline: p } = pipeline(new Router().on('*', vi.fn()), { logger });
    const result = await p.process(message('not json at all'));
    expect(result.outcome).toMatchObject({ kind: 'dead', code: 'MALFORMED_ENVELOPE' });
    expect(lines.filter((l) => Number(l.level) >= 50)).toEqual([]);
  });
});

describe('a bug of the kit in the middle of a batch', () => {
  /** The memory store, but its batch claim answers garbage for the last event: a bug's stand-in. */
  class GarbledClaims extends MemoryDedupeStore {
    override async claimMany(ids: readonly string[], leaseMs: number): Promise<ClaimResult[]> {
      const answers = await super.claimMany(ids, leaseMs);
      return [...answers.slice(0, -1), null as unknown as ClaimResult];
    }
  }

  /** A router whose lookup throws for one type: a bug's stand-in on the per-event path. */
  class ThrowingRouter extends Router {
    override match(type: Parameters<Router['match']>[0]): ReturnType<Router['match']> {
      if (type === 'daily.data.heart_rate.created') throw new TypeError('routes is undefined');
      return super.match(type);
    }
  }

  function gate() {
    let open: () => void = () => {};
    const opened = new Promise<void>((resolve) => {
      open = resolve;
    });
    return { opened, open };
  }

  it('claims together: every message is reported once, only after the running handler ended; the rest get INTERNAL_ERROR and their claims back', async () => {
    const slowHandler = gate();
    const slow = createTestEnvelope('daily.data.steps.created');
    const quick = createTestEnvelope('daily.data.steps.created');
    const garbled = createTestEnvelope('daily.data.steps.created');
    const dedupe = new GarbledClaims();
    const router = new Router().on('*', (event) =>
      event.event_id === slow.eventId ? slowHandler.opened : undefined,
    );
    const lines: { level: number; msg: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const { pipeline: p } = pipeline(router, { dedupe, logger });
    const results = new Map<number, ProcessResult[]>();
    let done = false;
    const batch = p
      .processBatch([message(slow.raw), message(quick.raw), message(garbled.raw)], (i, r) => {
        results.set(i, [...(results.get(i) ?? []), r]);
      })
      .then(() => {
        done = true;
      });
    await new Promise((r) => setTimeout(r, 20));
    // The slow handler still runs: nothing may be let go of yet (its slot is still taken).
    expect(done).toBe(false);
    expect(results.size).toBe(0);
    slowHandler.open();
    await batch;
    expect([...results.values()].map((r) => r.length)).toEqual([1, 1, 1]);
    expect(results.get(0)?.[0]?.outcome).toEqual({ kind: 'ack', result: 'handled' });
    for (const i of [1, 2]) {
      expect(results.get(i)?.[0]?.outcome).toMatchObject({
        kind: 'retry',
        code: 'INTERNAL_ERROR',
        reason: expect.stringMatching(/^unexpected exception while processing: /),
      });
    }
    expect(await dedupe.peek(slow.eventId)).toBe('done');
    // Its claim was released: the next delivery runs it at once, not after the lease.
    expect(await dedupe.peek(quick.eventId)).toBe('absent');
    expect(lines.filter((l) => l.level === 50).map((l) => l.msg)).toEqual([
      'unexpected exception while processing a batch',
    ]);
    const last = await p.process(message(quick.raw, SETTINGS.retry.maxAttempts));
    expect(last.outcome).toEqual({ kind: 'ack', result: 'handled' });
  });

  it('claims one by one: the same, and a message that never reached its claim says so', async () => {
    const slowHandler = gate();
    const slow = createTestEnvelope('daily.data.steps.created');
    const broken = createTestEnvelope('daily.data.heart_rate.created');
    const memory = createMemoryDedupe();
    const dedupe: DedupeStore = {
      claim: (id, leaseMs) => memory.claim(id, leaseMs),
      extend: (id, token, leaseMs) => memory.extend(id, token, leaseMs),
      complete: (id, token, retentionMs) => memory.complete(id, token, retentionMs),
      release: (id, token) => memory.release(id, token),
      peek: (id) => memory.peek(id),
      close: () => memory.close(),
    };
    const { pipeline: p } = pipeline(
      new ThrowingRouter().on('*', () => slowHandler.opened),
      { dedupe },
    );
    const results: [number, ProcessResult][] = [];
    let done = false;
    const batch = p
      .processBatch([message(slow.raw), message(broken.raw)], (i, r) => void results.push([i, r]))
      .then(() => {
        done = true;
      });
    await new Promise((r) => setTimeout(r, 20));
    expect(done).toBe(false);
    expect(results).toEqual([]);
    slowHandler.open();
    await batch;
    expect(results.map(([i, r]) => [i, r.outcome.kind, r.store])).toEqual([
      [0, 'ack', 'answered'],
      [1, 'retry', 'not-asked'],
    ]);
    expect(results[1]?.[1].outcome).toMatchObject({ code: 'INTERNAL_ERROR' });
    expect(await memory.peek(broken.eventId)).toBe('absent');
  });

  it('in a consumer: no slot is freed while a handler runs, stop() waits for it, and nothing is lost', async () => {
    const slowHandler = gate();
    const slow = createTestEnvelope('daily.data.steps.created');
    const garbled = createTestEnvelope('daily.data.steps.created');
    let running = 0;
    const h2 = harness({ dedupe: new GarbledClaims(), concurrency: 4 });
    try {
      h2.consumer.on('*', async (event) => {
        running++;
        if (event.event_id === slow.eventId) await slowHandler.opened;
        running--;
      });
      h2.source.send(slow.raw);
      h2.source.send(garbled.raw);
      await h2.consumer.start();
      await vi.waitFor(() => expect(running).toBe(1));
      await new Promise((r) => setTimeout(r, 20));
      expect(h2.consumer.status.inFlight).toBe(2);
      let stopped = false;
      const stopping = h2.consumer.stop().then(() => {
        stopped = true;
      });
      await new Promise((r) => setTimeout(r, 20));
      expect(stopped).toBe(false);
      slowHandler.open();
      await stopping;
      expect(h2.consumer.status.inFlight).toBe(0);
      expect(running).toBe(0);
      const outcomes = h2.source.settled.map((s) => (s.outcome.kind === 'ack' ? 'ack' : s.outcome.code));
      expect(outcomes.sort()).toEqual(['INTERNAL_ERROR', 'ack']);
    } finally {
      await h2.cleanup();
    }
  });
});

describe('a handler may throw anything', () => {
  it('a value with no string form fails its own message only: the others of its batch are acked, and it is retried then dead-lettered', async () => {
    const h2 = harness({ endWhenEmpty: true, concurrency: 8 });
    try {
      const events = [0, 1, 2].map(() => createTestEnvelope('daily.data.steps.created'));
      const bad = events[1]?.eventId;
      const calls = new Map<string, number>();
      h2.consumer.on('*', (event) => {
        calls.set(event.event_id, (calls.get(event.event_id) ?? 0) + 1);
        if (event.event_id === bad) throw Object.create(null);
      });
      for (const e of events) h2.source.send(e.raw);
      await h2.consumer.start();
      await h2.consumer.stopped;
      expect(events.map((e) => calls.get(e.eventId))).toEqual([1, 3, 1]);
      const outcomes = h2.reports.map((r) => [
        r.eventId,
        r.outcome.kind,
        r.outcome.kind === 'ack' ? '' : r.outcome.code,
      ]);
      expect(outcomes.filter(([id]) => id !== bad)).toEqual([
        [events[0]?.eventId, 'ack', ''],
        [events[2]?.eventId, 'ack', ''],
      ]);
      expect(outcomes.filter(([id]) => id === bad).map(([, kind]) => kind)).toEqual([
        'retry',
        'retry',
        'dead',
      ]);
      const dead = h2.reports.find((r) => r.outcome.kind === 'dead');
      expect(dead?.outcome).toMatchObject({
        code: 'HANDLER_FAILED',
        reason: expect.stringContaining('unprintable thrown value'),
      });
      expect(h2.consumer.status.inFlight).toBe(0);
    } finally {
      await h2.cleanup();
    }
  });

  it('a store that throws instead of rejecting is unavailable, not a bug of the batch', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const memory = createMemoryDedupe();
    const dedupe: DedupeStore = {
      claim: () => {
        throw new Error('client is closed');
      },
      extend: (id, token, leaseMs) => memory.extend(id, token, leaseMs),
      complete: (id, token, retentionMs) => memory.complete(id, token, retentionMs),
      release: (id, token) => memory.release(id, token),
      peek: (id) => memory.peek(id),
      close: () => memory.close(),
    };
    const { pipeline: p } = pipeline(new Router().on('*', vi.fn()), { dedupe });
    const result = await p.process(message(event.raw));
    expect(result.outcome).toMatchObject({
      kind: 'retry',
      code: 'DEDUPE_UNAVAILABLE',
      reason: 'client is closed',
    });
    expect(result.store).toBe('unavailable');
  });
});

describe('the result says whether the dedupe store answered', () => {
  it('not-asked before the claim, unavailable when the claim failed, answered once it answered', async () => {
    const dedupe = createMemoryDedupe();
    const { pipeline: p } = pipeline(new Router().on('daily.data.steps.created', vi.fn()), { dedupe });
    const steps = createTestEnvelope('daily.data.steps.created');
    expect((await p.process(message(forgedEnvelope('daily.data.steps.created').raw))).store).toBe(
      'not-asked',
    );
    // A catalog type nobody handles: acked as ignored without asking the store.
    expect((await p.process(message(createTestEnvelope('daily.data.sleep.created').raw))).store).toBe(
      'not-asked',
    );
    expect((await p.process(message(steps.raw))).store).toBe('answered');
    expect((await p.process(message(steps.raw))).outcome).toEqual({ kind: 'ack', result: 'duplicate' });
    vi.spyOn(dedupe, 'claim').mockRejectedValueOnce(new DedupeUnavailableError('connection refused'));
    const down = await p.process(message(createTestEnvelope('daily.data.steps.created').raw));
    expect(down).toMatchObject({ store: 'unavailable', outcome: { code: 'DEDUPE_UNAVAILABLE' } });
  });
});

describe('a handler that keeps killing its worker (abandoned claims)', () => {
  /** The event's claim taken and abandoned `times` times (each lease ran out, no outcome). */
  async function abandon(dedupe: MemoryDedupeStore, eventId: string, times: number, clock: { t: number }) {
    for (let i = 0; i < times; i++) {
      await dedupe.claim(eventId, 1000);
      clock.t += 1000;
    }
  }

  it('dead-letters as HANDLER_ABANDONED after 3 abandoned claims, without running the handler again', async () => {
    const clock = { t: Date.now() };
    const dedupe = createMemoryDedupe({ now: () => clock.t });
    const event = createTestEnvelope('daily.data.steps.created');
    await abandon(dedupe, event.eventId, 3, clock);
    const handler = vi.fn();
    const { pipeline: p } = pipeline(new Router().on('*', handler), { dedupe });
    const result = await p.process(message(event.raw, 4, clock.t));
    expect(result.outcome).toMatchObject({ kind: 'dead', code: 'HANDLER_ABANDONED' });
    expect(result.outcome.kind === 'dead' && result.outcome.reason).toMatch(/abandoned 3 times/);
    expect(handler).not.toHaveBeenCalled();
    expect(await dedupe.peek(event.eventId)).toBe('absent'); // released: a replay may claim it
  });

  it('runs the handler below the limit, and not at all with maxAbandonedClaims 0', async () => {
    const clock = { t: Date.now() };
    const dedupe = createMemoryDedupe({ now: () => clock.t });
    const [twice, often] = [
      createTestEnvelope('daily.data.steps.created'),
      createTestEnvelope('coach.nudge.created'),
    ];
    await abandon(dedupe, twice.eventId, 2, clock);
    await abandon(dedupe, often.eventId, 5, clock);
    const handler = vi.fn();
    const lines: string[] = [];
    const logger = createLogger({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
    const limited = pipeline(new Router().on('*', handler), { dedupe, logger });
    expect((await limited.pipeline.process(message(twice.raw, 3, clock.t))).outcome).toEqual({
      kind: 'ack',
      result: 'handled',
    });
    // Each abandoned handling is logged before the limit is reached.
    expect(lines.map((l) => JSON.parse(l))).toEqual([
      expect.objectContaining({ event_id: twice.eventId, abandoned: 2, limit: 3 }),
    ]);
    const unlimited = pipeline(new Router().on('*', handler), {
      dedupe,
      settings: { maxAbandonedClaims: 0 },
    });
    expect((await unlimited.pipeline.process(message(often.raw, 6, clock.t))).outcome).toEqual({
      kind: 'ack',
      result: 'handled',
    });
    expect(handler).toHaveBeenCalledTimes(2);
  });

  it('a timed-out handler keeps the claim until it stops, then releases it (not counted as abandoned)', async () => {
    const dedupe = createMemoryDedupe();
    let finish!: () => void;
    const { pipeline: p } = pipeline(
      new Router().on('*', () => new Promise<void>((resolve) => (finish = resolve))),
      { dedupe, settings: { handlerTimeoutMs: 50 } },
    );
    const event = createTestEnvelope('daily.data.steps.created');
    const result = await p.process(message(event.raw));
    expect(result.outcome).toMatchObject({ kind: 'retry', code: 'HANDLER_TIMEOUT' });
    expect(await dedupe.peek(event.eventId)).toBe('in_progress'); // it may still be running
    finish();
    await vi.waitFor(async () => expect(await dedupe.peek(event.eventId)).toBe('absent'));
    expect(await dedupe.claim(event.eventId, 1000)).toMatchObject({ status: 'claimed', abandoned: 0 });
  });
});

describe('secret rotation judged at the enqueue time', () => {
  const keyring = (notAfter: number) =>
    new Keyring([
      { id: 'current', secret: 'the-new-secret-value' },
      { id: 'previous', secret: TEST_SIGNING_SECRET, notAfter },
    ]);

  it('a backlog signed with the retired key verifies when the broker took it before notAfter', async () => {
    const now = Date.now();
    const notAfter = now - 60_000; // retired a minute ago
    const signedAt = Math.floor((now - 120_000) / 1000);
    const event = createTestEnvelope('daily.data.steps.created', { signedAt });
    const handler = vi.fn();
    const p = new Pipeline(SETTINGS, {
      keyring: keyring(notAfter),
      dedupe: createMemoryDedupe(),
      router: new Router().on('*', handler),
      logger: silentLogger(),
    });
    const result = await p.process(message(event.raw, 1, now - 119_000));
    expect(result).toMatchObject({ outcome: { kind: 'ack', result: 'handled' }, keyId: 'previous' });
  });

  it('the retired key verifies nothing enqueued after notAfter', async () => {
    const now = Date.now();
    const event = createTestEnvelope('daily.data.steps.created');
    const p = new Pipeline(SETTINGS, {
      keyring: keyring(now - 60_000),
      dedupe: createMemoryDedupe(),
      router: new Router().on('*', vi.fn()),
      logger: silentLogger(),
    });
    const result = await p.process(message(event.raw, 1, now));
    expect(result.outcome).toMatchObject({ kind: 'retry', code: 'SIGNATURE_MISMATCH' });
  });
});

describe('additive v1', () => {
  it('keeps unknown fields in the typed event', async () => {
    const event = createTestEnvelope('daily.data.heart_rate.created', {
      fields: { added_in_2027: { x: 1 } },
    });
    const handler = vi.fn();
    const { pipeline: p } = pipeline(new Router().on('daily.data.heart_rate.created', handler));
    await p.process(message(event.raw));
    expect(handler.mock.calls[0]?.[0]).toMatchObject({ added_in_2027: { x: 1 }, unit: 'bpm' });
  });

  it('accepts target types the spec does not list yet', async () => {
    const event = createTestEnvelope('coach.nudge.created', { fields: { target: { type: 'program' } } });
    const handler = vi.fn();
    const { pipeline: p } = pipeline(new Router().on('coach.nudge.created', handler));
    expect((await p.process(message(event.raw))).outcome).toEqual({ kind: 'ack', result: 'handled' });
  });

  it('acks an unknown event type with a warning by default, never crashing', async () => {
    const event = createTestEnvelope('plan.generation.completed');
    const { pipeline: p } = pipeline(new Router().on('*', vi.fn()));
    expect((await p.process(message(event.raw))).outcome).toEqual({ kind: 'ack', result: 'ignored' });
  });

  it('dead-letters an unknown event type when configured strict', async () => {
    const event = createTestEnvelope('plan.generation.completed');
    const { pipeline: p } = pipeline(new Router().on('*', vi.fn()), {
      settings: { unknownEventTypes: 'dead-letter' },
    });
    expect((await p.process(message(event.raw))).outcome).toMatchObject({
      kind: 'dead',
      code: 'UNKNOWN_EVENT_TYPE',
    });
  });

  it('routes unknown event types to the unknown handler only', async () => {
    const event = createTestEnvelope('plan.generation.completed', { fields: { plan_id: 'p1' } });
    const unknown = vi.fn();
    const any = vi.fn();
    const { pipeline: p } = pipeline(new Router().on('*', any).onUnknown(unknown));
    expect((await p.process(message(event.raw))).outcome).toEqual({ kind: 'ack', result: 'handled' });
    expect(unknown.mock.calls[0]?.[0]).toMatchObject({
      event_type: 'plan.generation.completed',
      plan_id: 'p1',
    });
    expect(any).not.toHaveBeenCalled();
  });
});

describe('routing', () => {
  it('runs exact, wildcard and catch-all handlers in registration order', async () => {
    const calls: string[] = [];
    const router = new Router()
      .on('daily.data.heart_rate.created', () => void calls.push('exact'))
      .on('daily.data.*', () => void calls.push('wildcard'))
      .on('coach.nudge.created', () => void calls.push('nudge'))
      .on('*', () => void calls.push('any'));
    const { pipeline: p } = pipeline(router);
    await p.process(message(createTestEnvelope('daily.data.heart_rate.created').raw));
    expect(calls).toEqual(['exact', 'wildcard', 'any']);
  });

  it('acks a catalog type nobody handles without claiming it', async () => {
    const { pipeline: p, dedupe } = pipeline(new Router().on('coach.nudge.created', vi.fn()));
    const claim = vi.spyOn(dedupe, 'claim');
    const result = await p.process(message(createTestEnvelope('daily.data.steps.created').raw));
    expect(result.outcome).toEqual({ kind: 'ack', result: 'ignored' });
    expect(claim).not.toHaveBeenCalled();
  });

  it('refuses a pattern that matches no catalog type', () => {
    expect(() => new Router().on('daily.data.vo2max.created' as 'daily.data.*', vi.fn())).toThrow(
      /matches no event type/,
    );
  });
});

describe('poison: what retrying can fix is retried, what it cannot is not', () => {
  const router = () => new Router().on('*', vi.fn());

  it.each([
    ['MALFORMED_ENVELOPE', 'not json at all'],
    ['ENVELOPE_TOO_LARGE', JSON.stringify({ pad: 'x'.repeat(2 * 1024 * 1024) })],
    ['BODY_NOT_JSON', createTestEnvelope('daily.data.steps.created', { body: 'not json' }).raw],
    ['TIMESTAMP_TOO_OLD', staleEnvelope('daily.data.steps.created').raw],
    [
      'ENVELOPE_MISMATCH',
      JSON.stringify({ ...createTestEnvelope('daily.data.steps.created').envelope, event_id: 'evt_other' }),
    ],
    ['SCHEMA_INVALID', createTestEnvelope('daily.data.steps.created', { fields: { value: 'many' } }).raw],
  ])('%s is dead-lettered at once', async (code, raw) => {
    const { pipeline: p } = pipeline(router());
    expect((await p.process(message(raw, 1))).outcome).toMatchObject({ kind: 'dead', code });
  });

  it.each([
    ['SIGNATURE_MISMATCH', () => forgedEnvelope('daily.data.steps.created').raw],
    ['TIMESTAMP_TOO_NEW', () => futureEnvelope('daily.data.steps.created').raw],
  ])('%s is retried with backoff, then dead-lettered after N attempts', async (code, make) => {
    const { pipeline: p } = pipeline(router());
    const raw = make();
    const first = await p.process(message(raw, 1));
    expect(first.outcome).toMatchObject({ kind: 'retry', code });
    expect(first.outcome.kind === 'retry' && first.outcome.delayMs).toBeGreaterThan(0);
    expect((await p.process(message(raw, 2))).outcome).toMatchObject({ kind: 'retry', code });
    expect((await p.process(message(raw, 3))).outcome).toMatchObject({ kind: 'dead', code });
  });

  it('a schema-invalid event releases its claim so a replay after an upgrade can run it', async () => {
    const event = createTestEnvelope('daily.data.steps.created', { fields: { value: 'many' } });
    const { pipeline: p, dedupe } = pipeline(router());
    await p.process(message(event.raw));
    expect(await dedupe.peek(event.eventId)).toBe('absent');
  });

  it('a handler error is retried, then dead-lettered after N attempts', async () => {
    const raw = createTestEnvelope('daily.data.steps.created').raw;
    const { pipeline: p } = pipeline(
      new Router().on('*', () => {
        throw new Error('boom');
      }),
    );
    expect((await p.process(message(raw, 1))).outcome).toMatchObject({
      kind: 'retry',
      code: 'HANDLER_FAILED',
    });
    expect((await p.process(message(raw, 3))).outcome).toMatchObject({
      kind: 'dead',
      code: 'HANDLER_FAILED',
    });
  });

  it('RetryLaterError sets the delay; DeadLetterError dead-letters at once', async () => {
    const raw1 = createTestEnvelope('daily.data.steps.created').raw;
    const raw2 = createTestEnvelope('daily.data.hrv.created').raw;
    const router = new Router()
      .on('daily.data.steps.created', () => {
        throw new RetryLaterError('rate limited', { delayMs: 12_345 });
      })
      .on('daily.data.hrv.created', () => {
        throw new DeadLetterError('user unknown to our app');
      });
    const { pipeline: p } = pipeline(router);
    expect((await p.process(message(raw1))).outcome).toEqual({
      kind: 'retry',
      code: 'HANDLER_REQUESTED_RETRY',
      reason: 'rate limited',
      delayMs: 12_345,
    });
    expect((await p.process(message(raw2))).outcome).toMatchObject({
      kind: 'dead',
      code: 'HANDLER_REQUESTED_DEAD_LETTER',
      reason: 'user unknown to our app',
    });
  });

  it('a handler that runs too long is aborted and retried, not acked', async () => {
    let signal: AbortSignal | undefined;
    const { pipeline: p } = pipeline(
      new Router().on('*', (_e, ctx) => {
        signal = ctx.signal;
        return new Promise(() => undefined);
      }),
      { settings: { handlerTimeoutMs: 50 } },
    );
    const result = await p.process(message(createTestEnvelope('daily.data.steps.created').raw));
    expect(result.outcome).toMatchObject({ kind: 'retry', code: 'HANDLER_TIMEOUT' });
    expect(signal?.aborted).toBe(true);
  });
});

describe('consumer: dead letters, settling, shutdown', () => {
  let h: Harness | undefined;
  afterEach(async () => {
    await h?.cleanup();
    h = undefined;
  });

  it('writes a dead event to the dead-letter file with the raw message, then settles it as dead', async () => {
    h = harness();
    h.consumer.on('*', vi.fn());
    const forged = forgedEnvelope('daily.data.steps.created');
    const stale = staleEnvelope('daily.data.steps.created');
    h.source.send(forged.raw);
    h.source.send(stale.raw);
    await h.consumer.start();
    await h.waitFor((r) => r.outcome.kind === 'dead' && r.outcome.code === 'SIGNATURE_MISMATCH');
    await h.waitFor((r) => r.outcome.kind === 'dead' && r.outcome.code === 'TIMESTAMP_TOO_OLD');
    const records = readFileSync(h.deadLetterPath, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const byCode = Object.fromEntries(records.map((r) => [r.code, r]));
    expect(byCode.SIGNATURE_MISMATCH).toMatchObject({
      raw: forged.raw,
      attempts: 3,
      source: 'memory',
      event_id: null,
    });
    expect(byCode.TIMESTAMP_TOO_OLD).toMatchObject({ raw: stale.raw, attempts: 1, raw_encoding: 'utf8' });
    expect(h.source.settled.filter((s) => s.outcome.kind === 'dead')).toHaveLength(2);
  });

  it('keeps a dead event unacked (retry) when the dead-letter sink fails', async () => {
    const write = vi.fn().mockRejectedValue(new Error('disk full'));
    h = harness({ deadLetter: { write, close: async () => undefined } });
    h.consumer.on('*', vi.fn());
    h.source.send(staleEnvelope('daily.data.steps.created').raw);
    await h.consumer.start();
    const report = await h.waitFor(() => true);
    expect(report.outcome).toMatchObject({ kind: 'retry', code: 'TIMESTAMP_TOO_OLD' });
    expect(write).toHaveBeenCalled();
  });

  it('an onSettled that throws is logged, frees its slot, and stops nothing', async () => {
    const lines: { msg: string; level: number }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    h = harness({
      concurrency: 1,
      endWhenEmpty: true,
      logger,
      onSettled: () => {
        throw new Error('report sink broke');
      },
    });
    h.consumer.on('*', vi.fn());
    for (let i = 0; i < 3; i++) h.source.send(createTestEnvelope('daily.data.steps.created').raw);
    await h.consumer.start();
    await h.consumer.stopped;
    // Each message was applied to the broker before its report, and the one slot came back each time.
    expect(h.source.settled.map((s) => s.outcome)).toEqual(Array(3).fill({ kind: 'ack', result: 'handled' }));
    expect(lines.filter((l) => l.msg === 'onSettled threw')).toHaveLength(3);
  });

  it('a source whose settle throws, rejects or answers no promise: logged; the slot comes back and the next message goes on', async () => {
    const lines: { msg: string; outcome?: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    h = harness({ concurrency: 1, logger });
    h.consumer.on('*', vi.fn());
    const realSettle = h.source.settle.bind(h.source);
    let calls = 0;
    h.source.settle = (message, outcome) => {
      calls++;
      if (calls === 1) throw new Error('broker said no, synchronously');
      if (calls === 2) return Promise.reject(new Error('broker said no'));
      if (calls === 3) {
        void realSettle(message, outcome);
        return undefined as unknown as Promise<void>; // a custom source that answers no promise
      }
      return realSettle(message, outcome);
    };
    for (let i = 0; i < 4; i++) h.source.send(createTestEnvelope('daily.data.steps.created').raw);
    await h.consumer.start();
    await h.waitFor(() => h?.reports.length === 4);
    expect(h.reports.map((r) => r.outcome.kind)).toEqual(['ack', 'ack', 'ack', 'ack']);
    expect(lines.filter((l) => l.msg === 'settle failed').map((l) => l.outcome)).toEqual(['ack', 'ack']);
  });

  it('never runs more handlers at once than its concurrency', async () => {
    let running = 0;
    let peak = 0;
    h = harness({ concurrency: 3, endWhenEmpty: true });
    h.consumer.on('*', async () => {
      running++;
      peak = Math.max(peak, running);
      await new Promise((r) => setTimeout(r, 5));
      running--;
    });
    for (let i = 0; i < 20; i++) h.source.send(createTestEnvelope('daily.data.steps.created').raw);
    await h.consumer.start();
    await h.consumer.stopped;
    expect(peak).toBe(3);
    expect(h.reports.filter((r) => r.outcome.kind === 'ack')).toHaveLength(20);
  });

  describe('several receives at once, when the source allows it', () => {
    /** A MemorySource behind a 30 ms round trip per receive (as SQS is), counting receives in flight. */
    class RoundTripSource implements SourceAdapter<MemoryMessage> {
      readonly name = 'round-trip';
      readonly maxBatchSize = 2;
      readonly inner = createMemorySource({ endWhenEmpty: true });
      pending = 0;
      peakPending = 0;
      #serial: Promise<unknown> = Promise.resolve();
      async receive(max: number, signal: AbortSignal) {
        this.pending++;
        this.peakPending = Math.max(this.peakPending, this.pending);
        try {
          await new Promise((r) => setTimeout(r, 30));
          // MemorySource serves one receive at a time: queue the calls; the latency above overlaps.
          const result = this.#serial.then(() => this.inner.receive(max, signal));
          this.#serial = result.catch(() => undefined);
          return await result;
        } finally {
          this.pending--;
        }
      }
      settle(message: MemoryMessage, outcome: Outcome) {
        return this.inner.settle(message, outcome);
      }
      close() {
        return this.inner.close();
      }
    }

    class ParallelRoundTripSource extends RoundTripSource {
      readonly maxConcurrentReceives = 8;
    }

    async function drain(source: RoundTripSource, concurrency: number) {
      let running = 0;
      let peakRunning = 0;
      const handled: string[] = [];
      const consumer = createConsumer({
        source,
        concurrency,
        secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
        dedupe: createMemoryDedupe(),
        deadLetter: { write: async () => undefined, close: async () => undefined },
        logger: silentLogger(),
      });
      consumer.on('*', async (event) => {
        running++;
        peakRunning = Math.max(peakRunning, running);
        await new Promise((r) => setTimeout(r, 5));
        handled.push(event.event_id);
        running--;
      });
      const ids: string[] = [];
      for (let i = 0; i < 40; i++) {
        const e = createTestEnvelope('daily.data.steps.created');
        ids.push(e.eventId);
        source.inner.send(e.raw);
      }
      await consumer.start();
      await consumer.stopped;
      return { handled, ids, peakRunning };
    }

    it('runs min(maxConcurrentReceives, concurrency / batch) receives at once, never past concurrency', async () => {
      const source = new ParallelRoundTripSource();
      // 7 slots: 4 receives of 2, 2, 2 and 1 (each asks only for slots nobody was promised).
      const { handled, ids, peakRunning } = await drain(source, 7);
      expect(source.peakPending).toBe(4); // ceil(7 slots / 2 per batch), under the source's 8
      expect(peakRunning).toBeLessThanOrEqual(7);
      expect(handled.sort()).toEqual(ids.sort()); // each once
    });

    it('one receive at a time for a source that does not say otherwise', async () => {
      const source = new RoundTripSource();
      const { handled, ids } = await drain(source, 8);
      expect(source.peakPending).toBe(1);
      expect(handled.sort()).toEqual(ids.sort());
    });
  });

  it('runs many handlers at once without listener-leak warnings', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      h = harness({ concurrency: 50, endWhenEmpty: true });
      h.consumer.on('*', () => new Promise((r) => setTimeout(r, 20)));
      for (let i = 0; i < 100; i++) h.source.send(createTestEnvelope('daily.data.steps.created').raw);
      await h.consumer.start();
      await h.consumer.stopped;
      await new Promise((r) => setImmediate(r));
      expect(warnings).not.toContain('MaxListenersExceededWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('stop() drains in-flight handlers before resolving, and acks them', async () => {
    h = harness();
    let finish!: () => void;
    const started = vi.fn();
    h.consumer.on('*', () => {
      started();
      return new Promise<void>((resolve) => (finish = resolve));
    });
    h.source.send(createTestEnvelope('daily.data.steps.created').raw);
    await h.consumer.start();
    await vi.waitFor(() => expect(started).toHaveBeenCalled());
    const stopping = h.consumer.stop();
    expect(h.consumer.status.state).toBe('stopping');
    finish();
    await stopping;
    expect(h.source.settled.map((s) => s.outcome)).toEqual([{ kind: 'ack', result: 'handled' }]);
  });

  it('stop() past its deadline aborts unfinished handlers and never acks them', async () => {
    h = harness({ shutdownTimeoutMs: 50 });
    let signal: AbortSignal | undefined;
    h.consumer.on('*', (_e, ctx) => {
      signal = ctx.signal;
      return new Promise<void>(() => undefined);
    });
    const event = createTestEnvelope('daily.data.steps.created');
    const release = vi.spyOn(h.dedupe, 'release');
    h.source.send(event.raw);
    await h.consumer.start();
    await vi.waitFor(() => expect(signal).toBeDefined());
    await h.consumer.stop();
    expect(signal?.aborted).toBe(true);
    expect(h.source.settled.map((s) => s.outcome)).toEqual([
      { kind: 'retry', code: 'SHUTDOWN', reason: 'consumer stopped before the handler finished', delayMs: 0 },
    ]);
    // Released at once, though the handler never ends: a shutdown does not abandon the claim.
    expect(release).toHaveBeenCalledWith(event.eventId, expect.any(String));
  });

  it('heartbeats a slow message without overlapping beats, and aborts its handler when one fails', async () => {
    let active = 0;
    let peak = 0;
    let beats = 0;
    const source = createMemorySource({ endWhenEmpty: true });
    const heartbeating = Object.assign(source, {
      heartbeatIntervalMs: 10,
      async heartbeat() {
        active++;
        peak = Math.max(peak, active);
        await new Promise((r) => setTimeout(r, 25)); // slower than the interval
        active--;
        if (++beats === 4) throw new Error('receipt expired');
      },
    });
    let signal: AbortSignal | undefined;
    const consumer = createConsumer({
      source: heartbeating,
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      dedupe: createMemoryDedupe(),
      logger: silentLogger(),
    });
    consumer.on('*', (_e, ctx) => {
      signal = ctx.signal;
      return new Promise<void>(() => undefined);
    });
    source.send(createTestEnvelope('daily.data.steps.created').raw);
    await consumer.start();
    await vi.waitFor(() => expect(source.settled.length).toBeGreaterThan(0), { timeout: 3000 });
    expect(peak).toBe(1);
    expect(signal?.aborted).toBe(true);
    expect(source.settled[0]?.outcome).toMatchObject({ kind: 'retry', code: 'LEASE_LOST', delayMs: 0 });
    await consumer.stop();
  });

  it('heartbeats every in-flight message with one timer, never overlapping the beats of one message', async () => {
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const active = new Map<string, number>();
    const beaten = new Map<string, number>();
    let overlapped = false;
    const source = createMemorySource({ endWhenEmpty: true });
    const heartbeating = Object.assign(source, {
      heartbeatIntervalMs: 20,
      async heartbeat(message: MemoryMessage) {
        const now = (active.get(message.id) ?? 0) + 1;
        if (now > 1) overlapped = true;
        active.set(message.id, now);
        await new Promise((r) => setImmediate(r));
        active.set(message.id, now - 1);
        beaten.set(message.id, (beaten.get(message.id) ?? 0) + 1);
      },
    });
    const consumer = createConsumer({
      source: heartbeating,
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      dedupe: createMemoryDedupe(),
      logger: silentLogger(),
      concurrency: 50,
    });
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    consumer.on('*', () => released);
    for (let i = 0; i < 50; i++) source.send(createTestEnvelope('daily.data.steps.created').raw);
    await consumer.start();
    // Every one of the 50 messages beaten at least twice while its handler waits.
    await vi.waitFor(
      () => {
        expect(beaten.size).toBe(50);
        expect(Math.min(...beaten.values())).toBeGreaterThanOrEqual(2);
      },
      { timeout: 10_000 },
    );
    // One heartbeat timer for all 50 (a timer chain per message would show ~50 here).
    expect(timers() - before).toBeLessThanOrEqual(2);
    release();
    await consumer.stopped;
    expect(source.settled.map((s) => s.outcome.kind)).toEqual(Array(50).fill('ack'));
    expect(overlapped).toBe(false);
    // The timer stops with the last message.
    expect(timers()).toBeLessThanOrEqual(before);
  });

  it('process() serves consumers that run their own receive loop', async () => {
    h = harness();
    const handler = vi.fn();
    h.consumer.on('daily.data.steps.created', handler);
    const event = createTestEnvelope('daily.data.steps.created');
    const result = await h.consumer.process({ id: 'lambda-1', body: event.raw, attempt: 1 });
    expect(result).toMatchObject({
      outcome: { kind: 'ack', result: 'handled' },
      eventId: event.eventId,
      keyId: 'current',
    });
    expect(handler).toHaveBeenCalledOnce();
  });
});

describe('a receive is processed as one batch: one store call for its claims, one for its completes', () => {
  let h: Harness | undefined;
  afterEach(async () => {
    await h?.cleanup();
    h = undefined;
  });

  /** The memory store, counting its calls. */
  function countingStore() {
    const store = createMemoryDedupe();
    const calls = { claim: 0, claimMany: [] as number[], complete: 0, completeMany: [] as number[] };
    const claimMany = store.claimMany.bind(store);
    const completeMany = store.completeMany.bind(store);
    const claim = store.claim.bind(store);
    const complete = store.complete.bind(store);
    Object.assign(store, {
      claim: (id: string, leaseMs: number) => {
        calls.claim++;
        return claim(id, leaseMs);
      },
      claimMany: (ids: readonly string[], leaseMs: number) => {
        calls.claimMany.push(ids.length);
        return claimMany(ids, leaseMs);
      },
      complete: (id: string, token: string, retentionMs: number) => {
        calls.complete++;
        return complete(id, token, retentionMs);
      },
      completeMany: (claims: readonly { eventId: string; token: string }[], retentionMs: number) => {
        calls.completeMany.push(claims.length);
        return completeMany(claims, retentionMs);
      },
    });
    return { store, calls };
  }

  /**
   * A store of the DedupeStore interface with no batch methods (as the Redis stores are): the
   * memory store behind it, with its own `claim`.
   */
  function perEventStore(memory: MemoryDedupeStore, claim: DedupeStore['claim']): DedupeStore {
    return {
      claim,
      extend: (id, token, leaseMs) => memory.extend(id, token, leaseMs),
      complete: (id, token, retentionMs) => memory.complete(id, token, retentionMs),
      release: (id, token) => memory.release(id, token),
      peek: (id) => memory.peek(id),
      close: () => memory.close(),
    };
  }

  it('claims and completes the events of a receive in one call each; a forged one never reaches the store', async () => {
    const { store, calls } = countingStore();
    h = harness({ dedupe: store, endWhenEmpty: true });
    h.consumer.on('*', () => {});
    for (let i = 0; i < 5; i++) h.source.send(createTestEnvelope('daily.data.steps.created').raw);
    h.source.send(forgedEnvelope('daily.data.steps.created').raw);
    await h.consumer.start();
    await h.consumer.stopped;
    expect(h.reports.filter((r) => r.outcome.kind === 'ack')).toHaveLength(5);
    // The forged one is retried (until dead) on its own: a batch of one claims with `claim`.
    expect(calls.claimMany).toEqual([5]);
    expect(calls.completeMany).toEqual([5]);
    expect(calls.claim + calls.complete).toBe(0);
  });

  it('a slow handler holds back no other message of its batch', async () => {
    h = harness();
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const slow = createTestEnvelope('daily.data.steps.created');
    h.consumer.on('*', (event) => (event.event_id === slow.event.event_id ? gate : undefined));
    const fast = [0, 1, 2].map(() => createTestEnvelope('daily.data.steps.created'));
    h.source.send(fast[0]?.raw as string);
    h.source.send(slow.raw);
    for (const f of fast.slice(1)) h.source.send(f.raw);
    await h.consumer.start();
    for (const f of fast) await h.waitFor((r) => r.eventId === f.event.event_id);
    expect(h.reports.map((r) => r.eventId)).not.toContain(slow.event.event_id);
    expect(await h.dedupe.peek(String(slow.event.event_id))).toBe('in_progress');
    release();
    const report = await h.waitFor((r) => r.eventId === slow.event.event_id);
    expect(report.outcome).toEqual({ kind: 'ack', result: 'handled' });
    expect(await h.dedupe.peek(String(slow.event.event_id))).toBe('done');
  });

  it('mixed fates in one batch: handled, duplicate, handler error, schema-invalid, each its own outcome', async () => {
    h = harness();
    const done = createTestEnvelope('daily.data.steps.created');
    await h.dedupe.claim(String(done.event.event_id), 1000).then((c) => {
      if (c.status === 'claimed') return h?.dedupe.complete(String(done.event.event_id), c.token, 60_000);
    });
    const good = createTestEnvelope('daily.data.steps.created');
    const failing = createTestEnvelope('daily.data.steps.created');
    const invalid = createTestEnvelope('daily.data.steps.created', { fields: { value: 'many' } });
    h.consumer.on('*', (event) => {
      if (event.event_id === failing.event.event_id) throw new Error('downstream said no');
    });
    for (const e of [good, done, failing, invalid]) h.source.send(e.raw);
    await h.consumer.start();
    const fate = async (e: { eventId: string }) =>
      (await h?.waitFor((r) => r.eventId === e.eventId))?.outcome;
    expect(await fate(good)).toEqual({ kind: 'ack', result: 'handled' });
    expect(await fate(done)).toEqual({ kind: 'ack', result: 'duplicate' });
    expect(await fate(failing)).toMatchObject({ kind: 'retry', code: 'HANDLER_FAILED' });
    expect(await fate(invalid)).toMatchObject({ kind: 'dead', code: 'SCHEMA_INVALID' });
    // The failed and the invalid one gave their claims back.
    expect(await h.dedupe.peek(String(failing.event.event_id))).not.toBe('done');
    expect(await h.dedupe.peek(String(invalid.event.event_id))).toBe('absent');
  });

  it('a store without claimMany is called per event, and a failed claim fails only its own message', async () => {
    const memory = createMemoryDedupe();
    const unlucky = createTestEnvelope('daily.data.steps.created');
    const store = perEventStore(memory, (id, leaseMs) =>
      id === unlucky.eventId ? Promise.reject(new Error('connection reset')) : memory.claim(id, leaseMs),
    );
    h = harness({ dedupe: store });
    h.consumer.on('*', () => {});
    const lucky = [0, 1].map(() => createTestEnvelope('daily.data.steps.created'));
    h.source.send(lucky[0]?.raw as string);
    h.source.send(unlucky.raw);
    h.source.send(lucky[1]?.raw as string);
    await h.consumer.start();
    const first = await h.waitFor((r) => r.eventId === unlucky.event.event_id);
    expect(first).toMatchObject({
      store: 'unavailable',
      outcome: { kind: 'retry', code: 'DEDUPE_UNAVAILABLE' },
    });
    for (const e of lucky) {
      expect((await h.waitFor((r) => r.eventId === e.event.event_id)).outcome).toEqual({
        kind: 'ack',
        result: 'handled',
      });
      expect(await memory.peek(String(e.event.event_id))).toBe('done');
    }
  });

  it('a store without claimMany: each message goes on as soon as its own claim answers', async () => {
    // A networked store (Redis) answers each claim on its own; a batch barrier would make every
    // message wait for the slowest claim.
    const memory = createMemoryDedupe();
    const slow = createTestEnvelope('daily.data.steps.created');
    let answerSlow: () => void = () => {};
    const slowAnswered = new Promise<void>((resolve) => {
      answerSlow = resolve;
    });
    const store = perEventStore(memory, async (id, leaseMs) => {
      if (id === slow.eventId) await slowAnswered;
      return memory.claim(id, leaseMs);
    });
    h = harness({ dedupe: store });
    h.consumer.on('*', () => {});
    const fast = createTestEnvelope('daily.data.steps.created');
    h.source.send(slow.raw);
    h.source.send(fast.raw);
    await h.consumer.start();
    expect((await h.waitFor((r) => r.eventId === fast.eventId)).outcome).toEqual({
      kind: 'ack',
      result: 'handled',
    });
    expect(await memory.peek(slow.eventId)).toBe('absent'); // its claim has not even been made
    answerSlow();
    expect((await h.waitFor((r) => r.eventId === slow.eventId)).outcome).toEqual({
      kind: 'ack',
      result: 'handled',
    });
  });

  it('a failed claimMany fails every message of the batch, none is handled or acked', async () => {
    const memory = createMemoryDedupe();
    const store = Object.assign(memory, {
      claimMany: () => Promise.reject(new DedupeUnavailableError('redis gone')),
    });
    const handler = vi.fn();
    h = harness({ dedupe: store, retry: { maxAttempts: 100, baseDelayMs: 60_000, maxDelayMs: 60_000 } });
    h.consumer.on('*', handler);
    for (let i = 0; i < 3; i++) h.source.send(createTestEnvelope('daily.data.steps.created').raw);
    await h.consumer.start();
    while (h.reports.length < 3) await h.waitFor(() => true);
    expect(h.reports.map((r) => r.outcome)).toEqual(
      Array(3).fill(expect.objectContaining({ kind: 'retry', code: 'DEDUPE_UNAVAILABLE' })),
    );
    expect(handler).not.toHaveBeenCalled();
  });
});
