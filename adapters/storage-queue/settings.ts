import { z } from 'zod';
import { ConfigError } from '../../src/core/errors.js';

/** Storage Queue's limits: 32 messages per Get Messages call, visibility at most 7 days. */
export const MAX_MESSAGES_PER_RECEIVE = 32;
export const MAX_VISIBILITY_SECONDS = 7 * 24 * 3600;

/**
 * The adapter's tunable settings. Every field has a default; `z.input` is what callers pass.
 * The JSDoc here is what editors show for the options.
 */
export const storageQueueTuningSchema = z.object({
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
});

/** With the checks across fields. */
export const storageQueueSettingsSchema = storageQueueTuningSchema.check((ctx) => {
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

export type StorageQueueSettingsInput = z.input<typeof storageQueueSettingsSchema>;

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
export function parseStorageQueueSettings(input: StorageQueueSettingsInput): StorageQueueSettings {
  const result = storageQueueSettingsSchema.safeParse(input);
  if (!result.success) {
    throw new ConfigError(`invalid Storage Queue adapter options:\n${z.prettifyError(result.error)}`, {
      details: { issues: result.error.issues },
    });
  }
  const { heartbeatIntervalSeconds, ...s } = result.data;
  return { ...s, heartbeatIntervalMs: (heartbeatIntervalSeconds ?? s.visibilityTimeoutSeconds / 3) * 1000 };
}
