import { randomBytes } from 'node:crypto';
import { DedupeUnavailableError } from '../core/errors.js';
import { createPrivateFile } from '../core/private-file.js';
import Database from '../core/sqlite-driver.js';
import {
  ABANDONED_CLAIM_MEMORY_MS,
  type BatchCallOptions,
  type ClaimResult,
  type DedupeState,
  type DedupeStore,
  type HeldClaim,
} from './types.js';

export interface SqliteDedupeOptions {
  /** Database file; created 0600 with its folder when missing. Several processes on one host may share it. */
  path: string;
  /** How long a writer waits for another process's lock before the batch fails (retried). Default 5000. */
  busyTimeoutMs?: number;
  /** How often expired rows are purged. Default 10 minutes. */
  purgeIntervalMs?: number;
  /** Clock in ms, injectable for tests. */
  now?: () => number;
}

interface PendingOp {
  run(): unknown;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

const PURGE_BATCH = 5000;

/**
 * SQLite store (better-sqlite3, WAL, one file). Writes of all in-flight messages are
 * group-committed: every operation queued during one turn of the event loop runs in a single
 * `BEGIN IMMEDIATE` transaction, which is what makes the store fast (one commit per batch instead
 * of one per message) and safe across processes (the write lock is taken up front).
 */
export class SqliteDedupeStore implements DedupeStore {
  readonly persistence: { readonly kind: 'file'; readonly path: string };
  readonly #db: Database.Database;
  readonly #now: () => number;
  /**
   * Owner tokens: this store's random prefix and a counter. Short, because every lease row holds
   * one and the commit writes those rows (a token of 22 characters cost ~1 µs per event more
   * than one of 11); 48 random bits keep two stores on one file apart.
   */
  readonly #tokenPrefix = randomBytes(6).toString('base64url');
  #tokenSeq = 0;
  #queue: PendingOp[] = [];
  /** The flush scheduled for the next turn of the event loop, if any (cleared by `close`). */
  #flushInNextTurn: NodeJS.Immediate | undefined;
  /** A flush once the current code has run (a microtask) is scheduled. */
  #flushSoon = false;
  #closed = false;
  readonly #purgeTimer: NodeJS.Timeout;
  readonly #stmt: ReturnType<typeof prepareStatements>;
  readonly #runBatch: Database.Transaction<(ops: PendingOp[], results: unknown[]) => void>;

