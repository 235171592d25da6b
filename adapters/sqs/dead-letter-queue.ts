import {
  GetQueueAttributesCommand,
  type MessageAttributeValue,
  SendMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { Logger } from 'pino';
import { errorMessage } from '../../src/core/errors.js';
import { type DeadOutcome, reasonForCopy } from '../../src/core/outcome.js';
import { isRefusedContent, isRetryableFailure, sqsFailure } from './errors.js';
import { isFifoQueue, queueNameOf } from './options.js';
import { withAttempts } from './retry.js';

/** The largest message SQS takes (body and attributes together): the budget when a queue's own is unknown. */
export const SQS_MAX_MESSAGE_BYTES = 1_048_576;

/** What a dead-letter queue copy is made of: the body exactly as received and its delivery facts. */
export interface DeadLetterQueueMessage {
  readonly id: string;
  readonly body: string;
  readonly attempt: number;
  readonly enqueuedAt?: number | undefined;
  readonly messageGroupId?: string | undefined;
}

export interface DeadLetterQueueSendContext {
  /** The source named in the copy's `partner_events_source` attribute (`sqs:orders`). */
  readonly source: string;
  readonly logger: Logger;
}

/**
 * What became of a copy: sent, or refused for good. A refused copy is one SQS would refuse every
 * time (its body alone is over the queue's `MaximumMessageSize`, or SQS answered a sender fault
 * about its content): retrying the message would only loop, so the caller gives the copy up.
 */
export type DeadLetterCopy = { readonly sent: true } | { readonly sent: false; readonly why: string };

const REASON = 'partner_events_reason';

/**
 * An SQS dead-letter queue that dead messages are copied to: the body exactly as received, with
 * message attributes `partner_events_code`, `partner_events_message_id`, `partner_events_source`,
 * `partner_events_attempts`, `partner_events_sent_timestamp` (when known),
 * `partner_events_dead_lettered_at` and `partner_events_reason`, as many as the queue's
 * `MaximumMessageSize` leaves room for beside the body (SQS counts the attributes' names, types and
 * values in it): the reason is shortened first, then the others are left out from the last.
 * The limit is read once (`GetQueueAttributes`).
 */
export class DeadLetterQueue {
  readonly queueUrl: string;
  readonly #client: SQSClient;
  /** Attempts of a send (retryable failures only) before it throws. */
  readonly #attempts: number;
  /** The queue's `MaximumMessageSize`, once read (or being read). */
  #maxBytes: Promise<number> | undefined;

  constructor(client: SQSClient, queueUrl: string, attempts: number) {
    this.#client = client;
    this.queueUrl = queueUrl;
    this.#attempts = attempts;
  }

  /**
   * Sends the copy. Resolves `sent` once SQS accepted it, or `sent: false` when SQS can never take
   * it; throws when the send failed otherwise (throttling, network, access), so the caller keeps
   * the message.
   */
  async send(
    message: DeadLetterQueueMessage,
    outcome: DeadOutcome,
    context: DeadLetterQueueSendContext,
  ): Promise<DeadLetterCopy> {
    const maxBytes = await this.#maximumSize(context);
    const bodyBytes = Buffer.byteLength(message.body, 'utf8');
    if (bodyBytes > maxBytes) {
      return {
        sent: false,
        why: `the body is ${bodyBytes} bytes; the dead-letter queue takes at most ${maxBytes} (MaximumMessageSize)`,
      };
    }
    const fitted = fitAttributes(copyAttributes(message, outcome, context.source), maxBytes - bodyBytes);
    if (fitted.cut.length > 0) {
      context.logger.warn(
        { source: context.source, message_id: message.id, attributes: fitted.cut, max_bytes: maxBytes },
        'dead-letter queue copy: attributes shortened or left out to fit the queue’s MaximumMessageSize',
      );
    }
    try {
      await this.#sendOnce(message, fitted.attributes, context);
    } catch (error) {
      if (isRefusedContent(error)) return { sent: false, why: errorMessage(error) };
      throw error;
    }
    return { sent: true };
  }

  async #sendOnce(
    message: DeadLetterQueueMessage,
    attributes: Record<string, MessageAttributeValue>,
    context: DeadLetterQueueSendContext,
  ): Promise<void> {
    const fifo = isFifoQueue(this.queueUrl)
      ? {
          MessageGroupId: message.messageGroupId ?? 'partner-events-dead-letters',
          // The same message sent twice (a retried send) lands once.
          MessageDeduplicationId: message.id.slice(0, 128),
        }
      : {};
    const command = new SendMessageCommand({
      QueueUrl: this.queueUrl,
      MessageBody: message.body,
      MessageAttributes: attributes,
      ...fifo,
    });
    await withAttempts(
      this.#attempts,
      isRetryableFailure,
      async () => {
        try {
          await this.#client.send(command);
        } catch (error) {
          throw sqsFailure('SendMessage (dead-letter queue)', queueNameOf(this.queueUrl), error);
        }
      },
      (error, attempt) =>
        context.logger.warn(
          { source: context.source, err: errorMessage(error), attempt },
          'dead-letter queue send failed: retrying',
        ),
    );
  }

  #maximumSize(context: DeadLetterQueueSendContext): Promise<number> {
    this.#maxBytes ??= this.#readMaximumSize(context);
    return this.#maxBytes;
  }

  /**
   * The queue's `MaximumMessageSize`. When it cannot be read (no `sqs:GetQueueAttributes`
   * permission), SQS's own largest: a copy the queue then refuses as too large is still given
   * up, not looped. A failure that may heal (throttling, network) is asked again next time.
   */
  async #readMaximumSize(context: DeadLetterQueueSendContext): Promise<number> {
    try {
      const { Attributes } = await this.#client.send(
        new GetQueueAttributesCommand({ QueueUrl: this.queueUrl, AttributeNames: ['MaximumMessageSize'] }),
      );
      const bytes = Number(Attributes?.MaximumMessageSize);
      return Number.isSafeInteger(bytes) && bytes > 0 ? bytes : SQS_MAX_MESSAGE_BYTES;
    } catch (error) {
      const failure = sqsFailure('GetQueueAttributes (dead-letter queue)', queueNameOf(this.queueUrl), error);
      if (isRetryableFailure(failure)) this.#maxBytes = undefined;
      context.logger.warn(
        { source: context.source, err: errorMessage(failure), max_bytes: SQS_MAX_MESSAGE_BYTES },
        'cannot read the dead-letter queue’s MaximumMessageSize: copies are fitted to the SQS maximum',
      );
      return SQS_MAX_MESSAGE_BYTES;
    }
  }
}

