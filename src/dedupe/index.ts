export { createMemoryDedupe, type MemoryDedupeOptions, MemoryDedupeStore } from './memory.js';
export { createSqliteDedupe, type SqliteDedupeOptions, SqliteDedupeStore } from './sqlite.js';
export {
  type BatchCallOptions,
  type ClaimResult,
  DEFAULT_LEASE_MS,
  DEFAULT_RETENTION_MS,
  type DedupePersistence,
  type DedupeState,
  type DedupeStore,
  type HeldClaim,
  PUBLISHER_RETRY_WINDOW_MS,
} from './types.js';
