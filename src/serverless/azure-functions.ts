/**
 * `partner-health-events/azure-functions`: wrappers for the Azure Functions v4 Node programming
 * model (`@azure/functions`, an optional peer). Each message runs through the consumer's own
 * `process()` (the same pipeline as the sidecar); what the host does after the function returns
 * or throws is mapped from the outcome.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { EventHubProducerClient } from '@azure/event-hubs';
import type { InvocationContext } from '@azure/functions';
import type { QueueClient } from '@azure/storage-queue';
import { POISON_PROPERTIES } from '../../adapters/event-hubs/poison-hub.js';
import type { Consumer } from '../consumer/consumer.js';
import type { ProcessResult } from '../consumer/pipeline.js';
import { errorMessage, PartnerEventsError } from '../core/errors.js';
import { type DeadOutcome, type Outcome, reasonForCopy } from '../core/outcome.js';
import type { RawMessage } from '../core/source-adapter.js';
import { ColdStart, type ColdStartOptions, type ConsumerSource } from './cold-start.js';

export type { ConsumerSource, SecretsLoader } from './cold-start.js';
export { EphemeralDedupeError } from './errors.js';

/** One message of a Functions trigger as the kit sees it. */
export interface FunctionMessage extends RawMessage {
  readonly id: string;
  /** The item as the host handed it: text or bytes as delivered, a JSON value re-serialised. */
  readonly body: string | Uint8Array;
  readonly metadata: Readonly<Record<string, string | number | null>>;
}

/** A Functions handler: the trigger's input and the host's `InvocationContext`. */
export type FunctionHandler<T> = (input: T, context: InvocationContext) => Promise<void>;

/**
 * A message the function hands back to the host for a retry: thrown, so the host makes the queue
 * message visible again (and moves it to `<queue>-poison` after `maxDequeueCount`). Its `code` is
 * the outcome's (SIGNATURE_MISMATCH, HANDLER_FAILED, …).
 */
export class FunctionRetryError extends PartnerEventsError {
  constructor(outcome: Extract<Outcome, { kind: 'retry' }>) {
    super(outcome.code, `partner-events: retry requested (${outcome.code}): ${outcome.reason}`);
    this.name = 'FunctionRetryError';
  }
}

// ---------------------------------------------------------------------------------------------
// Storage Queue trigger

export interface StorageQueueHandlerOptions extends ColdStartOptions {
  /**
   * The poison queue dead events are copied to at once (as the host names it: `<queue>-poison`),
   * e.g. `new QueueClient(connectionString, 'partner-events-poison')`; created when missing. The
   * dead-letter record is written to the consumer's sink either way. Default: none (the record
   * in the sink is the only copy; the host deletes the message).
   */
  poisonQueue?: QueueClient;
  /**
   * The host's `maxDequeueCount` (host.json `extensions.queues.maxDequeueCount`). On that
   * delivery a message that would be retried is dead-lettered by the kit instead (record with its
   * reason, poison copy), rather than moved to `-poison` by the host without one. Default 5.
   */
  maxDequeueCount?: number;
  /**
   * How the poison copy is written: `base64` (the host's default `messageEncoding`, so other
   * Functions can read it) or `none` (the text as is). Default `base64`.
   */
  poisonEncoding?: 'base64' | 'none';
}

/**
 * A handler for `app.storageQueue(...)`. Acked (or a proven duplicate): returns, and the host
 * deletes the message. Dead (a code retrying cannot fix, or the attempts ran out): the dead-letter
 * record is written and the poison copy sent, then it returns — at once, not after five dequeues.
 * Retry: throws `FunctionRetryError`, so the host retries after its `visibilityTimeout`.
 */
export function storageQueueHandler(
  consumer: ConsumerSource<FunctionMessage>,
  options: StorageQueueHandlerOptions = {},
): FunctionHandler<unknown> {
  const coldStart = new ColdStart(consumer, options);
  const maxDequeueCount = options.maxDequeueCount ?? 5;
  return async (queueItem, context) => {
    const ready = await coldStart.ready();
    const message = storageQueueMessage(queueItem, context);
    const result = await ready.process(message);
    const { outcome } = result;
    if (outcome.kind === 'ack') return;
    if (outcome.kind === 'dead') return sendToPoison(message, options);
    if (message.attempt < maxDequeueCount) throw new FunctionRetryError(outcome);
    // The host would move it to -poison now, without a reason: the kit does it with one.
    const dead: DeadOutcome = {
      kind: 'dead',
      code: outcome.code,
      reason: `${outcome.reason} (gave up after ${message.attempt} deliveries: the host’s maxDequeueCount)`,
    };
    await ready.deadLetter(message, dead, result);
    await sendToPoison(message, options);
  };
}