  constructor(options: SqliteDedupeOptions) {
    this.#now = options.now ?? Date.now;
    this.persistence = { kind: 'file', path: options.path };
    this.#db = openDatabase(options);
    this.#stmt = prepareStatements(this.#db);
    this.#runBatch = this.#db.transaction((ops: PendingOp[], results: unknown[]) => {
      for (let i = 0; i < ops.length; i++) results[i] = (ops[i] as PendingOp).run();
    });
    this.#purgeTimer = setInterval(() => this.purgeExpired(), options.purgeIntervalMs ?? 600_000);
    this.#purgeTimer.unref();
  }

  claim(eventId: string, leaseMs: number): Promise<ClaimResult> {
    return this.#enqueue(() => this.#claimOne(eventId, leaseMs, this.#now()));
  }

  /** One queued operation for the whole batch: one promise instead of one per event. */
  claimMany(
    eventIds: readonly string[],
    leaseMs: number,
    options?: BatchCallOptions,
  ): Promise<ClaimResult[]> {
    return this.#enqueue(() => {
      const now = this.#now();
      return eventIds.map((eventId) => this.#claimOne(eventId, leaseMs, now));
    }, options?.commitAtOnce === true);
  }

  extend(eventId: string, token: string, leaseMs: number): Promise<boolean> {
    return this.#enqueue(
      () => this.#stmt.extend.run(this.#now() + leaseMs, sqlId(eventId), token).changes === 1,
    );
  }

  complete(eventId: string, token: string, retentionMs: number): Promise<boolean> {
    return this.#enqueue(() => this.#completeOne(eventId, token, this.#now() + retentionMs));
  }

  completeMany(
    claims: readonly HeldClaim[],
    retentionMs: number,
    options?: BatchCallOptions,
  ): Promise<boolean[]> {
    return this.#enqueue(() => {
      const expiresAt = this.#now() + retentionMs;
      return claims.map((c) => this.#completeOne(c.eventId, c.token, expiresAt));
    }, options?.commitAtOnce === true);
  }

  release(eventId: string, token: string): Promise<void> {
    return this.#enqueue(() => {
      this.#stmt.endLease.run(sqlId(eventId), token);
    });
  }

  forget(eventId: string): Promise<boolean> {
    return this.#enqueue(() => this.#stmt.forget.run(sqlId(eventId), this.#now()).changes === 1);
  }

  peek(eventId: string): Promise<DedupeState> {
    // Through the queue, so it sees every operation issued before it.
    return this.#enqueue((): DedupeState => {
      const now = this.#now();
      const id = sqlId(eventId);
      const record = this.#stmt.record.get(id);
      if (record && record.expires_at > now) return record.done === 1 ? 'done' : 'in_progress';
      const lease = this.#stmt.lease.get(id);
      return lease && lease.expires_at > now ? 'in_progress' : 'absent';
    });
  }

  /** Deletes expired rows in small batches (so other writers are never blocked for long). */
  purgeExpired(): number {
    if (this.#closed) return 0;
    let total = 0;
    try {
      const now = this.#now();
      const dayAgo = now - ABANDONED_CLAIM_MEMORY_MS;
      total += inBatches((limit) => this.#stmt.purgeRecords.run(now, dayAgo, limit).changes);
      total += inBatches((limit) => this.#stmt.purgeLeases.run(dayAgo, limit).changes);
      return total;
    } catch {
      return total; // busy: the next interval tries again
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#flush();
    this.#closed = true;
    // Nothing left for it to do; pending, it would keep the store (and its owner) reachable a turn.
    if (this.#flushInNextTurn !== undefined) clearImmediate(this.#flushInNextTurn);
    this.#flushInNextTurn = undefined;
    clearInterval(this.#purgeTimer);
    this.#db.close();
  }

  #claimOne(eventId: string, leaseMs: number, now: number): ClaimResult {
    const token = this.#tokenPrefix + (++this.#tokenSeq).toString(36);
    const id = sqlId(eventId);
    // The common case, a first delivery: one statement, a lease row if the event is not done.
    if (this.#stmt.claimNew.run(id, token, now + leaseMs, id, now).changes === 1) {
      return { status: 'claimed', token, abandoned: 0 };
    }
    const record = this.#stmt.record.get(id);
    if (record && record.expires_at > now) {
      // done = 0 is a lease written by a version before leases had their own table.
      return record.done === 1
        ? { status: 'duplicate' }
        : { status: 'in_progress', retryAfterMs: record.expires_at - now };
    }
    const taken = this.#stmt.takeOver.get(token, now + leaseMs, id, now);
    if (taken) return { status: 'claimed', token, abandoned: taken.claims - 1 };
    const lease = this.#stmt.lease.get(id);
    if (!lease) return { status: 'in_progress', retryAfterMs: 0 }; // purged between the statements
    return { status: 'in_progress', retryAfterMs: lease.expires_at - now };
  }

  #completeOne(eventId: string, token: string, expiresAt: number): boolean {
    const id = sqlId(eventId);
    if (this.#stmt.endLease.run(id, token).changes !== 1) return false;
    this.#stmt.recordDone.run(id, expiresAt);
    return true;
  }

  /**
   * Queues `run` for the next commit: in the next turn of the event loop, shared with every call
   * made until then; or, `atOnce`, as soon as the current code has run (with the calls queued
   * before it, and any made meanwhile).
   */
  #enqueue<T>(run: () => T, atOnce = false): Promise<T> {
    if (this.#closed) return Promise.reject(new DedupeUnavailableError('SQLite dedupe store is closed'));
    return new Promise<T>((resolve, reject) => {
      this.#queue.push({ run, resolve: resolve as (value: unknown) => void, reject });
      if (atOnce) {
        if (!this.#flushSoon) {
          this.#flushSoon = true;
          queueMicrotask(this.#flushNow);
        }
      } else if (this.#flushInNextTurn === undefined) {
        this.#flushInNextTurn = setImmediate(this.#flushInTurn);
      }
    });
  }

  readonly #flushNow = (): void => {
    this.#flushSoon = false;
    this.#flush();
  };

  readonly #flushInTurn = (): void => {
    this.#flushInNextTurn = undefined;
    this.#flush();
  };

  /** Runs every queued call in one transaction (nothing when an earlier flush took them). */
  #flush(): void {
    const ops = this.#queue;
    if (ops.length === 0) return;
    this.#queue = [];
    const results: unknown[] = new Array(ops.length);
    try {
      this.#runBatch.immediate(ops, results);
    } catch (cause) {
      const error = new DedupeUnavailableError('SQLite dedupe write failed', { cause });
      for (const op of ops) op.reject(error);
      return;
    }
    for (let i = 0; i < ops.length; i++) (ops[i] as PendingOp).resolve(results[i]);
  }
}

export function createSqliteDedupe(options: SqliteDedupeOptions): SqliteDedupeStore {
  return new SqliteDedupeStore(options);
}

/** Runs `purge` (deleting at most `limit` rows) until it deletes fewer; returns the total. */
function inBatches(purge: (limit: number) => number): number {
  let total = 0;
  for (;;) {
    const changes = purge(PURGE_BATCH);
    total += changes;
    if (changes < PURGE_BATCH) return total;
  }
}

/** Opens (or creates, 0600) the database file with the store's settings and tables. */
function openDatabase(options: SqliteDedupeOptions): Database.Database {
  try {
    // Created 0600 first: SQLite gives the -wal and -shm files the database file's mode.
    if (options.path !== ':memory:') createPrivateFile(options.path);
    const db = new Database(options.path);
    const busyTimeoutMs = options.busyTimeoutMs ?? 5000;
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    // SQLite's own default, set for new files (an existing file keeps its size). 1 KiB pages cost
    // as much per event on a new file and 1.2-1.4x more once the table holds a retention's worth
    // of done events: a deeper B-tree for each random event id (bench/sqlite-table-size.ts).
    db.pragma('page_size = 4096');
    enableWal(db, busyTimeoutMs);
    // NORMAL in WAL mode survives a process crash; a power loss can forget the last commits,
    // which costs at most a repeated handler run (the documented crash window), never a loss.
    db.pragma('synchronous = NORMAL');
    db.pragma('wal_autocheckpoint = 10000');
    db.pragma('cache_size = -32000');
    // Done events live in `dedupe` (large: days of events); leases in `leases` (small: what is
    // in flight, and abandoned claims for a day). A claim writes a page of the small table, so
    // each event dirties one page of the large one (its done record) instead of two: the
    // commits write about half the pages (docs/performance-log.md, SQLite dedupe).
    db.exec(`
      CREATE TABLE IF NOT EXISTS dedupe (
        event_id   TEXT PRIMARY KEY,
        done       INTEGER NOT NULL,
        token      TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        claims     INTEGER NOT NULL DEFAULT 1
      ) WITHOUT ROWID;
      CREATE INDEX IF NOT EXISTS dedupe_expires_at ON dedupe (expires_at);
      CREATE TABLE IF NOT EXISTS leases (
        event_id   TEXT PRIMARY KEY,
        token      TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        claims     INTEGER NOT NULL DEFAULT 1
      ) WITHOUT ROWID;
    `);
    addClaimsColumn(db);
    moveLegacyLeases(db);
    return db;
  } catch (cause) {
    throw new DedupeUnavailableError(`cannot open SQLite dedupe store at ${options.path}`, { cause });
  }
}

/**
 * Switches the file to WAL, waiting for other processes as a write would. SQLite does not call its
 * busy handler for this switch: while another process opens the same new file, it answers
 * "database is locked" at once (three workers starting together on a fresh shared file: 4 of 40
 * starts failed so). So the switch is tried again, backing off, until the busy timeout.
 */
function enableWal(db: Database.Database, busyTimeoutMs: number): void {
  const deadline = Date.now() + busyTimeoutMs;
  for (let delayMs = 2; ; delayMs = Math.min(delayMs * 2, 100)) {
    try {
      // Another process may have switched the file already: then this is a no-op.
      db.pragma('journal_mode = WAL');
      return;
    } catch (error) {
      if (!isBusy(error) || Date.now() + delayMs > deadline) throw error;
    }
    sleepSync(delayMs);
  }
}

function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}

/** Blocks this thread for `ms` (only while the store opens, before it serves anything). */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * The store's SQL (exported for the benchmark's floor, which runs the same statements bare).
 */
