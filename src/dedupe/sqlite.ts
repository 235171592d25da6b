import { DedupeUnavailableError } from '../core/errors.js';
import { createPrivateFile } from '../core/private-file.js';
import Database from '../core/sqlite-driver.js';
import { ABANDONED_CLAIM_MEMORY_MS, type ClaimResult, type DedupeState, type DedupeStore } from './types.js';

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
let storeCounter = 0;

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
  readonly #tokenPrefix = `${process.pid}.${++storeCounter}.${Date.now().toString(36)}.`;
  #tokenSeq = 0;
  #queue: PendingOp[] = [];
  #flushScheduled = false;
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
    return this.#enqueue(() => {
      const now = this.#now();
      const token = this.#tokenPrefix + (++this.#tokenSeq).toString(36);
      // The common case, a first delivery, is a plain insert: 1.5–5 µs less CPU than the upsert.
      if (this.#stmt.claimNew.run(eventId, token, now + leaseMs).changes === 1) {
        return { status: 'claimed', token, abandoned: 0 };
      }
      const claimed = this.#stmt.claim.get(eventId, token, now + leaseMs, now);
      if (claimed) return { status: 'claimed', token, abandoned: claimed.claims - 1 };
      const row = this.#stmt.get.get(eventId);
      if (!row) return { status: 'in_progress', retryAfterMs: 0 }; // purged between the two statements
      return row.done === 1
        ? { status: 'duplicate' }
        : { status: 'in_progress', retryAfterMs: row.expires_at - now };
    });
  }

  extend(eventId: string, token: string, leaseMs: number): Promise<boolean> {
    return this.#enqueue(() => this.#stmt.extend.run(this.#now() + leaseMs, eventId, token).changes === 1);
  }

  complete(eventId: string, token: string, retentionMs: number): Promise<boolean> {
    return this.#enqueue(
      () => this.#stmt.complete.run(this.#now() + retentionMs, eventId, token).changes === 1,
    );
  }

  release(eventId: string, token: string): Promise<void> {
    return this.#enqueue(() => {
      this.#stmt.release.run(eventId, token);
    });
  }

  forget(eventId: string): Promise<boolean> {
    return this.#enqueue(() => this.#stmt.forget.run(eventId, this.#now()).changes === 1);
  }

  peek(eventId: string): Promise<DedupeState> {
    // Through the queue, so it sees every operation issued before it.
    return this.#enqueue((): DedupeState => {
      const row = this.#stmt.get.get(eventId);
      if (!row || row.expires_at <= this.#now()) return 'absent';
      return row.done === 1 ? 'done' : 'in_progress';
    });
  }

  /** Deletes expired rows in small batches (so other writers are never blocked for long). */
  purgeExpired(): number {
    if (this.#closed) return 0;
    let total = 0;
    try {
      for (;;) {
        const now = this.#now();
        const { changes } = this.#stmt.purge.run(now, now - ABANDONED_CLAIM_MEMORY_MS, PURGE_BATCH);
        total += changes;
        if (changes < PURGE_BATCH) return total;
      }
    } catch {
      return total; // busy: the next interval tries again
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#flush();
    this.#closed = true;
    clearInterval(this.#purgeTimer);
    this.#db.close();
  }

  #enqueue<T>(run: () => T): Promise<T> {
    if (this.#closed) return Promise.reject(new DedupeUnavailableError('SQLite dedupe store is closed'));
    return new Promise<T>((resolve, reject) => {
      this.#queue.push({ run, resolve: resolve as (value: unknown) => void, reject });
      if (!this.#flushScheduled) {
        this.#flushScheduled = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  #flush(): void {
    this.#flushScheduled = false;
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

/** Opens (or creates, 0600) the database file with the store's settings and table. */
function openDatabase(options: SqliteDedupeOptions): Database.Database {
  try {
    // Created 0600 first: SQLite gives the -wal and -shm files the database file's mode.
    if (options.path !== ':memory:') createPrivateFile(options.path);
    const db = new Database(options.path);
    db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5000}`);
    // Random event ids dirty one page per write: small pages make each commit cheaper
    // (measured 1.3x on the store's write pattern). Applies to new files only.
    db.pragma('page_size = 1024');
    db.pragma('journal_mode = WAL');
    // NORMAL in WAL mode survives a process crash; a power loss can forget the last commits,
    // which costs at most a repeated handler run (the documented crash window), never a loss.
    db.pragma('synchronous = NORMAL');
    db.pragma('wal_autocheckpoint = 10000');
    db.pragma('cache_size = -32000');
    db.exec(`
      CREATE TABLE IF NOT EXISTS dedupe (
        event_id   TEXT PRIMARY KEY,
        done       INTEGER NOT NULL,
        token      TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        claims     INTEGER NOT NULL DEFAULT 1
      ) WITHOUT ROWID;
      CREATE INDEX IF NOT EXISTS dedupe_expires_at ON dedupe (expires_at);
    `);
    addClaimsColumn(db);
    return db;
  } catch (cause) {
    throw new DedupeUnavailableError(`cannot open SQLite dedupe store at ${options.path}`, { cause });
  }
}

/** The store's statements, prepared once. */
function prepareStatements(db: Database.Database) {
  return {
    claimNew: db.prepare<[string, string, number]>(
      'INSERT INTO dedupe (event_id, done, token, expires_at, claims) VALUES (?, 0, ?, ?, 1) ON CONFLICT (event_id) DO NOTHING',
    ),
    // A row that was not done when its lease expired was abandoned: count the claims since it
    // was created or released (SET expressions read the row's old values).
    claim: db.prepare<[string, string, number, number], { claims: number }>(`
      INSERT INTO dedupe (event_id, done, token, expires_at, claims) VALUES (?, 0, ?, ?, 1)
      ON CONFLICT (event_id) DO UPDATE
        SET claims = CASE WHEN dedupe.done = 0 THEN dedupe.claims + 1 ELSE 1 END,
            done = 0, token = excluded.token, expires_at = excluded.expires_at
        WHERE dedupe.expires_at <= ?
      RETURNING claims`),
    get: db.prepare<[string], { done: number; expires_at: number }>(
      'SELECT done, expires_at FROM dedupe WHERE event_id = ?',
    ),
    extend: db.prepare('UPDATE dedupe SET expires_at = ? WHERE event_id = ? AND token = ? AND done = 0'),
    complete: db.prepare(
      'UPDATE dedupe SET done = 1, expires_at = ? WHERE event_id = ? AND token = ? AND done = 0',
    ),
    release: db.prepare('DELETE FROM dedupe WHERE event_id = ? AND token = ? AND done = 0'),
    forget: db.prepare('DELETE FROM dedupe WHERE event_id = ? AND done = 1 AND expires_at > ?'),
    // Done rows go when their retention ends; abandoned claims a day after their lease.
    purge: db.prepare(`
      DELETE FROM dedupe WHERE event_id IN (
        SELECT event_id FROM dedupe
        WHERE expires_at <= ? AND (done = 1 OR expires_at <= ?) LIMIT ?)`),
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
