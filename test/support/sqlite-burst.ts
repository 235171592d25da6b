/**
 * A separate process that puts a burst on the SQLite dedupe store, as a sidecar does when it
 * starts on a backlog (used by test/sqlite-driver.test.ts). Usage:
 *
 *   node --import tsx test/support/sqlite-burst.ts <db> <claims>
 *
 * Opens the store, claims `claims` ids in one tick (one group commit), expires and purges them,
 * closes the store and prints one JSON line: `{ claimed, purged }`. Exit code 0 when all of that
 * ran; on Node 24.19+ with better-sqlite3 12 the process aborted instead (SIGABRT from a native
 * assertion when V8 collected a statement).
 */
import { SqliteDedupeStore } from '../../src/dedupe/sqlite.js';

const [path, claimsText = '12000'] = process.argv.slice(2);
if (!path) throw new Error('usage: sqlite-burst.ts <db> <claims>');
const claims = Number(claimsText);

const LEASE_MS = 1000;
let now = Date.UTC(2026, 0, 1);
const store = new SqliteDedupeStore({ path, now: () => now });
const results = await Promise.all(
  Array.from({ length: claims }, (_, i) => store.claim(`evt-${i}`, LEASE_MS)),
);
now += 2 * 24 * 3_600_000; // past the lease and the memory of abandoned claims
const purged = store.purgeExpired();
await store.close();
process.stdout.write(
  `${JSON.stringify({ claimed: results.filter((r) => r.status === 'claimed').length, purged })}\n`,
);
