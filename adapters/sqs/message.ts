import type { Message } from '@aws-sdk/client-sqs';
import type { RawMessage, TraceCarrier } from '../../src/core/source-adapter.js';

/** One SQS delivery. `body` is the message Body exactly as received (the HMAC covers it). */
export interface SqsMessage extends RawMessage {
  /** The SQS MessageId (stable across redeliveries). */
  readonly id: string;
  readonly body: string;
  /** `ApproximateReceiveCount`: 1 on the first delivery. */
  readonly attempt: number;
  /** `SentTimestamp` in ms: when SQS accepted the message, the reference for the age check. */
  readonly enqueuedAt: number | undefined;
  /** Names this delivery for delete and visibility calls; a redelivery gets a new one. */
  readonly receiptHandle: string;
  /** When this process received it (ms), for the 12 h visibility limit. */
  readonly receivedAt: number;
  /** `MessageGroupId` on FIFO queues. */
  readonly messageGroupId: string | undefined;
  readonly metadata: Readonly<Record<string, string | number | null>>;
}

/** Maps an SQS `Message` (received with SentTimestamp and ApproximateReceiveCount) onto the kit's. */
export function toSqsMessage(message: Message, queue: string, receivedAt: number): SqsMessage {
  const attributes = message.Attributes ?? {};
  const receiveCount = positiveInt(attributes.ApproximateReceiveCount) ?? 1;
  const sentTimestamp = positiveInt(attributes.SentTimestamp);
  const groupId = attributes.MessageGroupId;
  const id = message.MessageId ?? message.ReceiptHandle ?? '';
  const traceContext = traceContextOf(message);
  return {
    id,
    body: message.Body ?? '',
    attempt: receiveCount,
    enqueuedAt: sentTimestamp,
    receiptHandle: message.ReceiptHandle ?? '',
    receivedAt,
    messageGroupId: groupId,
    ...(traceContext ? { traceContext } : {}),
    metadata: {
      queue,
      sqs_message_id: id,
      receive_count: receiveCount,
      sent_timestamp: sentTimestamp ?? null,
      ...(groupId === undefined ? {} : { message_group_id: groupId }),
    },
  };
}

/** `traceparent` / `tracestate` message attributes, else the X-Ray `AWSTraceHeader`. */
function traceContextOf(message: Message): TraceCarrier | undefined {
  const attributes = message.MessageAttributes;
  const traceparent = attributes?.traceparent?.StringValue;
  if (traceparent !== undefined) return { traceparent, tracestate: attributes?.tracestate?.StringValue };
  const awsTraceHeader = message.Attributes?.AWSTraceHeader;
  return awsTraceHeader === undefined ? undefined : { awsTraceHeader };
}

function positiveInt(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}
