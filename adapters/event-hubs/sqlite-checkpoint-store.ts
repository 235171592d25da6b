import { randomUUID } from 'node:crypto';
import type { Checkpoint, CheckpointStore, PartitionOwnership } from '@azure/event-hubs';
import { AdapterError } from '../../src/core/errors.js';
import { createPrivateFile } from '../../src/core/private-file.js';
import Database from '../../src/core/sqlite-driver.js';

export interface SqliteCheckpointStoreOptions {
  /** Database file; created 0600 with its folder when missing. */
  readonly path: string;
  /** How long a writer waits for another process's lock. Default 5000. */
  readonly busyTimeoutMs?: number;
}

interface OwnershipRow {
  partition_id: string;
  owner_id: string;
  etag: string;
  last_modified_ms: number;
}

interface CheckpointRow {
  partition_id: string;
  sequence_number: number;
  offset: string;
}

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS eh_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS eh_ownership (
    namespace        TEXT NOT NULL,
    event_hub        TEXT NOT NULL,
    consumer_group   TEXT NOT NULL,
    partition_id     TEXT NOT NULL,
    owner_id         TEXT NOT NULL,
    etag             TEXT NOT NULL,
    last_modified_ms INTEGER NOT NULL,
    PRIMARY KEY (namespace, event_hub, consumer_group, partition_id)
  ) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS eh_checkpoint (
    namespace       TEXT NOT NULL,
    event_hub       TEXT NOT NULL,
    consumer_group  TEXT NOT NULL,
    partition_id    TEXT NOT NULL,
    sequence_number INTEGER NOT NULL,
    offset          TEXT NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (namespace, event_hub, consumer_group, partition_id)
  ) WITHOUT ROWID;
