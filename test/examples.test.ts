import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createHealthConsumer, handleMessage, VitalsRepository } from '../examples/library-consumer.js';
import { createTestEnvelope, forgedEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { silentLogger } from '../src/core/logger.js';
import { tempDir } from './support/harness.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-example-');
});
afterEach(() => dir.cleanup());

describe('examples/library-consumer', () => {
  it('stores typed vitals once, notes nudges, and tells the app how to settle each message', async () => {
    const repo = new VitalsRepository();
    const consumer = createHealthConsumer({
      repo,
      secret: TEST_SIGNING_SECRET,
      dedupePath: join(dir.path, 'dedupe.db'),
      deadLetterPath: join(dir.path, 'dead.jsonl'),
      logger: silentLogger(),
    });
    const hr = createTestEnvelope('daily.data.heart_rate.created');
    const nudge = createTestEnvelope('coach.nudge.created');
    const msg = (raw: string, attempt = 1) => ({ id: 'm', body: raw, attempt });
    expect(await handleMessage(consumer, msg(hr.raw))).toBe('delete');
    expect(await handleMessage(consumer, msg(hr.raw))).toBe('delete'); // duplicate
    expect(await handleMessage(consumer, msg(nudge.raw))).toBe('delete');
    expect(await handleMessage(consumer, msg(forgedEnvelope('daily.data.glucose.created').raw))).toBe(
      'delay',
    );
    expect(repo.vitals).toEqual([
      {
        userId: hr.event.user_id,
        type: 'daily.data.heart_rate.created',
        value: 62,
        unit: 'bpm',
        at: hr.event.timestamp,
      },
    ]);
    expect(repo.cardsToFetch).toHaveLength(1);

    repo.available = false;
    const glucose = createTestEnvelope('daily.data.glucose.created');
    expect(await handleMessage(consumer, msg(glucose.raw))).toBe('delay');
    repo.available = true;
    expect(await handleMessage(consumer, msg(glucose.raw, 2))).toBe('delete');
    expect(repo.vitals).toHaveLength(2);
    await consumer.stop();
  });
});
