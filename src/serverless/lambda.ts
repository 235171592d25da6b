/**
 * `partner-health-events/lambda`: an AWS Lambda handler for an SQS event source mapping with
 * `ReportBatchItemFailures`. Each record runs through the consumer's own `process()` (the same
 * pipeline as the sidecar); the answer lists the records to hand back, so only those are retried.
 */
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { Context, SQSBatchItemFailure, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import type { Consumer } from '../consumer/consumer.js';
import { errorMessage } from '../core/errors.js';
import type { DeadOutcome } from '../core/outcome.js';
import type { RawMessage } from '../core/source-adapter.js';
import { type BatchEntry, processBatch } from './batch.js';
import { ColdStart, type ColdStartOptions, type ConsumerSource } from './cold-start.js';

export type { ConsumerSource, SecretsLoader } from './cold-start.js';
export { EphemeralDedupeError } from './errors.js';

/** One SQS record as the kit sees it. `body` is the record's body exactly as delivered. */
export interface LambdaSqsMessage extends RawMessage {
  /** The SQS MessageId. */
  readonly id: string;
  readonly body: string;
  /** `ApproximateReceiveCount`: 1 on the first delivery. */
  readonly attempt: number;
  /** `SentTimestamp` (ms): the reference for the age check. */
  readonly enqueuedAt: number | undefined;
  /** `MessageGroupId` on FIFO queues. */
  readonly messageGroupId: string | undefined;
  readonly metadata: Readonly<Record<string, string | number | null>>;
}

export interface SqsHandlerOptions extends ColdStartOptions {
  /**
   * An SQS queue URL that dead events are sent to (the body exactly as received, with the
   * `partner_events_*` attributes of the SQS adapter's `deadLetterQueue`); once SQS accepted the
   * copy the record is reported as done. Default: none — a dead event is reported as a failure,
   * so the queue's own redrive policy moves it to its dead-letter queue after `maxReceiveCount`.
   */
  deadLetterQueue?: string;
  /** The client for `deadLetterQueue`. Default `new SQSClient({})` (the function's role and region). */
  client?: SQSClient;
  /**
   * Milliseconds of the invocation's remaining time kept back for answering (and for the
   * dead-letter queue sends): the work stops at `getRemainingTimeInMillis() - reserveMs`.
   * Default 1000.
   */
  reserveMs?: number;
}

export type SqsBatchHandler = (
  event: SQSEvent,
  context: Pick<Context, 'getRemainingTimeInMillis'>,
) => Promise<SQSBatchResponse>;

const DEFAULT_RESERVE_MS = 1000;
const DLQ_SEND_ATTEMPTS = 3;

/**
 * A Lambda handler for SQS events. Records are processed with the consumer's `concurrency`
 * (FIFO queues: one message group at a time, in order, and the rest of a group is handed back after
 * its first failure). Answers `{ batchItemFailures }`: every record that was not acked — a retry,
 * a dead event without `deadLetterQueue`, or one the remaining time did not let finish — is
 * listed, so SQS makes it visible again after the queue's visibility timeout.
 */
export function sqsHandler(
  consumer: ConsumerSource<LambdaSqsMessage>,
  options: SqsHandlerOptions = {},
): SqsBatchHandler {
  const coldStart = new ColdStart(consumer, options);
  const reserveMs = options.reserveMs ?? DEFAULT_RESERVE_MS;
  let deadLetters: Promise<DeadLetterQueue> | undefined;
  const deadLetterQueue = (): Promise<DeadLetterQueue> => {
    deadLetters ??= openDeadLetterQueue(options);
    return deadLetters;
  };
  return async (event, context) => {
    const ready = await coldStart.ready();
    const deadlineAt = Date.now() + context.getRemainingTimeInMillis() - reserveMs;
    const messages = event.Records.map(toLambdaSqsMessage);
    const fifo = event.Records.some((r) => r.eventSourceARN.endsWith('.fifo'));
    const entries = await processBatch(
      ready,
      messages,
      deadlineAt,
      fifo ? (m) => m.messageGroupId ?? '' : undefined,
    );
    const failed = await Promise.all(
      entries.map((entry, i) =>
        settle(ready, messages[i] as LambdaSqsMessage, entry, options, deadLetterQueue),
      ),
    );
    const batchItemFailures: SQSBatchItemFailure[] = [];
    failed.forEach((isFailure, i) => {
      if (isFailure) batchItemFailures.push({ itemIdentifier: (messages[i] as LambdaSqsMessage).id });
    });
    return { batchItemFailures };
  };
}

type DeadLetterQueue = (
  message: LambdaSqsMessage,
  outcome: DeadOutcome,
  consumer: Consumer<LambdaSqsMessage>,
) => Promise<void>;

/**
 * The SQS adapter's own dead-letter sender, loaded (with the SDK) only when a queue is configured.
 * As in the adapter, a copy SQS can never take is given up and the record reported as done: listed
 * as a failure, it would come back and be dead again after every visibility timeout, with a new
 * dead-letter record each time. The consumer's sink already holds the message.
 */
async function openDeadLetterQueue(options: SqsHandlerOptions): Promise<DeadLetterQueue> {
  const queueUrl = options.deadLetterQueue as string;
  const [{ DeadLetterQueue }, { SQSClient }] = await Promise.all([
    import('../../adapters/sqs/dead-letter-queue.js'),
    import('@aws-sdk/client-sqs'),
  ]);
  const queue = new DeadLetterQueue(options.client ?? new SQSClient({}), queueUrl, DLQ_SEND_ATTEMPTS);
  return async (message, outcome, consumer) => {
    const source = `sqs:${String(message.metadata.queue)}`;
    const copy = await queue.send(message, outcome, { source, logger: consumer.logger });
    if (copy.sent) return;
    consumer.logger.error(
      { source, message_id: message.id, code: outcome.code, err: copy.why },
      'dead-letter queue can never take this message: reported done without a copy there (its dead-letter record holds it)',
    );
  };
}

/** True when the record must be reported as a failure. */
async function settle(
  consumer: Consumer<LambdaSqsMessage>,
  message: LambdaSqsMessage,
  entry: BatchEntry,
  options: SqsHandlerOptions,
  deadLetterQueue: () => Promise<DeadLetterQueue>,
): Promise<boolean> {
  if (entry.kind !== 'processed') {
    consumer.logger.warn(
      { message_id: message.id, attempt: message.attempt, state: entry.kind },
      'the invocation’s time ran out before this message was handled: reported as a failure',
    );
    return true;
  }
  const { outcome } = entry.result;
  if (outcome.kind === 'ack') return false;
  if (outcome.kind === 'retry' || !options.deadLetterQueue) return true;
  try {
    await (await deadLetterQueue())(message, outcome, consumer);
    return false;
  } catch (error) {
    consumer.logger.error(
      { message_id: message.id, err: errorMessage(error) },
      'dead-letter queue send failed: reported as a failure',
    );
    return true;
  }
}

/** An SQS record as the kit's message: attempt from ApproximateReceiveCount, age from SentTimestamp. */
export function toLambdaSqsMessage(record: SQSRecord): LambdaSqsMessage {
  const attributes = record.attributes;
  const receiveCount = positiveInt(attributes.ApproximateReceiveCount) ?? 1;
  const sentTimestamp = positiveInt(attributes.SentTimestamp);
  const groupId = attributes.MessageGroupId;
  const queue = queueOfArn(record.eventSourceARN);
  return {
    id: record.messageId,
    body: record.body,
    attempt: receiveCount,
    enqueuedAt: sentTimestamp,
    messageGroupId: groupId,
    metadata: {
      queue,
      sqs_message_id: record.messageId,
      receive_count: receiveCount,
      sent_timestamp: sentTimestamp ?? null,
      ...(groupId === undefined ? {} : { message_group_id: groupId }),
    },
  };
}

/** `arn:aws:sqs:eu-west-1:123456789012:orders` → `orders`. */
function queueOfArn(arn: string): string {
  return arn.slice(arn.lastIndexOf(':') + 1) || 'sqs';
}

function positiveInt(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}