`;

type Statements = ReturnType<typeof prepareStatements>;

function prepareStatements(db: Database.Database) {
  const key = 'namespace = ? AND event_hub = ? AND consumer_group = ?';
  return {
    listOwnership: db.prepare<[string, string, string], OwnershipRow>(
      `SELECT partition_id, owner_id, etag, last_modified_ms FROM eh_ownership WHERE ${key}`,
    ),
    getEtag: db.prepare<[string, string, string, string], { etag: string }>(
      `SELECT etag FROM eh_ownership WHERE ${key} AND partition_id = ?`,
    ),
    upsertOwnership: db.prepare(`
      INSERT INTO eh_ownership VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT DO UPDATE SET owner_id = excluded.owner_id, etag = excluded.etag,
        last_modified_ms = excluded.last_modified_ms`),
    listCheckpoints: db.prepare<[string, string, string], CheckpointRow>(
      `SELECT partition_id, sequence_number, offset FROM eh_checkpoint WHERE ${key}`,
    ),
    upsertCheckpoint: db.prepare(`
      INSERT INTO eh_checkpoint VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT DO UPDATE SET sequence_number = excluded.sequence_number,
        offset = excluded.offset, updated_at_ms = excluded.updated_at_ms`),
    getMeta: db.prepare<[string], { value: string }>('SELECT value FROM eh_meta WHERE key = ?'),
    putMeta: db.prepare('INSERT OR IGNORE INTO eh_meta (key, value) VALUES (?, ?)'),
  };
}

/**
 * The SDK's `CheckpointStore` on one SQLite file (better-sqlite3, WAL): checkpoints and partition
 * ownership, for a single instance (the default) or a few processes on one host sharing the
 * file. Claims are compare-and-swap on an etag inside `BEGIN IMMEDIATE`, as the Blob store does
 * with `If-Match`. Writes are few (the adapter batches checkpoints), so each runs at once.
 *
 * `ownerId` is stable per file: a single instance that crashed gets its partitions back at once
 * on restart instead of waiting for its old claims to expire (60 s by default).
 */
export class SqliteCheckpointStore implements CheckpointStore {
  readonly path: string;
  readonly #db: Database.Database;
  readonly #stmt: Statements;
  readonly #claim: Database.Transaction<(requests: readonly PartitionOwnership[]) => PartitionOwnership[]>;
  #ownerId: string | undefined;
  #closed = false;

  constructor(options: SqliteCheckpointStoreOptions) {
    this.path = options.path;
    try {
      // Created 0600 first: SQLite gives the -wal and -shm files the database file's mode.
      if (options.path !== ':memory:') createPrivateFile(options.path);
      this.#db = new Database(options.path);
      this.#db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5000}`);
      this.#db.pragma('journal_mode = WAL');
      // A checkpoint lost to a power cut only means events after the previous one are redelivered.
      this.#db.pragma('synchronous = NORMAL');
      this.#db.exec(SCHEMA);
    } catch (cause) {
      throw new AdapterError(`cannot open SQLite checkpoint store at ${options.path}`, { cause });
    }
    this.#stmt = prepareStatements(this.#db);
    this.#claim = this.#db.transaction((requests: readonly PartitionOwnership[]) =>
      this.#claimEach(requests),
    );
  }

  /** Compare-and-swap per partition: a claim based on a stale view of the ownership loses. */
  #claimEach(requests: readonly PartitionOwnership[]): PartitionOwnership[] {
    const claimed: PartitionOwnership[] = [];
    const now = Date.now();
    for (const r of requests) {
      const current = this.#stmt.getEtag.get(
        r.fullyQualifiedNamespace,
        r.eventHubName,
        r.consumerGroup,
        r.partitionId,
      );
      // Compare-and-swap: a claim based on a stale view of the ownership loses.
      if (current && current.etag !== r.etag) continue;
      const etag = randomUUID();
      this.#stmt.upsertOwnership.run(
        r.fullyQualifiedNamespace,
        r.eventHubName,
        r.consumerGroup,
        r.partitionId,
        r.ownerId,
        etag,
        now,
      );
      claimed.push({ ...r, etag, lastModifiedTimeInMs: now });
    }
    return claimed;
  }

  /** An owner id kept in the file, so a restarted single instance is recognised as the owner. */
  get ownerId(): string {
    if (this.#ownerId) return this.#ownerId;
    this.#run(() => this.#stmt.putMeta.run('owner_id', randomUUID()));
    this.#ownerId = this.#run(() => this.#stmt.getMeta.get('owner_id')?.value) ?? randomUUID();
    return this.#ownerId;
  }

  async listOwnership(
    namespace: string,
    eventHub: string,
    consumerGroup: string,
  ): Promise<PartitionOwnership[]> {
    const rows = this.#run(() => this.#stmt.listOwnership.all(namespace, eventHub, consumerGroup));
    return rows.map((row) => ({
      fullyQualifiedNamespace: namespace,
      eventHubName: eventHub,
      consumerGroup,
      partitionId: row.partition_id,
      ownerId: row.owner_id,
      etag: row.etag,
      lastModifiedTimeInMs: row.last_modified_ms,
    }));
  }

  async claimOwnership(requests: PartitionOwnership[]): Promise<PartitionOwnership[]> {
    return this.#run(() => this.#claim.immediate(requests));
  }

  async listCheckpoints(namespace: string, eventHub: string, consumerGroup: string): Promise<Checkpoint[]> {
    const rows = this.#run(() => this.#stmt.listCheckpoints.all(namespace, eventHub, consumerGroup));
    return rows.map((row) => ({
      fullyQualifiedNamespace: namespace,
      eventHubName: eventHub,
      consumerGroup,
      partitionId: row.partition_id,
      sequenceNumber: row.sequence_number,
      offset: row.offset,
    }));
  }

  async updateCheckpoint(checkpoint: Checkpoint): Promise<void> {
    const c = checkpoint;
    this.#run(() =>
      this.#stmt.upsertCheckpoint.run(
        c.fullyQualifiedNamespace,
        c.eventHubName,
        c.consumerGroup,
        c.partitionId,
        c.sequenceNumber,
        c.offset,
        Date.now(),
      ),
    );
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#db.close();
  }

  #run<T>(op: () => T): T {
    if (this.#closed) throw new AdapterError('SQLite checkpoint store is closed');
    try {
      return op();
    } catch (cause) {
      throw new AdapterError(`SQLite checkpoint store at ${this.path} failed`, { cause });
    }
  }
}
