/**
 * WAL pages the SQLite dedupe store writes for a batch of 64 first claims and for their 64
 * completes, in a file already holding 8,000 done events (so random ids fall on different pages):
 * what a commit costs is mostly the pages it writes. Prints one line per round.
 *
 *   npx tsx bench/sqlite-frames.ts [--rounds 3]
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import Database from '../src/core/sqlite-driver.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import type { ClaimResult } from '../src/dedupe/types.js';

const { values } = parseArgs({ options: { rounds: { type: 'string', default: '3' } } });
const LEASE_MS = 60_000;
const RETENTION_MS = 7 * 86_400_000;
const BATCH = 64;

function tokenOf(result: ClaimResult): string {
  if (result.status !== 'claimed') throw new Error(`not claimed: ${result.status}`);
  return result.token;
}

const dir = mkdtempSync(join(tmpdir(), 'phe-frames-'));
try {
  const path = join(dir, 'dedupe.sqlite');
  const store = createSqliteDedupe({ path });
  const ids = (n: number) => Array.from({ length: n }, () => randomUUID());
  /** Claims `batch` in one turn, then completes it in one turn; WAL pages written by each. */
  const pairOfBatches = async (batch: string[], wal: () => number) => {
    const start = wal();
    const tokens = await Promise.all(batch.map(async (id) => tokenOf(await store.claim(id, LEASE_MS))));
    const claimed = wal();
    await Promise.all(batch.map((id, i) => store.complete(id, tokens[i] as string, RETENTION_MS)));
    return { claims: claimed - start, completes: wal() - claimed };
  };
  for (let i = 0; i < 2; i++) await pairOfBatches(ids(4000), () => 0);
  const pageSize = new Database(path, { readonly: true }).pragma('page_size', { simple: true }) as number;
  const checkpoint = new Database(path);
  checkpoint.pragma('wal_checkpoint(TRUNCATE)'); // an empty WAL: its growth counts every page
  checkpoint.close();
  const wal = () => Math.floor(statSync(`${path}-wal`).size / (24 + pageSize));
  for (let r = 0; r < Number(values.rounds); r++) {
    const { claims, completes } = await pairOfBatches(ids(BATCH), wal);
    console.log(`round ${r + 1}: ${BATCH} claims wrote ${claims} WAL pages, their completes ${completes}`);
  }
  await store.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
