/**
 * Compares the pipeline of this tree with the pipeline of another checkout (a change against its
 * parent, say) in ONE process: both trees' `runPipelineOnce` are imported side by side and run in
 * turn with both floors, the order reversed every other repetition. On a shared machine the speed
 * drifts by ±15 % between runs (docs/performance-log.md, "Another host"), so two trees measured
 * in two processes, minutes apart, cannot tell a 3 % change; paired runs seconds apart can.
 *
 *   git worktree add /tmp/before HEAD~1 && ln -s "$PWD/node_modules" /tmp/before/node_modules
 *   node --expose-gc --import tsx bench/ab.ts --base /tmp/before [--size 300B] [--n 20000] [--reps 12]
 *
 * Prints each side's median events/s and CPU µs per event, its ratios to both floors (medians of
 * the per-repetition ratios), and this tree against the base: the median of the paired CPU
 * differences and of the paired events/s ratios, with their quartiles.
 */
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { makeEnvelopes, sizeByLabel } from './fixtures.js';
import { floorBatchFor, runFloorOnce, runPipelineOnce } from './pipeline.js';
import { fmtFixed, fmtInt, median, runInterleaved, table } from './stats.js';

const { values } = parseArgs({
  options: {
    base: { type: 'string' },
    size: { type: 'string', default: '300B' },
    n: { type: 'string', default: '20000' },
    reps: { type: 'string', default: '12' },
    concurrency: { type: 'string', default: '64' },
  },
});
if (!values.base) throw new Error('--base DIR: the other checkout (with node_modules) to compare with');

interface Timed {
  readonly ms: number;
  readonly cpuUs: number;
}
type RunPipelineOnce = (raws: readonly string[], concurrency: number) => Promise<Timed>;

const base = (await import(resolve(values.base, 'bench/pipeline.ts'))) as {
  runPipelineOnce: RunPipelineOnce;
};
const n = Number(values.n);
const reps = Number(values.reps);
const concurrency = Number(values.concurrency);
const size = sizeByLabel(values.size);
const raws = makeEnvelopes(size.bytes, n);

const sides = {
  base: () => base.runPipelineOnce(raws, concurrency),
  'this tree': () => runPipelineOnce(raws, concurrency),
  floor: () =>
    runFloorOnce(raws, { complete: false, batch: floorBatchFor(concurrency, (raws[0] as string).length) }),
  'floor+c': () =>
    runFloorOnce(raws, { complete: true, batch: floorBatchFor(concurrency, (raws[0] as string).length) }),
} as const;
type Side = keyof typeof sides;
const names = Object.keys(sides) as Side[];
const timed = await runInterleaved(sides, reps, 2);

const perSec = (t: Timed) => (n / t.ms) * 1000;
const cpuPer = (t: Timed) => t.cpuUs / n;
const paired = (a: Side, b: Side, f: (x: Timed, y: Timed) => number) =>
  timed[a].map((t, i) => f(t, timed[b][i] as Timed));
const quartile = (values: readonly number[], q: number) => {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.round((sorted.length - 1) * q)] as number;
};

console.log(`${size.label} bodies, ${fmtInt(n)} events per run, ${reps} repetitions, medians\n`);
const rows = [['', 'events/s', 'CPU µs/event', '÷ floor', '÷ floor+c', '÷ floor (CPU)', '÷ floor+c (CPU)']];
for (const side of names) {
  rows.push([
    side,
    fmtInt(median(timed[side].map(perSec))),
    fmtFixed(median(timed[side].map(cpuPer)), 2),
    fmtFixed(median(paired(side, 'floor', (x, y) => perSec(x) / perSec(y))), 3),
    fmtFixed(median(paired(side, 'floor+c', (x, y) => perSec(x) / perSec(y))), 3),
    fmtFixed(median(paired(side, 'floor', (x, y) => cpuPer(y) / cpuPer(x))), 3),
    fmtFixed(median(paired(side, 'floor+c', (x, y) => cpuPer(y) / cpuPer(x))), 3),
  ]);
}
console.log(table(rows));
const cpuDiff = paired('this tree', 'base', (x, y) => cpuPer(x) - cpuPer(y));
const speed = paired('this tree', 'base', (x, y) => perSec(x) / perSec(y));
console.log(
  `\nthis tree − base: ${fmtFixed(median(cpuDiff), 2)} µs of CPU per event (quartiles ${fmtFixed(quartile(cpuDiff, 0.25), 2)} to ${fmtFixed(quartile(cpuDiff, 0.75), 2)})`,
);
console.log(
  `this tree ÷ base: ${fmtFixed(median(speed), 3)} by events/s (quartiles ${fmtFixed(quartile(speed, 0.25), 3)} to ${fmtFixed(quartile(speed, 0.75), 3)})`,
);
