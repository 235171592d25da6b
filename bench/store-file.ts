import { randomUUID } from 'node:crypto';
import Database from '../src/core/sqlite-driver.js';
import { createSqliteDedupe, SQLITE_STATEMENTS } from '../src/dedupe/sqlite.js';

/**
 * For the floors: a database file made by the SQLite store itself (so tables, index, page size
 * and journal mode are exactly the store's), reopened bare with the store's connection pragmas,
 * and the store's own statements prepared on it (src/dedupe/sqlite.ts).
 */
export async function openStoreFileBare(path: string) {
  await createSqliteDedupe({ path }).close();
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('wal_autocheckpoint = 10000');
  db.pragma('cache_size = -32000');
  return {
    db,
    claim: db.prepare(SQLITE_STATEMENTS.claimNew),
    endLease: db.prepare(SQLITE_STATEMENTS.endLease),
    recordDone: db.prepare(SQLITE_STATEMENTS.recordDone),
  };
}

const RETENTION_MS = 7 * 86_400_000;
const FILL_TX = 50_000;

/**
 * Adds `rows` done events with random ids (expiring in a week) to a store file opened bare, then
 * checkpoints the WAL into the file: what a worker's file holds after days of its retention.
 */
export function fillDoneEvents(db: Database.Database, rows: number): void {
  const insert = db.prepare(
    "INSERT INTO dedupe (event_id, done, token, expires_at, claims) VALUES (?, 1, '', ?, 1)",
  );
  const expiresAt = Date.now() + RETENTION_MS;
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
