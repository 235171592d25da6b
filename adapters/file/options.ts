import { z } from 'zod';

/** The file source's options, each default documented here only. */
export const fileSourceOptionsSchema = z.strictObject({
  /** A JSONL file: one envelope per line, or dead-letter records written by this kit. Required. */
  path: z.string().min(1),
  /** For logs and dead-letter records. Default `file:<path>`. */
  name: z.string().min(1).optional(),
});

export type FileSourceOptions = z.input<typeof fileSourceOptionsSchema>;