export const SQLITE_STATEMENTS = {
  // A first delivery: a lease unless a done record (or a lease of an earlier version) holds it.
  claimNew: `
    INSERT INTO leases (event_id, token, expires_at, claims)
    SELECT ?, ?, ?, 1 WHERE NOT EXISTS (SELECT 1 FROM dedupe WHERE event_id = ? AND expires_at > ?)
    ON CONFLICT (event_id) DO NOTHING`,
  record: 'SELECT done, expires_at FROM dedupe WHERE event_id = ?',
  lease: 'SELECT expires_at FROM leases WHERE event_id = ?',
  // A lease that ran out without complete or release was abandoned: counted in `claims`.
  takeOver: `
    UPDATE leases SET token = ?, expires_at = ?, claims = claims + 1
    WHERE event_id = ? AND expires_at <= ?
    RETURNING claims`,
  extend: 'UPDATE leases SET expires_at = ? WHERE event_id = ? AND token = ?',
  /** Complete is endLease then, when it deleted the lease, recordDone; release is endLease alone. */
  endLease: 'DELETE FROM leases WHERE event_id = ? AND token = ?',
  // A done record keeps no token (nothing reads it; the column is for leases of an earlier
  // version): a shorter row of the large table, fewer bytes per commit.
  recordDone: `
    INSERT INTO dedupe (event_id, done, token, expires_at, claims) VALUES (?, 1, '', ?, 1)
    ON CONFLICT (event_id) DO UPDATE
      SET done = 1, token = '', expires_at = excluded.expires_at, claims = 1`,
  forget: 'DELETE FROM dedupe WHERE event_id = ? AND done = 1 AND expires_at > ?',
  // Done rows go when their retention ends; abandoned claims a day after their lease (leases of
  // an earlier version, done = 0 in dedupe, alike).
  purgeRecords: `
    DELETE FROM dedupe WHERE event_id IN (
      SELECT event_id FROM dedupe
      WHERE expires_at <= ? AND (done = 1 OR expires_at <= ?) LIMIT ?)`,
  purgeLeases:
    'DELETE FROM leases WHERE event_id IN (SELECT event_id FROM leases WHERE expires_at <= ? LIMIT ?)',
} as const;

