import { z } from 'zod';

// The shape apart from the schema, so that the published types keep each option's JSDoc.
const memorySourceOptionsShape = {
  /** For logs and dead-letter records. Default `memory`. */
  name: z.string().min(1).default('memory'),
  /** `receive` returns `null` (source exhausted) once nothing is queued, delayed or in flight. Default false. */
  endWhenEmpty: z.boolean().default(false),
  /** Clock in ms for the enqueue stamp, for tests. Default `Date.now`. */
  now: z
    .custom<() => number>((value) => typeof value === 'function', 'must be a function')
    .default(() => Date.now),
};

/** The memory source's options, each default documented here only. */
export const memorySourceOptionsSchema: z.ZodObject<typeof memorySourceOptionsShape, z.core.$strict> =
  z.strictObject(memorySourceOptionsShape);

export type MemorySourceOptions = z.input<typeof memorySourceOptionsSchema>;
