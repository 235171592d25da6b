/**
 * Large events in a long-running worker: one consumer per process, fed chunk after chunk, as a
 * worker lives for days. `npm run bench`'s pipeline section cannot show this: each of its runs is
 * a fresh consumer over inputs built (and aged into V8's old generation) before the timing, and a
 * worker whose events in flight fill the young generation only settles into its slow state after
 * several thousand events (docs/performance-log.md, "Large events in a long run").
 *
 * Each configuration runs in its own process (the collector's state is what is measured). The
 * memory source gets each message as bytes, so its text is made when it is verified, new in the
 * young generation as a broker's message is. Chunks of `--chunk` distinct events are built and
 * signed outside the timing; the first two chunks are warm-up.
 *
 *   npx tsx bench/large-events.ts [--size 64KB] [--chunks 10] [--chunk 2000]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createMemorySource } from '../adapters/memory/index.js';
import { DEFAULT_MAX_IN_FLIGHT_BYTES } from '../src/consumer/settings.js';
import { EVENT_TYPE, makeEnvelopes, sizeByLabel } from './fixtures.js';
import { benchConsumer } from './pipeline.js';
import { fmtFixed, fmtInt, median, table } from './stats.js';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: '64KB' },
    chunks: { type: 'string', default: '10' },
    chunk: { type: 'string', default: '2000' },
    // One configuration, in this process (the parent runs each so).
    child: { type: 'boolean', default: false },
    concurrency: { type: 'string', default: '64' },
    'max-in-flight-bytes': { type: 'string' },
  },
});

interface ChildResult {
  /** Wall and CPU µs per event of each timed chunk (after the warm-up chunks). */
  readonly wallUs: number[];
  readonly cpuUs: number[];
  /** The most messages in flight during the timed chunks (read in the handler, every 16th event). */
  readonly peakInFlight: number;
}

const WARMUP_CHUNKS = 2;

async function runChild(): Promise<ChildResult> {
  const size = sizeByLabel(values.size);
  const perChunk = Number(values.chunk);
  const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});
  const dir = mkdtempSync(join(tmpdir(), 'phe-large-'));
  try {
    const source = createMemorySource();
    const maxInFlightBytes = values['max-in-flight-bytes'];
    const consumer = benchConsumer(source, dir, {
      concurrency: Number(values.concurrency),
      ...(maxInFlightBytes === undefined ? {} : { maxInFlightBytes: Number(maxInFlightBytes) }),
    });
    let handled = 0;
    let peakInFlight = 0;
    consumer.on(EVENT_TYPE, () => {
      // Read here, not by a timer: a batch of large events now goes from receipt to settle without
      // a turn of the event loop, so a timer would only ever see the moments between batches.
      if ((++handled & 15) === 0) peakInFlight = Math.max(peakInFlight, consumer.status.inFlight);
    });
    await consumer.start();
    const build = () => {
      const chunk = makeEnvelopes(size.bytes, perChunk).map((raw) => Buffer.from(raw));
      gc();
      return chunk;
    };
    const wallUs: number[] = [];
    const cpuUs: number[] = [];
    let next = build();
    const chunks = Number(values.chunks);
    for (let c = 0; c < chunks; c++) {
      const chunk = next;
      const target = handled + chunk.length;
      if (c === WARMUP_CHUNKS) peakInFlight = 0; // the first receive's full batch is not the steady state
      const cpu = process.cpuUsage();
      const started = performance.now();
      for (const body of chunk) source.send(body);
      while (handled < target) await new Promise((resolve) => setTimeout(resolve, 2));
      const ms = performance.now() - started;
      const used = process.cpuUsage(cpu);
      if (c >= WARMUP_CHUNKS) {
        wallUs.push((ms * 1000) / perChunk);
        cpuUs.push((used.user + used.system) / perChunk);
      }
      if (c + 1 < chunks) next = build();
    }
    await consumer.stop();
    return { wallUs, cpuUs, peakInFlight };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (values.child) {
  console.log(JSON.stringify(await runChild()));
} else {
  const self = fileURLToPath(import.meta.url);
  const configs = [
    { label: 'concurrency 64, no size bound', concurrency: 64, bound: 0 },
    {
      label: `concurrency 64, the default bound (${DEFAULT_MAX_IN_FLIGHT_BYTES / 1048576} MiB)`,
      concurrency: 64,
    },
    { label: 'concurrency 16 (the default), the default bound', concurrency: 16 },
  ];
  const { size, chunks, chunk } = values;
  console.log(
    `Large events in a long-running worker: ${size} bodies, ${chunks} chunks of ${chunk} events, one process per row,` +
      ` the first ${WARMUP_CHUNKS} chunks warm-up; medians of the rest\n`,
  );
  const results = configs.map((config) => {
    const args = ['--expose-gc', '--import', 'tsx', self, '--child', '--size', String(size)];
    args.push(
      '--chunks',
      String(chunks),
      '--chunk',
      String(chunk),
      '--concurrency',
      String(config.concurrency),
    );
    if (config.bound !== undefined) args.push('--max-in-flight-bytes', String(config.bound));
    const out = execFileSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 1 << 20 });
    return { config, result: JSON.parse(out.trim().split('\n').at(-1) as string) as ChildResult };
  });
  const baseline = results[1]?.result as ChildResult;
  const rows = [
    ['', 'µs/event', 'CPU µs/event', 'chunks (µs/event)', 'most in flight', '÷ default bound (CPU)'],
  ];
  for (const { config, result } of results) {
    rows.push([
      config.label,
      fmtInt(median(result.wallUs)),
      fmtInt(median(result.cpuUs)),
      `${fmtInt(Math.min(...result.wallUs))}–${fmtInt(Math.max(...result.wallUs))}`,
      String(result.peakInFlight),
      fmtFixed(median(baseline.cpuUs) / median(result.cpuUs), 2),
    ]);
  }
  console.log(table(rows));
  console.log(
    "\n÷ default bound (CPU) = its CPU per event ÷ this row's: below 1, this row costs more per event.",
  );
}
