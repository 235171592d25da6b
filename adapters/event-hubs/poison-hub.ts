import { setTimeout as sleep } from 'node:timers/promises';
import type { EventHubProducerClient, ReceivedEventData } from '@azure/event-hubs';
import type { Logger } from 'pino';
import { type BackoffOptions, backoff } from '../../src/core/backoff.js';
import { errorMessage } from '../../src/core/errors.js';
import { reasonForCopy } from '../../src/core/outcome.js';

/** `AmqpAnnotatedMessage` (from @azure/core-amqp, which partners do not install themselves). */
type AmqpMessage = ReturnType<ReceivedEventData['getRawAmqpMessage']>;

/** Why an event was dead-lettered and where it came from. */
export interface DeadEventInfo {
  readonly code: string;
  readonly reason: string;
  readonly attempts: number;
  readonly eventHub: string;
  readonly consumerGroup: string;
  readonly partitionId: string;
}

/** Application properties added to the copy on the poison hub (the publisher's own are kept). */
export const POISON_PROPERTIES = {
  code: 'partner-events-dead-code',
  reason: 'partner-events-dead-reason',
  attempts: 'partner-events-attempts',
  eventHub: 'partner-events-event-hub',
  consumerGroup: 'partner-events-consumer-group',
  partitionId: 'partner-events-partition-id',
  sequenceNumber: 'partner-events-sequence-number',
  offset: 'partner-events-offset',
  enqueuedTime: 'partner-events-enqueued-time',
} as const;

/** 0.5 s after the first failed send, doubling to 30 s. */
const SEND_BACKOFF: BackoffOptions = { baseMs: 500, maxMs: 30_000, jitter: 'none' };

/**
 * Copies dead events to a second hub, so they stay visible and retained next to the log they
 * left (the dead-letter file is still written first). The copy keeps the AMQP body section
 * byte for byte, so its signature still verifies; the partition key is the source partition, so
 * dead events of one partition stay in order.
 */
export class PoisonHub {
  readonly name: string;
  readonly #producer: EventHubProducerClient;
  readonly #logger: Logger;

  constructor(producer: EventHubProducerClient, logger: Logger) {
    this.#producer = producer;
    this.name = producer.eventHubName;
    this.#logger = logger;
  }

  /**
   * Sends the copy, retrying with backoff until it is accepted: the partition must not move past
   * an event whose copy is not on the poison hub (a missing hub or a missing role can be fixed
   * while it waits). Resolves true once the partition may move on: the copy was accepted, or the
   * hub refused it as too large, which no retry changes (an event near the hub's size limit, with
   * the properties added: said at error level; the dead-letter file, written before the copy, has
   * the event). Resolves false only when `signal` aborts first (the adapter is closing: the event
   * is not settled and is read again next time).
   */
  async send(event: ReceivedEventData, info: DeadEventInfo, signal: AbortSignal): Promise<boolean> {
    const copy = poisonCopy(event, info);
    const where = {
      poison_hub: this.name,
      partition_id: info.partitionId,
      sequence_number: event.sequenceNumber,
    };
    for (let failures = 0; !signal.aborted; failures++) {
      try {
        await this.#producer.sendBatch([copy], { partitionKey: info.partitionId, abortSignal: signal });
        return true;
      } catch (error) {
        if (signal.aborted) break;
        if (isTooLarge(error)) {
          this.#logger.error(
            { ...where, code: info.code, err: errorMessage(error) },
            'the poison hub refused the copy as too large: the partition moves on without it (the dead-letter file has the event)',
          );
          return true;
        }
        const delayMs = backoff(failures + 1, SEND_BACKOFF);
        this.#logger.warn(
          { ...where, err: errorMessage(error), retry_in_ms: delayMs },
          'copy to the poison hub failed: the partition waits until it succeeds',
        );
        await sleep(delayMs, undefined, { signal }).catch(() => {});
      }
    }
    return false;
  }

  close(): Promise<void> {
    return this.#producer.close();
  }
}

/** Event Hubs' answer to a message over its size limit (1 MB on most tiers), as the SDK reports it. */
function isTooLarge(error: unknown): boolean {
  const { code, condition } = (error ?? {}) as { code?: unknown; condition?: unknown };
  return code === 'MessageTooLargeError' || condition === 'amqp:link:message-size-exceeded';
}

/**
 * The dead event as it arrived (body section and type unchanged), with where and why it died.
 * What it adds is bounded, so that an event that fitted the main hub fits the poison hub unless
 * it was within about 4 KB of the limit: the reason is cut (`reasonForCopy`), the code is one of
 * ours, and the names come from the hub and the consumer group (Event Hubs bounds them).
 */
export function poisonCopy(event: ReceivedEventData, info: DeadEventInfo): AmqpMessage {
  const raw = event.getRawAmqpMessage();
  return {
    // With skipParsingBodyAsJson the body is the section's content: bytes for a data section.
    body: event.body,
    bodyType: raw.bodyType ?? 'data',
    ...(raw.properties ? { properties: raw.properties } : {}),
    applicationProperties: {
      ...raw.applicationProperties,
      [POISON_PROPERTIES.code]: info.code,
      [POISON_PROPERTIES.reason]: reasonForCopy(info.reason),
      [POISON_PROPERTIES.attempts]: info.attempts,
      [POISON_PROPERTIES.eventHub]: info.eventHub,
      [POISON_PROPERTIES.consumerGroup]: info.consumerGroup,
      [POISON_PROPERTIES.partitionId]: info.partitionId,
      [POISON_PROPERTIES.sequenceNumber]: event.sequenceNumber,
      [POISON_PROPERTIES.offset]: event.offset,
      [POISON_PROPERTIES.enqueuedTime]: event.enqueuedTimeUtc.toISOString(),
    },
  };
}
