/**
 * `maxInFlightBytes`: the consumer receives no more than the room the size bound leaves, by the
 * messages' average size, whatever `concurrency` allows; a message larger than the bound is
 * still handled; 0 turns the bound off. Handlers hold their events until released, so what is
 * in flight can be read while it is held. The first receive, before any size is known, is a
 * full batch: the tests that check the bound let one message through first.
 */
import { describe, expect, it } from 'vitest';
import { createMemorySource } from '../adapters/memory/index.js';
import { DEFAULT_MAX_IN_FLIGHT_BYTES } from '../src/consumer/settings.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { type Consumer, createConsumer, silentLogger } from '../src/index.js';

const TYPE = 'daily.data.heart_rate.created';
const secrets = [{ id: 'current', secret: TEST_SIGNING_SECRET }];

/** A signed envelope whose text is `size` characters long, give or take a few. */
function envelopeOf(size: number): string {
  const bare = createTestEnvelope(TYPE, { fields: { raw_data: { pad: '' } } }).raw.length;
  return createTestEnvelope(TYPE, { fields: { raw_data: { pad: 'x'.repeat(Math.max(0, size - bare)) } } })
    .raw;
}

/** A consumer over `raws` whose handler holds each event until `releaseAll()`; stop it at the end. */
function holdingConsumer(
  raws: readonly string[],
  settings: { concurrency: number; maxInFlightBytes?: number },
) {
  const source = createMemorySource();
  for (const raw of raws) source.send(raw);
  const held: (() => void)[] = [];
  const waiters: { count: number; resolve: () => void }[] = [];
  let handled = 0;
  const consumer: Consumer = createConsumer({ source, secrets, logger: silentLogger(), ...settings });
  consumer.on(TYPE, async () => {
    for (const w of waiters.splice(0)) {
      if (held.length + 1 >= w.count) w.resolve();
      else waiters.push(w);
    }
    await new Promise<void>((resolve) => held.push(resolve));
    handled++;
  });
  return {
    source,
    consumer,
    held,
    handled: () => handled,
    /** Resolves once `count` handlers hold their events. */
    holding: (count: number) =>
      held.length >= count
        ? Promise.resolve()
        : new Promise<void>((resolve) => waiters.push({ count, resolve })),
    releaseAll: () => {
      for (const release of held.splice(0)) release();
    },
  };
}

/** Lets every pending receive and dispatch run (the memory source answers in a turn or two). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** Releases held events until `count` were handled, then stops the consumer. */
async function finish(run: ReturnType<typeof holdingConsumer>, count: number): Promise<void> {
  while (run.handled() < count) {
    run.releaseAll();
    await settle();
  }
  await run.consumer.stop();
}

/** Starts the consumer on one message and lets it through, so that a size is known. */
async function learnSize(run: ReturnType<typeof holdingConsumer>): Promise<void> {
  await run.consumer.start();
  await run.holding(1);
  expect(run.consumer.status.inFlight).toBe(1);
  await finishOne(run);
}

async function finishOne(run: ReturnType<typeof holdingConsumer>): Promise<void> {
  const before = run.handled();
  while (run.handled() === before) {
    run.releaseAll();
    await settle();
  }
}

describe('maxInFlightBytes', () => {
  it('defaults to 2 MiB', () => {
    expect(DEFAULT_MAX_IN_FLIGHT_BYTES).toBe(2 * 1024 * 1024);
    expect(createConsumer({ secrets, logger: silentLogger() }).settings.maxInFlightBytes).toBe(
      DEFAULT_MAX_IN_FLIGHT_BYTES,
    );
  });

  it('holds no more than the bound allows, though concurrency allows ten times as many, and loses nothing', async () => {
    const first = envelopeOf(2_000);
    const raws = Array.from({ length: 120 }, () => envelopeOf(2_000));
    const size = first.length;
    const run = holdingConsumer([first], { concurrency: 100, maxInFlightBytes: 10 * size });
    await learnSize(run);
    for (const raw of raws) run.source.send(raw);
    for (let round = 0; round < 3; round++) {
      await run.holding(10);
      await settle();
      const { inFlight, inFlightBytes } = run.consumer.status;
      expect(inFlight).toBe(10);
      expect(inFlightBytes).toBeLessThanOrEqual(10 * size);
      expect(run.held.length).toBe(10);
      run.releaseAll();
    }
    await finish(run, raws.length + 1);
    expect(run.source.settled).toHaveLength(raws.length + 1);
    expect(run.source.settled.every((s) => s.outcome.kind === 'ack')).toBe(true);
    expect(run.consumer.status.inFlightBytes).toBe(0);
  });

  it('fills concurrency with small events under the same bound', async () => {
    const raws = Array.from({ length: 40 }, () => envelopeOf(1_000));
    const run = holdingConsumer(raws.slice(0, 1), { concurrency: 30, maxInFlightBytes: 1024 * 1024 });
    await learnSize(run);
    for (const raw of raws.slice(1)) run.source.send(raw);
    await run.holding(30);
    await settle();
    expect(run.consumer.status.inFlight).toBe(30);
    await finish(run, raws.length);
  });

  it('still handles a message larger than the bound, one at a time', async () => {
    const raws = Array.from({ length: 3 }, () => envelopeOf(50_000));
    const run = holdingConsumer(raws.slice(0, 1), { concurrency: 10, maxInFlightBytes: 10_000 });
    await learnSize(run);
    for (const raw of raws.slice(1)) run.source.send(raw);
    for (let i = 0; i < 2; i++) {
      await run.holding(1);
      await settle();
      expect(run.consumer.status.inFlight).toBe(1);
      await finishOne(run);
    }
    await finish(run, 3);
    expect(run.source.settled.map((s) => s.outcome.kind)).toEqual(['ack', 'ack', 'ack']);
  });

  it('with 0, bounds by concurrency alone', async () => {
    const raws = Array.from({ length: 25 }, () => envelopeOf(50_000));
    const run = holdingConsumer(raws.slice(0, 1), { concurrency: 20, maxInFlightBytes: 0 });
    await learnSize(run);
    for (const raw of raws.slice(1)) run.source.send(raw);
    await run.holding(20);
    await settle();
    expect(run.consumer.status.inFlight).toBe(20);
    expect(run.consumer.status.inFlightBytes).toBeGreaterThan(20 * 49_000);
    await finish(run, raws.length);
  });

  it('refuses a negative or fractional bound, naming it', () => {
    expect(() => createConsumer({ secrets, maxInFlightBytes: -1 })).toThrow(/maxInFlightBytes/);
    expect(() => createConsumer({ secrets, maxInFlightBytes: 1.5 })).toThrow(/maxInFlightBytes/);
  });
});
