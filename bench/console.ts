/**
 * (g) The console's dead-letter table over a 100,000-line file: indexing it once, then serving a
 * page (newest first, a deep page, a filtered page), beside a baseline measured in the same run:
 * what answering one page costs without an index (read the whole file, parse every line).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { deadLetterRecord } from '../src/core/dead-letter-record.js';
import { DeadLetterIndex } from '../src/sidecar/console/dead-letter-index.js';

export interface ConsoleBenchResult {
  readonly lines: number;
  readonly fileBytes: number;
  readonly indexMs: number;
  readonly indexHeapBytes: number;
  readonly firstFilterMs: number;
  /** The event loop's longest pause during the first filter. */
  readonly longestPauseMs: number;
  readonly firstPageMs: number;
  readonly deepPageMs: number;
  readonly filteredPageMs: number;
  readonly appendedPageMs: number;
  readonly wholeFileMs: number;
}

const CODES = ['HANDLER_FAILED', 'SCHEMA_INVALID', 'SIGNATURE_MISMATCH', 'TIMESTAMP_TOO_OLD'] as const;

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

function timed(repeat: number, fn: () => unknown): number {
  const runs: number[] = [];
  for (let i = 0; i < repeat; i++) {
    const start = performance.now();
    fn();
    runs.push(performance.now() - start);
  }
  return median(runs);
}

export async function runConsoleSection(options: { quick: boolean }): Promise<ConsoleBenchResult> {
  const lines = options.quick ? 20_000 : 100_000;
  const dir = mkdtempSync(join(tmpdir(), 'phe-bench-console-'));
  const file = join(dir, 'dead-letters.jsonl');
  try {
    const template = createTestEnvelope('daily.data.steps.created');
    const text: string[] = [];
    for (let i = 0; i < lines; i++) {
      const code = CODES[i % CODES.length] as (typeof CODES)[number];
      const verified = code === 'HANDLER_FAILED' || code === 'SCHEMA_INVALID';
      const record = deadLetterRecord(
        { id: `m-${i}`, body: Buffer.from(template.raw), attempt: 3 },
        {
          code,
          reason: `${code} (bench)`,
          ...(verified ? { eventId: `evt_${i}`, eventType: 'daily.data.steps.created' } : {}),
        },
        'sqs:bench',
      );
      text.push(`${JSON.stringify(record)}\n`);
    }
    writeFileSync(file, text.join(''));
    const fileBytes = text.reduce((n, l) => n + Buffer.byteLength(l), 0);

    globalThis.gc?.();
    const heapBefore = process.memoryUsage().heapUsed;
    const index = new DeadLetterIndex(file);
    const started = performance.now();
    index.refresh();
    const indexMs = performance.now() - started;
    globalThis.gc?.();
    const indexHeapBytes = process.memoryUsage().heapUsed - heapBefore;

    // Cold: right after indexing, nothing parsed yet.
    const firstPageMs = timed(1, () => index.page({}, 0, 50));
    const deepPageMs = timed(1, () => index.page({}, Math.floor(lines / 50) - 1, 50));
    // The first filtered page parses every line once; later ones use what it kept.
    // As the console does it: in chunks, the event loop free in between (its longest pause noted).
    const loop = monitorEventLoopDelay({ resolution: 5 });
    loop.enable();
    const filterStarted = performance.now();
    await index.summarizeAll();
    index.page({ codes: ['HANDLER_FAILED'] }, 0, 50);
    const firstFilterMs = performance.now() - filterStarted;
    loop.disable();
    const longestPauseMs = loop.max / 1e6;
    const filteredPageMs = timed(20, () =>
      index.page({ codes: ['SCHEMA_INVALID'], type: 'daily.data.*' }, 10, 50),
    );
    // A page after the worker appended one more letter: only the new line is read.
    const appendedPageMs = timed(5, () => {
      writeFileSync(file, text[0] as string, { flag: 'a' });
      index.page({}, 0, 50);
    });
    // Without an index: every page means reading and parsing the whole file.
    const wholeFileMs = timed(3, () =>
      readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as unknown)
        .slice(-50),
    );
    const result = {
      lines,
      fileBytes,
      indexMs,
      indexHeapBytes,
      firstFilterMs,
      longestPauseMs,
      firstPageMs,
      deepPageMs,
      filteredPageMs,
      appendedPageMs,
      wholeFileMs,
    };
    printConsoleSection(result);
    return result;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function printConsoleSection(r: ConsoleBenchResult): void {
  const ms = (v: number) => `${v.toFixed(2)} ms`;
  console.log(
    `\n(g) console: the dead-letter table over ${r.lines.toLocaleString('en')} lines (${(r.fileBytes / 1e6).toFixed(1)} MB)`,
  );
  console.log(
    `    index the file once (offsets)  ${ms(r.indexMs)}  (heap held by the index ≈ ${(r.indexHeapBytes / 1e6).toFixed(1)} MB${globalThis.gc ? '' : ', without --expose-gc: rough'})`,
  );
  console.log(
    `    first filter (parses each line) ${ms(r.firstFilterMs)}  (longest event-loop pause meanwhile: ${ms(r.longestPauseMs)})`,
  );
  console.log(`    first page (newest 50)         ${ms(r.firstPageMs)}`);
  console.log(`    last page                      ${ms(r.deepPageMs)}`);
  console.log(`    filtered page (code + type)    ${ms(r.filteredPageMs)}`);
  console.log(`    page after one more line       ${ms(r.appendedPageMs)}`);
  console.log(
    `    baseline: read + parse it all  ${ms(r.wholeFileMs)}   (baseline ÷ first page: ${(r.wholeFileMs / r.firstPageMs).toFixed(0)}×)`,
  );
}

export function consoleJson(r: ConsoleBenchResult | undefined) {
  if (!r) return null;
  const round = (v: number) => Number(v.toPrecision(3));
  return Object.fromEntries(Object.entries(r).map(([k, v]) => [k, round(v)]));
}
