import type { SQSClient } from '@aws-sdk/client-sqs';
import type { Logger } from 'pino';
import { z } from 'zod';
import { ConfigError } from '../../src/core/errors.js';
import { redact } from '../../src/core/redact.js';

/** SQS caps: messages per receive and entries per batch call. */
export const SQS_MAX_BATCH = 10;
/** SQS caps a visibility timeout at 12 hours. */
export const SQS_MAX_VISIBILITY_SECONDS = 43_200;

export interface SqsAdapterOptions {
  /**
   * The queue to consume, e.g. `https://sqs.eu-west-1.amazonaws.com/123456789012/partner-events`.
   * Required.
   */
  queueUrl: string;
  /**
   * An `SQSClient` of your own (custom credentials, endpoint, retry strategy, middleware). The
   * adapter never destroys a client it was given.
   * @defaultValue `new SQSClient({})`: the SDK's standard configuration (credential chain,
   * `AWS_REGION`, `AWS_ENDPOINT_URL_SQS` / `AWS_ENDPOINT_URL`), destroyed by `close()`.
   */
  client?: SQSClient;
  /**
   * Long-poll wait of each `ReceiveMessage`, 0–20 s. Also bounds how long a message that arrives
   * just after `stop()` may be held by the abandoned poll (see docs/adapters/sqs.md).
   * @defaultValue `20`
   */
  waitTimeSeconds?: number;
  /**
   * Most messages per `ReceiveMessage`, 1–10 (the SQS limit). How many messages are handled at
   * once is the consumer's `concurrency`, independent of this.
   * @defaultValue `10`
   */
  batchSize?: number;
  /**
   * Most `ReceiveMessage` calls in flight at once. The consumer runs
   * `min(this, ceil(concurrency / batchSize))` pollers, so that with a `concurrency` of several
   * batches the slots are refilled without waiting a round trip per batch. 1–16. Each idle
   * poller holds one long poll open (one request per `waitTimeSeconds`).
   * @defaultValue `4`
   */
  maxConcurrentReceives?: number;
  /**
   * Seconds a received message stays invisible to other consumers (set on every receive, so the
   * queue's own default does not matter) and what each heartbeat extends it to. 1–43200.
   * @defaultValue `30`
   */
  visibilityTimeoutSeconds?: number;
  /**
   * Seconds between visibility heartbeats while a handler runs; fractions allowed (at least 0.1).
   * Must be shorter than `visibilityTimeoutSeconds`, with room for one failed request.
   * @defaultValue `visibilityTimeoutSeconds / 3`
   */
  heartbeatIntervalSeconds?: number;
  /**
   * An SQS queue that dead events are also sent to (the body exactly as received, with message
   * attributes `partner_events_code`, `partner_events_reason`, …), before the message is deleted.
   * The dead-letter file is written either way. FIFO DLQs (`.fifo`) are supported.
   * @defaultValue none: dead events go to the dead-letter file only
   */
  deadLetterQueueUrl?: string;
  /**
   * Milliseconds acks are gathered before one `DeleteMessageBatch` (sent at once when 10 are
   * waiting). Visibility changes (retries, heartbeats) are gathered the same way. 0–1000.
   * @defaultValue `5`
   */
  deleteBatchDelayMs?: number;
  /**
   * Attempts per settle or heartbeat request (the SDK's own retries come on top of these) before
   * the error is thrown to the consumer, which logs it; the message then reappears when its
   * visibility expires. Entries that failed inside a batch are retried, the last time one by one.
   * @defaultValue `3`
   */
  settleAttempts?: number;
  /**
   * Name in logs and dead-letter records.
   * @defaultValue `sqs:<queue name>`
   */
  name?: string;
  /**
   * A pino logger for what the adapter does on its own (retried settles, released messages).
   * Failures it throws are logged by the consumer.
   * @defaultValue silent
   */
  logger?: Logger;
}

/**
 * The options a config file may set (the sidecar's `sqs` section): all but the queue, the client,
 * the name and the logger. Meanings as in `SqsAdapterOptions`.
 */
export const sqsTuningSchema = z.strictObject({
  deadLetterQueueUrl: z.string().refine(isHttpUrl, 'must be an http(s) SQS queue URL').optional(),
  waitTimeSeconds: z.number().int().min(0).max(20).default(20),
  batchSize: z.number().int().min(1).max(SQS_MAX_BATCH).default(SQS_MAX_BATCH),
  maxConcurrentReceives: z.number().int().min(1).max(16).default(4),
  visibilityTimeoutSeconds: z.number().int().min(1).max(SQS_MAX_VISIBILITY_SECONDS).default(30),
  heartbeatIntervalSeconds: z.number().min(0.1).optional(),
  deleteBatchDelayMs: z.number().min(0).max(1000).default(5),
  settleAttempts: z.number().int().min(1).max(10).default(3),
});

export type SqsTuning = z.input<typeof sqsTuningSchema>;

const schema = sqsTuningSchema
  .extend({
    queueUrl: z.string().refine(isHttpUrl, 'must be an http(s) SQS queue URL'),
    name: z.string().min(1).optional(),
  })
  .refine(
    (o) =>
      o.heartbeatIntervalSeconds === undefined || o.heartbeatIntervalSeconds < o.visibilityTimeoutSeconds,
    { message: 'must be shorter than visibilityTimeoutSeconds', path: ['heartbeatIntervalSeconds'] },
  );

export interface ResolvedSqsOptions {
  readonly queueUrl: string;
  readonly deadLetterQueueUrl: string | undefined;
  readonly waitTimeSeconds: number;
  readonly batchSize: number;
  readonly maxConcurrentReceives: number;
  readonly visibilityTimeoutSeconds: number;
  readonly heartbeatIntervalSeconds: number;
  readonly deleteBatchDelayMs: number;
  readonly settleAttempts: number;
  readonly name: string;
}

/** Validates the options, filling in defaults; throws a `ConfigError` naming each bad field. */
export function resolveSqsOptions(options: SqsAdapterOptions): ResolvedSqsOptions {
  const { client: _client, logger: _logger, ...plain } = options;
  const result = schema.safeParse(plain);
  if (!result.success) {
    throw new ConfigError(`invalid SQS adapter options:\n${z.prettifyError(result.error)}`, {
      details: { issues: result.error.issues },
    });
  }
  const o = result.data;
  return {
    queueUrl: o.queueUrl,
    deadLetterQueueUrl: o.deadLetterQueueUrl,
    waitTimeSeconds: o.waitTimeSeconds,
    batchSize: o.batchSize,
    maxConcurrentReceives: o.maxConcurrentReceives,
    visibilityTimeoutSeconds: o.visibilityTimeoutSeconds,
    heartbeatIntervalSeconds: o.heartbeatIntervalSeconds ?? o.visibilityTimeoutSeconds / 3,
    deleteBatchDelayMs: o.deleteBatchDelayMs,
    settleAttempts: o.settleAttempts,
    name: o.name ?? `sqs:${queueNameOf(o.queueUrl)}`,
  };
}

/** The last path segment of a queue URL (`…/123456789012/orders.fifo` → `orders.fifo`). */
export function queueNameOf(queueUrl: string): string {
  const path = new URL(queueUrl).pathname.replace(/\/+$/, '');
  return path.slice(path.lastIndexOf('/') + 1) || redact(queueUrl);
}

export function isFifoQueue(queueUrl: string): boolean {
  return queueNameOf(queueUrl).endsWith('.fifo');
}

function isHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return (url.protocol === 'https:' || url.protocol === 'http:') && url.pathname.length > 1;
  } catch {
    return false;
  }
}
