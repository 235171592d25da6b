/**
 * The SQLite store's claim and complete statements (SQLITE_STATEMENTS, bare: 64 claims in one
 * transaction, then their 64 completes in one) against a `dedupe` table that already holds a
 * retention's worth of done events, for two page sizes. The pipeline section of `npm run bench`
 * starts each run on an empty file; a worker that has run for a week holds rate × 7 days of done
 * events (10 events/s: 6 million), and random event ids then spread each batch over that whole
 * B-tree. Prints µs per event (wall and CPU) per table size and page size, and 4 KiB ÷ 1 KiB.
 *
 *   npx tsx bench/sqlite-table-size.ts [--rows 20000,500000] [--events 20000] [--reps 2]
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_RETENTION_MS } from '../src/dedupe/types.js';
import { median, repetitionOrder, table } from './stats.js';
import { fillDoneEvents, openStoreFileBare } from './store-file.js';

const { values } = parseArgs({
  options: {
    rows: { type: 'string', default: '20000,500000' },
    events: { type: 'string', default: '20000' },
    reps: { type: 'string', default: '2' },
  },
});
const TABLE_SIZES = (values.rows ?? '').split(',').map(Number);
const EVENTS = Number(values.events);
const REPS = Number(values.reps);
const PAGE_SIZES = [1024, 4096] as const;
const BATCH = 64;

interface Timed {
  readonly wallUs: number;
  readonly cpuUs: number;
}

/** `EVENTS` first deliveries through claim and complete, 64 per transaction each. */
async function runOnce(dir: string, pageSize: number, rows: number): Promise<Timed> {
  const path = join(dir, `dedupe-${pageSize}-${rows}.sqlite`);
  const { db, claimBatch, completeBatch } = await openStoreFileBare(path, { pageSize });
  fillDoneEvents(db, rows);
  try {
    const ids = Array.from({ length: EVENTS }, () => `evt_${randomUUID()}`);
    const tokens = ids.map(() => 'bench-token');
    const cpu = process.cpuUsage();
    const started = performance.now();
    for (let i = 0; i < EVENTS; i += BATCH) {
      const batch = ids.slice(i, i + BATCH);
      const now = Date.now();
      const batchTokens = tokens.slice(i, i + BATCH);
      claimBatch.immediate(batch, batchTokens, now);
      completeBatch.immediate(batch, batchTokens, now + DEFAULT_RETENTION_MS);
    }
    const wallUs = ((performance.now() - started) * 1000) / EVENTS;
    const used = process.cpuUsage(cpu);
    return { wallUs, cpuUs: (used.user + used.system) / EVENTS };
  } finally {
    db.close();
    for (const file of [path, `${path}-wal`, `${path}-shm`]) rmSync(file, { force: true });
  }
}

const dir = mkdtempSync(join(tmpdir(), 'phe-table-size-'));
try {
  console.log(
    `SQLite store, claim + complete (SQLITE_STATEMENTS, ${BATCH} per transaction), ${EVENTS.toLocaleString('en-US')} new events ` +
      `into a table already holding N done events; median of ${REPS} alternating repetitions, a fresh file each`,
  );
  const rowsOut: string[][] = [
    ['done events already', 'page', 'µs/event (wall)', 'CPU µs/event', '4 KiB ÷ 1 KiB (wall)', 'by CPU'],
  ];
  for (const rows of TABLE_SIZES) {
    const timed: Record<number, Timed[]> = { 1024: [], 4096: [] };
    const sides = PAGE_SIZES.map((pageSize) => async () => {
      timed[pageSize]?.push(await runOnce(dir, pageSize, rows));
    });
    for (let r = 0; r < REPS; r++) for (const side of repetitionOrder(sides, r)) await side();
    const wall = (p: number) => median((timed[p] ?? []).map((t) => t.wallUs));
    const cpu = (p: number) => median((timed[p] ?? []).map((t) => t.cpuUs));
    for (const pageSize of PAGE_SIZES) {
      const ratio = pageSize === 4096;
      rowsOut.push([
        rows.toLocaleString('en-US'),
        `${pageSize / 1024} KiB`,
        wall(pageSize).toFixed(1),
        cpu(pageSize).toFixed(1),
        ratio ? (wall(4096) / wall(1024)).toFixed(2) : '',
        ratio ? (cpu(4096) / cpu(1024)).toFixed(2) : '',
      ]);
    }
  }
  console.log(table(rowsOut));
  console.log('    below 1.00: 4 KiB pages cost less per event than 1 KiB pages');
} finally {
  rmSync(dir, { recursive: true, force: true });
}
