import { z } from 'zod';

/** What the CLI accepts as an event hub name (letters, digits, `.`, `_`, `-`; no leading symbol). */
export const HUB_NAME = /^[A-Za-z0-9][\w.-]*$/;

/**
 * The Event Hubs options a config file may set (the sidecar's `eventHubs` section). Meanings and
 * defaults as in `EventHubsAdapterOptions`; left unset, the adapter's defaults apply.
 */
export const eventHubsTuningSchema = z.strictObject({
  /** A hub in the same namespace that also receives each dead event. */
  poisonHub: z.string().regex(HUB_NAME, 'must be an event hub name').optional(),
  /** Where a partition without a checkpoint starts. */
  startPosition: z.enum(['earliest', 'latest']).optional(),
  partitionBatchSize: z.number().int().positive().optional(),
  maxWaitTimeInSeconds: z.number().positive().optional(),
  checkpointEvery: z.number().int().positive().optional(),
  checkpointIntervalMs: z.number().int().positive().optional(),
});

export type EventHubsTuning = z.output<typeof eventHubsTuningSchema>;
