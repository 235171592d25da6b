/**
 * An existing service that already has its own queue loop and adds the kit as a library:
 * verified, de-duplicated, typed events, with the app deciding how to settle each message.
 *
 *   npx tsx examples/library-consumer.ts     (runs it against a few signed sample events)
 */

import {
  type Consumer,
  createConsumer,
  createSqliteDedupe,
  type EventMap,
  type ProcessResult,
  type RawMessage,
  RetryLaterError,
} from 'partner-health-events';
import type { Logger } from 'pino';

/** The app's own storage, standing in for a database. */
export class VitalsRepository {
  readonly vitals: { userId: string; type: string; value: number; unit: string; at: string }[] = [];
  readonly cardsToFetch: { userId: string; nudgeId: string }[] = [];
  available = true;

  async saveVital(event: EventMap['daily.data.heart_rate.created'] | EventMap['daily.data.glucose.created']) {
    if (!this.available) throw new RetryLaterError('database is restarting', { delayMs: 5_000 });
    this.vitals.push({
      userId: event.user_id,
      type: event.event_type,
      value: event.value,
      unit: event.unit,
      at: event.timestamp,
    });
  }
}

export interface HealthConsumerOptions {
  repo: VitalsRepository;
  secret: string;
  dedupePath: string;
  deadLetterPath?: string;
  logger?: Logger;
}

export function createHealthConsumer(options: HealthConsumerOptions): Consumer {
  const consumer = createConsumer({
    secrets: [{ id: 'current', secret: options.secret }],
    dedupe: createSqliteDedupe({ path: options.dedupePath }),
    ...(options.deadLetterPath ? { deadLetter: options.deadLetterPath } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  });

  // Each handler gets its event type's fields, typed: `event.value` is a number here.
  consumer.on('daily.data.heart_rate.created', (event) => options.repo.saveVital(event));
  consumer.on('daily.data.glucose.created', (event) => options.repo.saveVital(event));
  consumer.on('coach.nudge.created', (event, context) => {
    // Basic delivery carries no card data: remember to read it with GET .../cards/{card_item_id}.
    if (event.target.type === 'card')
      options.repo.cardsToFetch.push({ userId: event.user_id, nudgeId: event.nudge_id });
    context.logger.debug({ nudge_id: event.nudge_id }, 'nudge noted');
  });
  return consumer;
}

/** What the app's own loop does with each message it received from its broker client. */
export async function handleMessage(
  consumer: Consumer,
  message: RawMessage,
): Promise<'delete' | 'leave' | 'delay'> {
  const result: ProcessResult = await consumer.process(message);
  switch (result.outcome.kind) {
    case 'ack':
      return 'delete'; // handled or a duplicate
    case 'dead':
      return 'delete'; // already written to the dead-letter file with its reason
    case 'retry':
      return result.outcome.delayMs > 0 ? 'delay' : 'leave';
  }
}

async function main() {
  const { createTestEnvelope, TEST_SIGNING_SECRET } = await import('partner-health-events/testing');
  const { mkdtempSync } = await import('node:fs');
  const { join } = await import('node:path');
  const { tmpdir } = await import('node:os');
  const repo = new VitalsRepository();
  const consumer = createHealthConsumer({
    repo,
    secret: TEST_SIGNING_SECRET,
    dedupePath: join(mkdtempSync(join(tmpdir(), 'example-')), 'dedupe.db'),
  });
  const hr = createTestEnvelope('daily.data.heart_rate.created');
  const nudge = createTestEnvelope('coach.nudge.created');
  for (const [i, raw] of [hr.raw, nudge.raw, hr.raw].entries()) {
    console.log(`message ${i + 1}:`, await handleMessage(consumer, { id: String(i), body: raw, attempt: 1 }));
  }
  console.log({ vitals: repo.vitals, cardsToFetch: repo.cardsToFetch });
  await consumer.stop();
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
