import { z } from 'zod';

// The shape apart from the schema, so that the published types keep each option's JSDoc.
const standInOptionsShape = {
  /** Most messages one `receive` returns, 1–100. Default 10. */
  maxBatchSize: z.number().int().min(1).max(100).default(10),
  /** How long an empty directory is left before it is read again, in ms. Default 50. */
  pollIntervalMs: z.number().int().positive().default(50),
  /** Whether `receive` ends the source once the directory is empty and nothing is in flight. Default false. */
  endWhenEmpty: z.boolean().default(false),
};

/**
 * The stand-in's options: one schema for the library factory and the sidecar config
 * (`standIn.*`, `PARTNER_EVENTS_STAND_IN_*`); each default is documented here only.
 */
export const standInOptionsSchema: z.ZodObject<typeof standInOptionsShape, z.core.$strict> =
  z.strictObject(standInOptionsShape);

export type StandInOptions = z.input<typeof standInOptionsSchema> & {
  /** The spool directory: one `*.json` file per envelope. Required. */
  readonly directory: string;
};
