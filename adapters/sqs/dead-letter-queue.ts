import { type MessageAttributeValue, SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { Logger } from 'pino';
import { errorMessage } from '../../src/core/errors.js';
import { type DeadOutcome, reasonForCopy } from '../../src/core/outcome.js';
import { isRetryableFailure, sqsFailure } from './errors.js';
import { isFifoQueue, queueNameOf } from './options.js';
import { withAttempts } from './retry.js';

/** What a dead-letter queue copy is made of: the body exactly as received and its delivery facts. */
export interface DeadLetterQueueMessage {
  readonly id: string;
  readonly body: string;
  readonly attempt: number;
  readonly enqueuedAt?: number | undefined;
  readonly messageGroupId?: string | undefined;
}

export interface DeadLetterQueueSendOptions {
  /** The source named in the copy's `partner_events_source` attribute (`sqs:orders`). */
  readonly source: string;
  /** Attempts of the send (retryable failures only) before it throws. */
  readonly attempts: number;
  readonly logger: Logger;
}

/**
 * Sends a dead message to an SQS dead-letter queue: the body exactly as received, with message
 * attributes `partner_events_code`, `partner_events_reason`, `partner_events_source`,
 * `partner_events_message_id`, `partner_events_attempts`, `partner_events_dead_lettered_at` (and
 * `partner_events_sent_timestamp` when known). Resolves once SQS accepted it; throws otherwise, so
 * the caller keeps the message (the SQS adapter, the Lambda handler).
 */
export async function sendToDeadLetterQueue(
  client: SQSClient,
  queueUrl: string,
  message: DeadLetterQueueMessage,
  outcome: DeadOutcome,
  options: DeadLetterQueueSendOptions,
): Promise<void> {
  const attributes: Record<string, MessageAttributeValue> = {
    partner_events_code: text(outcome.code),
    partner_events_reason: text(reasonForCopy(outcome.reason)),
    partner_events_source: text(options.source),
    partner_events_message_id: text(message.id),
    partner_events_attempts: number(message.attempt),
    partner_events_dead_lettered_at: text(new Date().toISOString()),
  };
  if (message.enqueuedAt !== undefined) attributes.partner_events_sent_timestamp = number(message.enqueuedAt);
  const fifo = isFifoQueue(queueUrl)
    ? {
        MessageGroupId: message.messageGroupId ?? 'partner-events-dead-letters',
        // The same message sent twice (a retried send) lands once.
        MessageDeduplicationId: message.id.slice(0, 128),
      }
    : {};
  await withAttempts(
    options.attempts,
    isRetryableFailure,
    async () => {
      try {
        await client.send(
          new SendMessageCommand({
            QueueUrl: queueUrl,
            MessageBody: message.body,
            MessageAttributes: attributes,
            ...fifo,
          }),
        );
      } catch (error) {
        throw sqsFailure('SendMessage (dead-letter queue)', queueNameOf(queueUrl), error);
      }
    },
    (error, attempt) =>
      options.logger.warn(
        { source: options.source, err: errorMessage(error), attempt },
        'dead-letter queue send failed: retrying',
      ),
  );
}

function text(value: string): MessageAttributeValue {
  return { DataType: 'String', StringValue: value === '' ? '-' : value };
}

function number(value: number): MessageAttributeValue {
  return { DataType: 'Number', StringValue: String(value) };
}
