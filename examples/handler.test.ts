/**
 * Unit tests of examples/handler.ts with `partner-health-events/testing`: real signed envelopes
 * through the real pipeline (verification, de-duplication, schema) from an in-memory queue, and
 * a handler spy to wait on instead of sleeping. `npm test` runs this file.
 */
import { createConsumer, createMemoryDedupe, silentLogger } from 'partner-health-events';
import {
  createHandlerSpy,
  createMemorySource,
  createTestEnvelope,
  fixtures,
  forgedEnvelope,
  rotatedKeyEnvelope,
  TEST_ROTATION_SECRETS,
} from 'partner-health-events/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { nudgeHandler, stepsHandler } from './handler.js';

/** A consumer as in production, over an in-memory queue, with fast retries and no files. */
function testConsumer() {
  const source = createMemorySource();
  const consumer = createConsumer({
    source,
    secrets: TEST_ROTATION_SECRETS, // `current` and, as during a rotation, `previous`
    dedupe: createMemoryDedupe(),
    deadLetter: { write: async () => {}, close: async () => {} },
    logger: silentLogger(),
    retry: { maxAttempts: 3, baseDelayMs: 5, maxDelayMs: 20 },
  });
  return { source, consumer };
}

const stopAfter: { stop(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(stopAfter.splice(0).map((c) => c.stop()));
});

describe('stepsHandler', () => {
  it('stores the steps of an event once, even when the queue delivers it twice', async () => {
    const saved: [string, string, number][] = [];
    const spy = createHandlerSpy(stepsHandler({ addSteps: async (...row) => void saved.push(row) }));
    const { source, consumer } = testConsumer();
    consumer.on('daily.data.steps.created', spy.handler);
    await consumer.start();
    stopAfter.push(consumer);

    const body = fixtures['daily.data.steps.created']({ value: 12_000, timestamp: '2026-03-01T21:00:00Z' });
    const event = createTestEnvelope('daily.data.steps.created', { fields: body });
    source.send(event.raw);
    source.send(event.raw); // at-least-once: the broker delivers a copy

    const call = await spy.waitFor(event.eventId);
    expect(call.state).toBe('ok');
    await source.idle();
    expect(spy.count(event.eventId)).toBe(1);
    expect(saved).toEqual([[body.user_id, '2026-03-01', 12_000]]);
  });

  it('is retried after a failure, and takes events signed with the previous key', async () => {
    let failures = 1;
    const spy = createHandlerSpy(
      stepsHandler({
        addSteps: async () => {
          if (failures-- > 0) throw new Error('database restarting');
        },
      }),
    );
    const { source, consumer } = testConsumer();
    consumer.on('daily.data.steps.created', spy.handler);
    await consumer.start();
    stopAfter.push(consumer);

    const event = rotatedKeyEnvelope('daily.data.steps.created');
    source.send(event.raw);
    await spy.waitFor(event.eventId, { times: 2 });
    expect(spy.calls.map((c) => c.state)).toEqual(['failed', 'ok']);
    expect(spy.calls[1]?.context.keyId).toBe('previous');
  });
});

describe('nudgeHandler', () => {
  it('notifies for a genuine nudge and never runs for a forged one', async () => {
    const notified: string[] = [];
    const spy = createHandlerSpy(
      nudgeHandler({ notify: async (_user, nudgeId) => void notified.push(nudgeId) }),
    );
    const { source, consumer } = testConsumer();
    consumer.on('coach.nudge.created', spy.handler);
    await consumer.start();
    stopAfter.push(consumer);

    const forged = forgedEnvelope('coach.nudge.created');
    const genuine = createTestEnvelope('coach.nudge.created', { fields: { nudge_id: 'n-1' } });
    source.send(forged.raw);
    source.send(genuine.raw);
    await spy.waitFor(genuine.eventId);
    expect(notified).toEqual(['n-1']);
    await expect(spy.waitFor(forged.eventId, { timeoutMs: 50 })).rejects.toMatchObject({
      code: 'WAIT_TIMEOUT',
    });
    expect(spy.count(forged.eventId)).toBe(0);
  });
});