/** An event id as a statement binds it (`sqlId`). */
type SqlId = string | Buffer;

/**
 * An event id as the store keeps it: as text, except an id that is not well-formed UTF-16 (a
 * lone surrogate, which a signed JSON body can spell as `\ud800`). better-sqlite3 binds text as
 * UTF-8, and on newer V8 (Node 24) that turns each lone surrogate into U+FFFD: `evt_\ud800` and
 * `evt_\ud801` would share a row, and the second event be acked as a duplicate of the first.
 * Such an id is bound as a BLOB of its UTF-16 code units instead: one-to-one, and never equal to
 * any text id (SQLite compares no BLOB equal to a TEXT value). Well-formed ids, all real ones,
 * keep their keys.
 */
function sqlId(eventId: string): SqlId {
  return eventId.isWellFormed() ? eventId : Buffer.from(eventId, 'utf16le');
}

/** The store's statements, prepared once. */
function prepareStatements(db: Database.Database) {
  const sql = SQLITE_STATEMENTS;
  return {
    claimNew: db.prepare<[SqlId, string, number, SqlId, number]>(sql.claimNew),
    record: db.prepare<[SqlId], { done: number; expires_at: number }>(sql.record),
    lease: db.prepare<[SqlId], { expires_at: number }>(sql.lease),
    takeOver: db.prepare<[string, number, SqlId, number], { claims: number }>(sql.takeOver),
    extend: db.prepare(sql.extend),
    endLease: db.prepare(sql.endLease),
    recordDone: db.prepare(sql.recordDone),
    forget: db.prepare(sql.forget),
    purgeRecords: db.prepare<[number, number, number]>(sql.purgeRecords),
    purgeLeases: db.prepare<[number, number]>(sql.purgeLeases),
  };
}

/** Files made before claims were counted get the column (once; another process may race us). */
function addClaimsColumn(db: Database.Database): void {
  const columns = db.prepare<[], { name: string }>('PRAGMA table_info(dedupe)').all();
  if (columns.some((c) => c.name === 'claims')) return;
  try {
    db.exec('ALTER TABLE dedupe ADD COLUMN claims INTEGER NOT NULL DEFAULT 1');
  } catch (error) {
    if (!/duplicate column/i.test((error as Error).message)) throw error;
  }
}

/** `user_version` of a file whose leases are in their own table. */
const LEASES_TABLE_VERSION = 2;

/**
 * Files from before leases had their own table keep them in `dedupe` (done = 0): moved once, in
 * one transaction, with their tokens and counts (a worker of the earlier version that still runs
 * on the file may write more; claims and peeks read those as leases too until they are purged).
 */
function moveLegacyLeases(db: Database.Database): void {
  if ((db.pragma('user_version', { simple: true }) as number) >= LEASES_TABLE_VERSION) return;
  db.transaction(() => {
    db.exec(`
      INSERT INTO leases (event_id, token, expires_at, claims)
        SELECT event_id, token, expires_at, claims FROM dedupe WHERE done = 0
        ON CONFLICT (event_id) DO NOTHING;
      DELETE FROM dedupe WHERE done = 0;
      PRAGMA user_version = ${LEASES_TABLE_VERSION};
    `);
  }).immediate();
}
