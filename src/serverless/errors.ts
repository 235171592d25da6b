import { ConfigError } from '../core/errors.js';
import type { DedupePersistence } from '../dedupe/types.js';

/**
 * The consumer's dedupe store does not outlive a function instance (memory, or a SQLite file in
 * the instance's temporary folder): a redelivery to the next instance would run handlers again.
 * Code `CONFIG_INVALID`; raised when the wrapper is built (or at the first invocation of a factory).
 */
export class EphemeralDedupeError extends ConfigError {
  readonly persistence: DedupePersistence;
  constructor(message: string, persistence: DedupePersistence) {
    super(message, { details: { persistence } });
    this.name = 'EphemeralDedupeError';
    this.persistence = persistence;
  }
}
