export { type MemoryDedupeOptions, MemoryDedupeStore, memoryDedupe } from './memory.js';
export { type SqliteDedupeOptions, SqliteDedupeStore, sqliteDedupe } from './sqlite.js';
export {
  type ClaimResult,
  DEFAULT_LEASE_MS,
  DEFAULT_RETENTION_MS,
  type DedupeState,
  type DedupeStore,
  PUBLISHER_RETRY_WINDOW_MS,
} from './types.js';