/** The copy's attributes, the most useful first; the reason last (it is shortened first). */
function copyAttributes(
  message: DeadLetterQueueMessage,
  outcome: DeadOutcome,
  source: string,
): [string, MessageAttributeValue][] {
  const attributes: [string, MessageAttributeValue][] = [
    ['partner_events_code', text(outcome.code)],
    ['partner_events_message_id', text(message.id)],
    ['partner_events_source', text(source)],
    ['partner_events_attempts', number(message.attempt)],
  ];
  if (message.enqueuedAt !== undefined) {
    attributes.push(['partner_events_sent_timestamp', number(message.enqueuedAt)]);
  }
  attributes.push(['partner_events_dead_lettered_at', text(new Date().toISOString())]);
  attributes.push([REASON, text(reasonForCopy(outcome.reason))]);
  return attributes;
}

/**
 * The attributes that fit in `budget` bytes, counted as SQS counts them (name, data type and
 * value): each in order while it fits; the reason is cut to the room left. `cut` names the
 * attributes shortened or left out.
 */
function fitAttributes(
  attributes: readonly [string, MessageAttributeValue][],
  budget: number,
): { attributes: Record<string, MessageAttributeValue>; cut: string[] } {
  const fitted: Record<string, MessageAttributeValue> = {};
  const cut: string[] = [];
  let left = budget;
  for (const [name, value] of attributes) {
    const size = attributeBytes(name, value);
    if (size <= left) {
      fitted[name] = value;
      left -= size;
      continue;
    }
    cut.push(name);
    const room = left - attributeBytes(name, { ...value, StringValue: '' });
    const shortened = name === REASON && room > 0 ? cutBytes(value.StringValue ?? '', room) : '';
    if (shortened !== '') {
      fitted[name] = { ...value, StringValue: shortened };
      left -= attributeBytes(name, fitted[name]);
    }
  }
  return { attributes: fitted, cut };
}

function attributeBytes(name: string, value: MessageAttributeValue): number {
  return (
    Buffer.byteLength(name, 'utf8') +
    Buffer.byteLength(value.DataType ?? '', 'utf8') +
    Buffer.byteLength(value.StringValue ?? '', 'utf8')
  );
}

/**
 * Characters SQS refuses in a message or attribute value (it allows #x9, #xA, #xD, #x20–#xD7FF,
 * #xE000–#xFFFD, #x10000–#x10FFFF): a handler's error may hold an ANSI colour escape or a lone
 * surrogate, and one refused character would fail the copy every time.
 */
const NOT_SQS_TEXT = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;

function text(value: string): MessageAttributeValue {
  return { DataType: 'String', StringValue: value === '' ? '-' : value.replace(NOT_SQS_TEXT, '\uFFFD') };
}

function number(value: number): MessageAttributeValue {
  return { DataType: 'Number', StringValue: String(value) };
}

/** The longest start of `value` (whole characters) within `maxBytes` of UTF-8. */
function cutBytes(value: string, maxBytes: number): string {
  let bytes = 0;
  let end = 0;
  for (const char of value) {
    bytes += Buffer.byteLength(char, 'utf8');
    if (bytes > maxBytes) break;
    end += char.length;
  }
  return value.slice(0, end);
}
