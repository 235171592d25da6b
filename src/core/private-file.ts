import { closeSync, constants, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';

/** Files holding event bodies or dedupe state: readable and writable by their owner only. */
export const PRIVATE_FILE_MODE = 0o600;

/**
 * Creates `path` empty and 0600 (with its folder) when it does not exist yet, whatever the
 * umask. For a SQLite database, whose `-wal`, `-shm` and `-journal` files SQLite creates with the
 * database file's own mode, this keeps all of them private. An existing file keeps its mode: the
 * kit never changes permissions it did not set.
 */
export function createPrivateFile(path: string): void {
  mkdirSync(dirname(path), { recursive: true });
  // O_RDONLY | O_CREAT: creates with the mode, and never needs write access to an existing file.
  closeSync(openSync(path, constants.O_RDONLY | constants.O_CREAT, PRIVATE_FILE_MODE));
}

/** `0644`-style text of a file mode's permission bits, for messages. */
export function formatMode(mode: number): string {
  return `0${(mode & 0o777).toString(8).padStart(3, '0')}`;
}