/** The queue item and its trigger metadata (`id`, `dequeueCount`, `insertionTime`) as a message. */
export function storageQueueMessage(queueItem: unknown, context: InvocationContext): FunctionMessage {
  const meta = context.triggerMetadata ?? {};
  const id = stringOf(meta.id) ?? context.invocationId;
  const attempt = positiveInt(meta.dequeueCount) ?? 1;
  const enqueuedAt = timeOf(meta.insertionTime);
  return {
    id,
    body: bodyOf(queueItem),
    attempt,
    enqueuedAt,
    metadata: {
      function: context.functionName,
      queue_message_id: id,
      dequeue_count: attempt,
      inserted_on: enqueuedAt ?? null,
    },
  };
}

async function sendToPoison(message: FunctionMessage, options: StorageQueueHandlerOptions): Promise<void> {
  const poison = options.poisonQueue;
  if (!poison) return;
  const bytes =
    typeof message.body === 'string' ? Buffer.from(message.body, 'utf8') : Buffer.from(message.body);
  const text =
    (options.poisonEncoding ?? 'base64') === 'base64' ? bytes.toString('base64') : bytes.toString('utf8');
  // Never expires: a poison message waits for an operator. A failure throws: the host retries.
  const send = () => poison.sendMessage(text, { messageTimeToLive: -1 });
  try {
    await send();
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode !== 404) throw error;
    await poison.createIfNotExists();
    await send();
  }
}

// ---------------------------------------------------------------------------------------------
// Event Hubs trigger (cardinality: 'many')

export interface EventHubHandlerOptions extends ColdStartOptions {
  /**
   * How long one invocation may spend on its batch, retries included, in ms: keep it well under
   * the app's `functionTimeout`. When it runs out, every event not yet handled goes to the poison
   * hub or the dead-letter sink before the function returns. Default 60000.
   */
  budgetMs?: number;
  /** Of the budget, the part kept for dead-lettering what is left, in ms. Default 5000. */
  reserveMs?: number;
  /**
   * A producer for the poison hub: dead events are copied there (their body as received, the
   * partition as partition key, `partner-events-*` properties saying why). Without one, dead
   * events go to the consumer's dead-letter sink only (which is written in both cases).
   */
  poisonHub?: EventHubProducerClient;
}

/**
 * A handler for `app.eventHub(...)` with `cardinality: 'many'`. The host checkpoints after the
 * function returns, whatever happened (Azure-Functions#947), so nothing is left to a retry by the
 * host: events are handled in order (one partition per invocation); one that asks for a retry is
 * retried in place before the next, for at most its share of what is left of `budgetMs` (left ÷
 * events still to go); what still fails, or was not reached, is dead-lettered (the sink, and the
 * poison hub when given) before the function returns. Throws only when that
 * dead-lettering itself failed (so a host retry policy, if configured, runs the batch again).
 */
export function eventHubHandler(
  consumer: ConsumerSource<FunctionMessage>,
  options: EventHubHandlerOptions = {},
): FunctionHandler<unknown[]> {
  const coldStart = new ColdStart(consumer, options);
  const budgetMs = options.budgetMs ?? 60_000;
  const reserveMs = options.reserveMs ?? 5000;
  return async (events, context) => {
    const ready = await coldStart.ready();
    const deadlineAt = Date.now() + budgetMs - reserveMs;
    const messages = eventHubMessages(events, context);
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort('invocation budget'), Math.max(0, deadlineAt - Date.now()));
    try {
      for (const [i, message] of messages.entries()) {
        // Retries of one event may use its share of what is left, so one hopeless event does not
        // starve the rest of the batch of their retries.
        const retryUntil = Date.now() + (deadlineAt - Date.now()) / (messages.length - i);
        await handleInPlace(ready, message, retryUntil, abort.signal, options);
      }
    } finally {
      clearTimeout(timer);
    }
  };
}

/** One event until it is acked or dead-lettered: retried in place until `retryUntil` (ms). */
async function handleInPlace(
  consumer: Consumer<FunctionMessage>,
  first: FunctionMessage,
  retryUntil: number,
  signal: AbortSignal,
  options: EventHubHandlerOptions,
): Promise<void> {
  let message = first;
  let last: ProcessResult | undefined;
  while (!signal.aborted) {
    last = await consumer.process(message, signal);
    const { outcome } = last;
    if (outcome.kind === 'ack') return;
    if (outcome.kind === 'dead') return copyToPoisonHub(consumer, message, outcome, options);
    if (Date.now() + outcome.delayMs >= retryUntil) break;
    await sleep(outcome.delayMs, undefined, { signal }).catch(() => undefined);
    message = { ...message, attempt: message.attempt + 1 };
  }
  const dead: DeadOutcome =
    last && last.outcome.kind === 'retry'
      ? {
          kind: 'dead',
          code: last.outcome.code,
          reason: `${last.outcome.reason} (gave up after ${message.attempt} attempts within the invocation’s time budget)`,
        }
      : {
          kind: 'dead',
          code: 'SHUTDOWN',
          reason: 'the invocation’s time budget ran out before this event was handled',
        };
  consumer.logger.warn(
    { message_id: message.id, attempt: message.attempt, code: dead.code },
    'event not handled within the invocation’s budget: dead-lettered before the host checkpoints past it',
  );
  await consumer.deadLetter(message, dead, last ?? {});
  await copyToPoisonHub(consumer, message, dead, options);
}

