import type { QueueClient } from '@azure/storage-queue';
import type { Logger } from 'pino';
import { z } from 'zod';
import { parseAdapterOptions } from '../../src/core/adapter-options.js';
import type { StorageQueueTarget } from './queue-address.js';

/** Storage Queue's limits: 32 messages per Get Messages call, visibility at most 7 days. */
export const MAX_MESSAGES_PER_RECEIVE = 32;
export const MAX_VISIBILITY_SECONDS = 7 * 24 * 3600;

// The shape apart from the schema, so that the published types keep each option's JSDoc.
const storageQueueOptionsShape = {
  /** Messages asked for per receive call, 1–32. Default 32. The consumer's `concurrency` still caps how many run at once. */
  numberOfMessages: z.number().int().min(1).max(MAX_MESSAGES_PER_RECEIVE).default(MAX_MESSAGES_PER_RECEIVE),
  /** How long a received message stays invisible to other consumers, in seconds (1 s – 7 days). Default 30. */
  visibilityTimeoutSeconds: z.number().int().min(1).max(MAX_VISIBILITY_SECONDS).default(30),
  /**
   * How often a message still being handled gets its visibility extended (to `visibilityTimeoutSeconds`
   * from then), in seconds. Must be shorter than the visibility timeout. Default: a third of it.
   */
  heartbeatIntervalSeconds: z.number().positive().optional(),
  /** First wait after a receive came back empty, in ms; it doubles on each empty receive. Default 200. */
  pollIntervalMs: z.number().int().nonnegative().default(200),
  /** The longest wait between receives of an empty queue, in ms. Default 10 000. */
  maxPollIntervalMs: z.number().int().nonnegative().default(10_000),
  /**
   * How the message text maps to the envelope text. Default `'auto'`.
   * - `'auto'`: text that opens with `{` is the envelope; otherwise, base64 of UTF-8 text that
   *   opens with `{` is decoded; anything else is delivered as it is (and rejected by the pipeline, usually as MALFORMED_ENVELOPE).
   * - `'base64'`: always decode (Azure Functions, .NET `QueueMessageEncoding.Base64`).
   * - `'none'`: never decode (the JS SDK's `sendMessage(text)`).
   */
  encoding: z.enum(['auto', 'base64', 'none']).default('auto'),
  /**
   * The longest wait for one call to the service (SDK retries included), in ms. Default 10 000.
   * The SDK sets no client-side timeout, so without this a stalled connection hangs a receive,
   * heartbeat or settle for good.
   */
  requestTimeoutMs: z.number().int().positive().default(10_000),
};

/**
 * The Storage Queue adapter's options that a config file may hold (the sidecar's `storageQueue`
 * section, `PARTNER_EVENTS_STORAGE_QUEUE_*`), each default documented here only: this JSDoc is
 * what editors show for `StorageQueueAdapterOptions`. Not strict: the adapter's options also name
 * the queue (the sidecar's section is strict).
 */
export const storageQueueOptionsSchema: z.ZodObject<typeof storageQueueOptionsShape, z.core.$strip> =
  z.object(storageQueueOptionsShape);

/** With the checks across fields. */
const storageQueueSettingsSchema = storageQueueOptionsSchema.check((ctx) => {
  const s = ctx.value;
  if (s.heartbeatIntervalSeconds !== undefined && s.heartbeatIntervalSeconds >= s.visibilityTimeoutSeconds) {
    ctx.issues.push({
      code: 'custom',
      input: s.heartbeatIntervalSeconds,
      path: ['heartbeatIntervalSeconds'],
      message: `must be shorter than visibilityTimeoutSeconds (${s.visibilityTimeoutSeconds}), or the message becomes visible between beats`,
    });
  }
  if (s.maxPollIntervalMs < s.pollIntervalMs) {
    ctx.issues.push({
      code: 'custom',
      input: s.maxPollIntervalMs,
      path: ['maxPollIntervalMs'],
      message: `must be at least pollIntervalMs (${s.pollIntervalMs})`,
    });
  }
});

/** What `createStorageQueueAdapter` takes: which queue, the schema's options, and what a file cannot hold. */
export type StorageQueueAdapterOptions = StorageQueueTarget &
  z.input<typeof storageQueueOptionsSchema> & {
    /**
     * Where dead events go besides the dead-letter file, before they are deleted: a queue name in
     * the same account, a client of your own, or `false` for none. Default `<queue>-poison` (the
     * Azure Functions convention), created on first use if missing.
     */
    readonly deadLetterQueue?: string | false | QueueClient;
    /** For logs and dead-letter records. Default `azure-storage-queue:<queue>`. */
    readonly name?: string;
    /** A pino logger. Default: pino at `LOG_LEVEL` (info). */
    readonly logger?: Logger;
  };

export interface StorageQueueSettings {
  readonly numberOfMessages: number;
  readonly visibilityTimeoutSeconds: number;
  readonly heartbeatIntervalMs: number;
  readonly pollIntervalMs: number;
  readonly maxPollIntervalMs: number;
  readonly encoding: 'auto' | 'base64' | 'none';
  readonly requestTimeoutMs: number;
}

/** Validates the settings (a `ConfigError` names each bad field) and fills in the defaults. */
export function parseStorageQueueSettings(input: StorageQueueAdapterOptions): StorageQueueSettings {
  const { heartbeatIntervalSeconds, ...s } = parseAdapterOptions(
    storageQueueSettingsSchema,
    input,
    'Storage Queue adapter',
  );
  return { ...s, heartbeatIntervalMs: (heartbeatIntervalSeconds ?? s.visibilityTimeoutSeconds / 3) * 1000 };
}
