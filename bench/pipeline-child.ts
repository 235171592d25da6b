/**
 * Runs section (b) for one body size in its own process (so memory figures and JIT/GC state of
 * one size do not leak into the next, and each process's way of compiling the code counts as one
 * draw among several: `bench/run.ts` forks a few per size and pools their repetitions with
 * `summarisePipeline`). It can also be run alone, e.g. to profile:
 *
 *   node --cpu-prof --expose-gc --import tsx bench/pipeline-child.ts --size 300B --n 20000 --only pipeline
 */
import { parseArgs } from 'node:util';
import { runPipelineSize } from './pipeline.js';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: '300 B' },
    n: { type: 'string', default: '20000' },
    reps: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '3000' },
    concurrency: { type: 'string', default: '64' },
    only: { type: 'string' },
    'compare-tracing': { type: 'boolean', default: false },
    control: { type: 'boolean', default: false },
    prefill: { type: 'string', default: '0' },
  },
});

const only = values.only === 'pipeline' || values.only === 'floor' ? values.only : undefined;
const result = await runPipelineSize({
  size: values.size,
  n: Number(values.n),
  reps: Number(values.reps),
  warmupN: Number(values.warmup),
  concurrency: Number(values.concurrency),
  only,
  compareTracing: values['compare-tracing'],
  control: values.control,
  prefill: Number(values.prefill),
});

if (process.send) {
  process.send(result, () => process.exit(0));
} else {
  console.log(JSON.stringify(result));
}
