import { randomUUID } from 'node:crypto';
import Database from '../src/core/sqlite-driver.js';
import { createSqliteDedupe, SQLITE_STATEMENTS } from '../src/dedupe/sqlite.js';
import { DEFAULT_RETENTION_MS } from '../src/dedupe/types.js';

const LEASE_MS = 60_000;
const FILL_TX = 50_000;

/**
 * For the floors: a database file made by the SQLite store itself (so tables, index, page size
 * and journal mode are exactly the store's), reopened bare with the store's connection pragmas,
 * and the store's own statements prepared on it (src/dedupe/sqlite.ts), with the claims and the
 * completes of one batch as one transaction each. `pageSize` makes a new file with that page size
 * instead of the store's (the first write fixes it, so an empty table is made first).
 */
export async function openStoreFileBare(path: string, options: { pageSize?: number } = {}) {
  if (options.pageSize !== undefined) {
    const first = new Database(path);
    first.pragma(`page_size = ${options.pageSize}`);
    first.exec('CREATE TABLE page_size_fixed (x)');
    first.close();
  }
  await createSqliteDedupe({ path }).close();
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('wal_autocheckpoint = 10000');
  db.pragma('cache_size = -32000');
  const claim = db.prepare(SQLITE_STATEMENTS.claimNew);
  const endLease = db.prepare(SQLITE_STATEMENTS.endLease);
  const recordDone = db.prepare(SQLITE_STATEMENTS.recordDone);
  return {
    db,
    claim,
    endLease,
    recordDone,
    /** First claims of `ids` with their `tokens`, one transaction; throws on a claim that missed. */
    claimBatch: db.transaction((ids: readonly string[], tokens: readonly string[], now: number) => {
      for (let i = 0; i < ids.length; i++) {
        const id = ids[i] as string;
        if (claim.run(id, tokens[i], now + LEASE_MS, id, now).changes !== 1) throw new Error('claim missed');
      }
    }),
    /** Their completes (lease ended, done record written), one transaction. */
    completeBatch: db.transaction((ids: readonly string[], tokens: readonly string[], expiresAt: number) => {
      for (let i = 0; i < ids.length; i++) {
        if (endLease.run(ids[i], tokens[i]).changes !== 1) throw new Error('complete missed');
        recordDone.run(ids[i], expiresAt);
      }
    }),
  };
}

/**
 * Adds `rows` done events with random ids (expiring after the default retention) to a store file
 * opened bare, then checkpoints the WAL into the file: what a worker's file holds after days of
 * its retention.
 */
export function fillDoneEvents(db: Database.Database, rows: number): void {
  const insert = db.prepare(
    "INSERT INTO dedupe (event_id, done, token, expires_at, claims) VALUES (?, 1, '', ?, 1)",
  );
  const expiresAt = Date.now() + DEFAULT_RETENTION_MS;
  for (let done = 0; done < rows; done += FILL_TX) {
    const n = Math.min(FILL_TX, rows - done);
    db.transaction(() => {
      for (let i = 0; i < n; i++) insert.run(`evt_${randomUUID()}`, expiresAt);
    })();
  }
  db.pragma('wal_checkpoint(TRUNCATE)');
}

/** A store file (made by the store: its tables, pragmas and page size) holding `rows` done events. */
export async function prefilledStoreFile(path: string, rows: number): Promise<void> {
  const { db } = await openStoreFileBare(path);
  try {
    fillDoneEvents(db, rows);
  } finally {
    db.close();
  }
}
