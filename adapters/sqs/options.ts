import type { SQSClient } from '@aws-sdk/client-sqs';
import type { Logger } from 'pino';
import { z } from 'zod';
import { parseAdapterOptions } from '../../src/core/adapter-options.js';
import { redact } from '../../src/core/redact.js';

/** SQS caps: messages per receive and entries per batch call. */
export const SQS_MAX_BATCH = 10;
/** SQS caps a visibility timeout at 12 hours. */
export const SQS_MAX_VISIBILITY_SECONDS = 43_200;

// The shape apart from the schema, so that the published types keep each option's JSDoc.
const sqsOptionsShape = {
  /**
   * An SQS queue that dead events are also sent to (the body exactly as received, with message
   * attributes `partner_events_code`, `partner_events_reason`, …), before the message is deleted.
   * The dead-letter file is written either way. FIFO queues (`.fifo`) are supported.
   * Default: none (dead events go to the dead-letter file only).
   */
  deadLetterQueue: z.string().refine(isHttpUrl, 'must be an http(s) SQS queue URL').optional(),
  /**
   * Long-poll wait of each `ReceiveMessage`, 0–20 s. Also bounds how long a message that arrives
   * just after `stop()` may be held by the abandoned poll (see docs/adapters/sqs.md). Default 20.
   */
  waitTimeSeconds: z.number().int().min(0).max(20).default(20),
  /**
   * Most messages per `ReceiveMessage`, 1–10 (the SQS limit). How many messages are handled at
   * once is the consumer's `concurrency`, independent of this. Default 10.
   */
  batchSize: z.number().int().min(1).max(SQS_MAX_BATCH).default(SQS_MAX_BATCH),
  /**
   * Most `ReceiveMessage` calls in flight at once, 1–16. The consumer runs
   * `min(this, ceil(concurrency / batchSize))` pollers, so that with a `concurrency` of several
   * batches the slots are refilled without waiting a round trip per batch. Each idle poller holds
   * one long poll open (one request per `waitTimeSeconds`). Default 4.
   */
  maxConcurrentReceives: z.number().int().min(1).max(16).default(4),
  /**
   * Seconds a received message stays invisible to other consumers (set on every receive, so the
   * queue's own default does not matter) and what each heartbeat extends it to, 1–43200.
   * Default 30.
   */
  visibilityTimeoutSeconds: z.number().int().min(1).max(SQS_MAX_VISIBILITY_SECONDS).default(30),
  /**
   * Seconds between visibility heartbeats while a handler runs; fractions allowed (at least 0.1).
   * Must be shorter than `visibilityTimeoutSeconds`, with room for one failed request.
   * Default: `visibilityTimeoutSeconds / 3`.
   */
  heartbeatIntervalSeconds: z.number().min(0.1).optional(),
  /**
   * Milliseconds acks are gathered before one `DeleteMessageBatch` (sent at once when 10 are
   * waiting), 0–1000. Visibility changes (retries, heartbeats) are gathered the same way. Default 5.
   */
  deleteBatchDelayMs: z.number().min(0).max(1000).default(5),
  /**
   * Attempts per settle or heartbeat request (the SDK's own retries come on top of these), 1–10,
   * before the error is thrown to the consumer, which logs it; the message then reappears when its
   * visibility expires. Entries that failed inside a batch are retried, the last time one by one.
   * Default 3.
   */
  settleAttempts: z.number().int().min(1).max(10).default(3),
};

/**
 * The SQS adapter's options that a config file may hold (the sidecar's `sqs` section,
 * `PARTNER_EVENTS_SQS_*`), each default documented here only.
 */
export const sqsOptionsSchema: z.ZodObject<typeof sqsOptionsShape, z.core.$strict> =
  z.strictObject(sqsOptionsShape);

/** What `createSqsAdapter` takes: the schema's options, plus what a config file cannot hold. */
export type SqsAdapterOptions = z.input<typeof sqsOptionsSchema> & {
  /**
   * The queue to consume, e.g. `https://sqs.eu-west-1.amazonaws.com/123456789012/partner-events`.
   * Required.
   */
  queueUrl: string;
  /**
   * An `SQSClient` of your own (custom credentials, endpoint, retry strategy, middleware). The
   * adapter never destroys a client it was given. Default: `new SQSClient({})`, the SDK's
   * standard configuration (credential chain, `AWS_REGION`, `AWS_ENDPOINT_URL_SQS` /
   * `AWS_ENDPOINT_URL`), destroyed by `close()`.
   */
  client?: SQSClient;
  /** Name in logs and dead-letter records. Default `sqs:<queue name>`. */
  name?: string;
  /**
   * A pino logger for what the adapter does on its own (retried settles, released messages).
   * Failures it throws are logged by the consumer. Default: silent.
   */
  logger?: Logger;
};

const schema = sqsOptionsSchema
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
  readonly deadLetterQueue: string | undefined;
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
  const o = parseAdapterOptions(schema, plain, 'SQS adapter');
  return {
    queueUrl: o.queueUrl,
    deadLetterQueue: o.deadLetterQueue,
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