async function copyToPoisonHub(
  consumer: Consumer<FunctionMessage>,
  message: FunctionMessage,
  dead: DeadOutcome,
  options: EventHubHandlerOptions,
): Promise<void> {
  const producer = options.poisonHub;
  if (!producer) return;
  const partitionId = String(message.metadata.partition_id ?? '');
  try {
    await producer.sendBatch(
      [
        {
          body: typeof message.body === 'string' ? Buffer.from(message.body, 'utf8') : message.body,
          // EventData's `properties` are the AMQP application properties.
          properties: {
            [POISON_PROPERTIES.code]: dead.code,
            [POISON_PROPERTIES.reason]: reasonForCopy(dead.reason),
            [POISON_PROPERTIES.attempts]: message.attempt,
            [POISON_PROPERTIES.eventHub]: String(message.metadata.event_hub ?? ''),
            [POISON_PROPERTIES.consumerGroup]: String(message.metadata.consumer_group ?? ''),
            [POISON_PROPERTIES.partitionId]: partitionId,
            [POISON_PROPERTIES.sequenceNumber]: Number(message.metadata.sequence_number ?? -1),
            [POISON_PROPERTIES.offset]: String(message.metadata.offset ?? ''),
            [POISON_PROPERTIES.enqueuedTime]: new Date(message.enqueuedAt ?? 0).toISOString(),
          },
        },
      ],
      partitionId === '' ? {} : { partitionKey: partitionId },
    );
  } catch (error) {
    consumer.logger.error(
      { message_id: message.id, err: errorMessage(error), poison_hub: producer.eventHubName },
      'copy to the poison hub failed: the invocation fails (the dead-letter record is written)',
    );
    throw error;
  }
}

/**
 * The batch and its trigger metadata as messages: `enqueuedTimeUtcArray`, `sequenceNumberArray`,
 * `offsetArray` per event, `partitionContext` for the batch; the attempt is the host's retry
 * count + 1 (a host retry policy runs the same batch again).
 */
export function eventHubMessages(events: readonly unknown[], context: InvocationContext): FunctionMessage[] {
  const meta = context.triggerMetadata ?? {};
  const enqueued = arrayOf(meta.enqueuedTimeUtcArray);
  const sequences = arrayOf(meta.sequenceNumberArray);
  const offsets = arrayOf(meta.offsetArray);
  const partition = (meta.partitionContext ?? {}) as Record<string, unknown>;
  const partitionId = stringOf(partition.partitionId) ?? null;
  const attempt = (context.retryContext?.retryCount ?? 0) + 1;
  return events.map((event, i) => {
    const sequenceNumber = Number(sequences[i] ?? Number.NaN);
    const id = `${partitionId ?? '?'}:${Number.isFinite(sequenceNumber) ? sequenceNumber : i}`;
    return {
      id,
      body: bodyOf(event),
      attempt,
      enqueuedAt: timeOf(enqueued[i]),
      metadata: {
        function: context.functionName,
        event_hub: stringOf(partition.eventHubName) ?? null,
        consumer_group: stringOf(partition.consumerGroup) ?? null,
        partition_id: partitionId,
        sequence_number: Number.isFinite(sequenceNumber) ? sequenceNumber : null,
        offset: stringOf(offsets[i]) ?? null,
      },
    };
  });
}

// ---------------------------------------------------------------------------------------------

/**
 * The host hands text as a string, bytes as a Buffer, and JSON it recognised as a parsed value:
 * re-serialised, which keeps an envelope verifiable (its signature covers `signed_at` and the
 * `body` string, both unchanged by a parse and a stringify).
 */
function bodyOf(item: unknown): string | Uint8Array {
  if (typeof item === 'string' || item instanceof Uint8Array) return item;
  return JSON.stringify(item) ?? '';
}

function arrayOf(value: unknown): readonly unknown[] {
  return Array.isArray(value) ? value : [];
}

function stringOf(value: unknown): string | undefined {
  return typeof value === 'string' && value !== ''
    ? value
    : typeof value === 'number'
      ? String(value)
      : undefined;
}

function positiveInt(value: unknown): number | undefined {
  const n = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : Number.NaN;
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

function timeOf(value: unknown): number | undefined {
  if (value instanceof Date) return value.getTime();
  if (typeof value !== 'string' && typeof value !== 'number') return undefined;
  const ms = new Date(value).getTime();
  return Number.isNaN(ms) ? undefined : ms;
}
