/**
 * Bytes allocated per event, by the function that allocated them, for the pipeline and for
 * floor+c: V8's sampling heap profiler over one run, counting objects the garbage collector has
 * already freed too (what the collector pays for, not only what stays). Run after a warm-up run,
 * so the figures are those of optimized code.
 *
 *   node --expose-gc --import tsx bench/allocations.ts [--size 300B] [--n 20000] [--top 25]
 */
import { Session } from 'node:inspector/promises';
import { parseArgs } from 'node:util';
import { makeEnvelopes, sizeByLabel } from './fixtures.js';
import { floorBatchFor, runFloorOnce, runPipelineOnce } from './pipeline.js';
import { fmtInt, table } from './stats.js';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: '300B' },
    n: { type: 'string', default: '20000' },
    top: { type: 'string', default: '25' },
  },
});

interface ProfileNode {
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly selfSize: number;
  readonly children: readonly ProfileNode[];
}

const n = Number(values.n);
const size = sizeByLabel(values.size);
const raws = makeEnvelopes(size.bytes, n);
const concurrency = 64;
const sides = {
  pipeline: () => runPipelineOnce(raws, concurrency),
  'floor+c': () =>
    runFloorOnce(raws, { complete: true, batch: floorBatchFor(concurrency, (raws[0] as string).length) }),
} as const;

const session = new Session();
session.connect();
for (const [name, run] of Object.entries(sides)) {
  await run();
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 512,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  await run();
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as { profile: { head: ProfileNode } };
  const bySite = new Map<string, number>();
  let total = 0;
  const walk = (node: ProfileNode) => {
    const { functionName, url, lineNumber } = node.callFrame;
    if (node.selfSize > 0) {
      const where = url ? `${url.split('/').slice(-2).join('/')}:${lineNumber + 1}` : '(native)';
      const site = `${functionName || '(anonymous)'} ${where}`;
      bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize);
      total += node.selfSize;
    }
    for (const child of node.children) walk(child);
  };
  walk(profile.head);
  console.log(`\n${name}, ${size.label} bodies: ${fmtInt(total / n)} bytes allocated per event (sampled)`);
  const rows = [['bytes/event', 'allocated in']];
  const top = [...bySite].sort((a, b) => b[1] - a[1]).slice(0, Number(values.top));
  for (const [site, bytes] of top) rows.push([fmtInt(bytes / n), site]);
  console.log(table(rows));
}
session.disconnect();
