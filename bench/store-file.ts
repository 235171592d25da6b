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
