import {
  ChangeMessageVisibilityCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  type Message,
  ReceiveMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { ConfigError } from '../../src/core/errors.js';
import { redact } from '../../src/core/redact.js';
import {
  createSideChannelReader,
  type ReplayReader,
  type ReplayReaderContext,
  type SideChannel,
  type SideChannelMessage,
} from '../../src/core/replay-reader.js';
import { sqsFailure } from './errors.js';
import { toSqsMessage } from './message.js';
import { queueNameOf, SQS_MAX_BATCH, SQS_MAX_VISIBILITY_SECONDS } from './options.js';
import { cliClientConfig, queueUrlOfSpec } from './url.js';

/** The longest long poll SQS allows. */
const MAX_WAIT_SECONDS = 20;

/** An SQS message as replay reads it: its receipt handle names it for delete and visibility. */
interface SqsReplayMessage extends SideChannelMessage {
  readonly receiptHandle: string;
}

/**
 * `replay sqs:QUEUE_URL` (typically the worker's dead-letter queue): long polls with the run's
 * visibility timeout; a message done is deleted, any other is made visible again. The code comes
 * from the `partner_events_code` attribute the worker's `deadLetterQueue` sends; messages that
 * SQS moved itself (a redrive policy) have none.
 */
export function sqsReplayReader(
  spec: string,
  context: ReplayReaderContext,
  /** The CLI's client by default; tests give one that records its calls. */
  client?: SQSClient,
): ReplayReader {
  const queueUrl = queueUrlOfSpec(spec);
  if (!/^https?:\/\/[^/]+\/.+/.test(queueUrl))
    throw new ConfigError(`replay ${redact(spec)}: expected sqs:QUEUE_URL`);
  return createSideChannelReader(
    sqsChannel(client ?? new SQSClient(cliClientConfig(queueUrl)), queueUrl, context),
    context,
  );
}

function sqsChannel(
  client: SQSClient,
  queueUrl: string,
  context: ReplayReaderContext,
): SideChannel<SqsReplayMessage> {
  const name = `sqs:${queueNameOf(queueUrl)}`;
  const visibility = Math.min(SQS_MAX_VISIBILITY_SECONDS, context.visibilityTimeoutSeconds);
  // Several polls per settle period: one long poll that outlasts it would be all the run waits.
  const waitSeconds = Math.max(1, Math.min(MAX_WAIT_SECONDS, Math.floor(context.settleMs / 3000)));
  const setVisibility = async (message: SqsReplayMessage, seconds: number) => {
    try {
      await client.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: queueUrl,
          ReceiptHandle: message.receiptHandle,
          VisibilityTimeout: seconds,
        }),
      );
    } catch (error) {
      throw sqsFailure('ChangeMessageVisibility', name, error);
    }
  };
  return {
    name,
    kind: 'queue',
    fetch: (max, signal) => receiveBatch(client, { queueUrl, name, max, waitSeconds, visibility }, signal),
    async remove(message) {
      try {
        await client.send(
          new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.receiptHandle }),
        );
      } catch (error) {
        throw sqsFailure('DeleteMessage', name, error);
      }
    },
    release: (message) => setVisibility(message, 0),
    async renew(messages) {
      await Promise.all(messages.map((m) => setVisibility(m, visibility)));
    },
    total: () => approximateCount(client, queueUrl),
    leftAfterMax: async () =>
      (await heldAnywhere(client, queueUrl)) === 0 ? 'none' : { unread: 'may-remain' },
    close: async () => client.destroy(),
  };
}

/** One long poll: up to `max` messages, hidden for `visibility` seconds. */
async function receiveBatch(
  client: SQSClient,
  poll: { queueUrl: string; name: string; max: number; waitSeconds: number; visibility: number },
  signal: AbortSignal,
): Promise<SqsReplayMessage[]> {
  let messages: Message[];
  try {
    const output = await client.send(
      new ReceiveMessageCommand({
        QueueUrl: poll.queueUrl,
        MaxNumberOfMessages: Math.min(SQS_MAX_BATCH, poll.max),
        WaitTimeSeconds: poll.waitSeconds,
        VisibilityTimeout: poll.visibility,
        // AWSTraceHeader (X-Ray) and, among All, traceparent / tracestate: a replay's delivery
        // span links to the producer's trace as the worker's does (SQS returns only what is asked for).
        MessageSystemAttributeNames: ['SentTimestamp', 'ApproximateReceiveCount', 'AWSTraceHeader'],
        MessageAttributeNames: ['All'],
      }),
      { abortSignal: signal },
    );
    messages = output.Messages ?? [];
  } catch (error) {
    if (signal.aborted) return [];
    throw sqsFailure('ReceiveMessage', poll.name, error);
  }
  const now = Date.now();
  return messages.map((m) => replayMessage(m, poll.name, now));
}

/** `ApproximateNumberOfMessages`: the progress line's total. */
async function approximateCount(client: SQSClient, queueUrl: string): Promise<number | undefined> {
  const { Attributes = {} } = await client.send(
    new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages'] }),
  );
  const n = Number(Attributes.ApproximateNumberOfMessages);
  return Number.isFinite(n) ? n : undefined;
}

/**
 * Messages the queue holds, visible, in flight or delayed (approximate: SQS counts lag a little, so
 * 0 says empty only as far as SQS knows).
 */
async function heldAnywhere(client: SQSClient, queueUrl: string): Promise<number | undefined> {
  const names = [
    'ApproximateNumberOfMessages',
    'ApproximateNumberOfMessagesNotVisible',
    'ApproximateNumberOfMessagesDelayed',
  ] as const;
  const { Attributes = {} } = await client.send(
    new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: [...names] }),
  );
  const counts = names.map((name) => Number(Attributes[name]));
  return counts.every(Number.isFinite) ? counts.reduce((a, b) => a + b, 0) : undefined;
}

/**
 * The message, its recorded code and first enqueue time from the attributes the worker sent, if
 * any, and the trace context it carries.
 */
function replayMessage(message: Message, queue: string, receivedAt: number): SqsReplayMessage {
  const sqs = toSqsMessage(message, queue, receivedAt);
  const attributes = message.MessageAttributes ?? {};
  const code = attributes.partner_events_code?.StringValue;
  const sentAt = Number(attributes.partner_events_sent_timestamp?.StringValue);
  return {
    id: sqs.id,
    body: sqs.body,
    attempt: sqs.attempt,
    enqueuedAt: Number.isSafeInteger(sentAt) && sentAt > 0 ? sentAt : sqs.enqueuedAt,
    receiptHandle: sqs.receiptHandle,
    ...(sqs.traceContext ? { traceContext: sqs.traceContext } : {}),
    metadata: { ...sqs.metadata, ...(code === undefined ? {} : { recorded_code: code }) },
    ...(code === undefined ? {} : { recordedCode: code }),
  };
}
