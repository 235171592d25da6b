import { z } from 'zod';

/** The memory source's options, each default documented here only. */
export const memorySourceOptionsSchema = z.strictObject({
  /** For logs and dead-letter records. Default `memory`. */
  name: z.string().min(1).default('memory'),
  /** `receive` returns `null` (source exhausted) once nothing is queued, delayed or in flight. Default false. */
  endWhenEmpty: z.boolean().default(false),
  /** Clock in ms for the enqueue stamp, for tests. Default `Date.now`. */
  now: z
    .custom<() => number>((value) => typeof value === 'function', 'must be a function')
    .default(() => Date.now),
});

export type MemorySourceOptions = z.input<typeof memorySourceOptionsSchema>;
