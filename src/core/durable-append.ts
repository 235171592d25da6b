import { constants } from 'node:fs';
import { access, type FileHandle, mkdir, open, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { AdapterError, errorMessage } from './errors.js';
import { PRIVATE_FILE_MODE } from './private-file.js';

const NEWLINE = 0x0a;
const TERMINATOR = Buffer.from([NEWLINE]);

/**
 * Appends `text` and a newline to `path` so that the line is either all there and synced, or not
 * there at all (a hand-off is complete or it failed). Every byte must be written: a short write
 * (a file-size limit, a full disk) is a failure, and the partial line is cut off again, so the
 * next line never joins it; a torn last line left by a crash is ended with a newline first. The
 * file is created 0600 (its folder too when missing), and its folder is synced when the file is
 * new, so the file itself survives a crash. Throws `AdapterError` naming the path.
 *
 * Each line is one `write` with `O_APPEND`; callers serialise their own appends. Several
 * processes may share a file, but the repair assumes a failed append is still the file's last
 * line, so give each writer its own file where you can.
 */
export async function appendLine(path: string, text: string): Promise<void> {
  const line = Buffer.from(`${text}\n`, 'utf8');
  let file: FileHandle;
  let created: boolean;
  try {
    await mkdir(dirname(path), { recursive: true });
    ({ file, created } = await openForAppend(path));
  } catch (cause) {
    throw new AdapterError(`cannot append to ${path}: ${errorMessage(cause)}`, { cause });
  }
  let start = 0;
  let written = 0;
  let bytes = line;
  try {
    const before = await tail(file);
    start = before.size;
    // A torn last line is ended first, so this line never joins it. (It is not cut off: with
    // another writer, it may be that writer's append still in progress.)
    bytes = before.torn ? Buffer.concat([TERMINATOR, line]) : line;
    // One write, at the end of the file (O_APPEND). A short write is not continued: the rest
    // would land after whatever another writer appended meanwhile.
    ({ bytesWritten: written } = await file.write(bytes, 0, bytes.length));
    if (written < bytes.length) throw new Error('short write (file size limit or disk full?)');
    await file.datasync();
    // A file created empty by an earlier failed append is new to the folder too.
    if (created || start === 0) await syncDirectory(dirname(path));
  } catch (cause) {
    const removed = written > 0 && (await removePartial(file, start, written));
    const what = written > 0 ? `${written} of ${bytes.length} bytes written` : 'nothing written';
    throw new AdapterError(
      `cannot append to ${path}: ${errorMessage(cause)} (${what}${removed ? ', then removed' : ''})`,
      { cause, details: { path, bytes: bytes.length, written } },
    );
  } finally {
    await file.close().catch(() => undefined);
  }
}

/**
 * Throws the file system's error (EACCES, ENOTDIR, EISDIR, EROFS, …) when `appendLine(path)`
 * could not open its file: the file exists and cannot be opened as `appendLine` opens it, or it
 * does not and the nearest existing folder above it (where `appendLine` would create what is
 * missing) is not a folder this process may write. Creates and changes nothing. For a check at
 * start, so that a file that can never be written is found before the first record needs it.
 */
export async function checkAppendable(path: string): Promise<void> {
  try {
    await (await open(path, constants.O_RDWR | constants.O_APPEND)).close();
    return;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  for (let folder = dirname(resolve(path)); ; folder = dirname(folder)) {
    try {
      if (!(await stat(folder)).isDirectory()) {
        throw Object.assign(new Error(`ENOTDIR: not a directory, '${folder}'`), { code: 'ENOTDIR' });
      }
      await access(folder, constants.W_OK | constants.X_OK);
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(folder) === folder) throw error;
    }
  }
}

/** Opens for reading (to check the tail) and appending; `created` when this call made the file. */
async function openForAppend(path: string): Promise<{ file: FileHandle; created: boolean }> {
  const flags = constants.O_RDWR | constants.O_APPEND;
  for (;;) {
    try {
      return {
        file: await open(path, flags | constants.O_CREAT | constants.O_EXCL, PRIVATE_FILE_MODE),
        created: true,
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    try {
      return { file: await open(path, flags), created: false };
    } catch (error) {
      // Moved away (log rotation) between the two opens: create it anew.
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
}

/** The file's size, and whether its last line lacks a newline (a crash cut an append short). */
async function tail(file: FileHandle): Promise<{ size: number; torn: boolean }> {
  const { size } = await file.stat();
  if (size === 0) return { size, torn: false };
  const last = Buffer.alloc(1);
  await file.read(last, 0, 1, size - 1);
  return { size, torn: last[0] !== NEWLINE };
}

/**
 * Cuts off the partial line of a failed append, if it is still the file's end. (If another
 * writer appended since, it stays: cutting it would take that writer's line too.)
 */
async function removePartial(file: FileHandle, start: number, written: number): Promise<boolean> {
  try {
    const { size } = await file.stat();
    if (size !== start + written) return false;
    await file.truncate(start);
    await file.datasync();
    return true;
  } catch {
    return false;
  }
}

async function syncDirectory(path: string): Promise<void> {
  const dir = await open(path, constants.O_RDONLY);
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}
