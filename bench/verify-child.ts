/**
 * Runs the verify section's rounds for one body size in its own process, so that each process's
 * own way of compiling the verifiers counts as one draw among several (`bench/run.ts` forks a
 * few per size and pools their rounds with `summariseVerify`). It can also be run alone:
 *
 *   npx tsx bench/verify-child.ts --size "300 B" --rounds 16 --round-ms 25
 */
import { parseArgs } from 'node:util';
import { runVerifyBench } from './verify.js';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: '300 B' },
    rounds: { type: 'string', default: '16' },
    'round-ms': { type: 'string', default: '25' },
    'warmup-ms': { type: 'string', default: '200' },
    pool: { type: 'string', default: '64' },
  },
});

const [samples] = runVerifyBench({
  sizes: [values.size],
  rounds: Number(values.rounds),
  roundMs: Number(values['round-ms']),
  warmupMs: Number(values['warmup-ms']),
  pool: Number(values.pool),
});
if (!samples) throw new Error(`no verify size called "${values.size}"`);

if (process.send) {
  process.send(samples, () => process.exit(0));
} else {
  console.log(JSON.stringify(samples));
}
