import { z } from 'zod';

// The shape apart from the schema, so that the published types keep each option's JSDoc.
const fileSourceOptionsShape = {
  /** A JSONL file: one envelope per line, or dead-letter records written by this kit. Required. */
  path: z.string().min(1),
  /** For logs and dead-letter records. Default `file:<path>`. */
  name: z.string().min(1).optional(),
  /**
   * Read at most this many records (non-blank lines) from the start, and leave the rest of the
   * file unread (`replay FILE --max N`). Default: the whole file.
   */
  maxRecords: z.number().int().positive().optional(),
};

/** The file source's options, each default documented here only. */
export const fileSourceOptionsSchema: z.ZodObject<typeof fileSourceOptionsShape, z.core.$strict> =
  z.strictObject(fileSourceOptionsShape);

export type FileSourceOptions = z.input<typeof fileSourceOptionsSchema>;
