import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { patternMatches } from '../../consumer/router.js';

/** What the table shows of one dead letter, kept in memory; the line itself stays in the file. */
export interface LetterSummary {
  /** Line number in the file, from 0: the letter's id within this generation of the file. */
  readonly n: number;
  readonly at: string;
  readonly code: string;
  readonly reason: string;
  readonly attempts: number;
  /** From the signed body; null when the message never verified. */
  readonly eventId: string | null;
  readonly eventType: string | null;
  /** The envelope's own copy, unsigned: shown as claimed, never trusted (a forgery sets it). */
  readonly claimedEventId: string | null;
  readonly claimedEventType: string | null;
  readonly source: string;
}

export interface LetterFilter {
  /** Any of these codes (exact, upper case). */
  readonly codes?: readonly string[];
  /** Event type pattern: exact or dotted wildcard (`daily.data.*`), on the signed or claimed type. */
  readonly type?: string | undefined;
  readonly eventId?: string | undefined;
  /** ISO 8601 bounds on `dead_lettered_at`, inclusive. */
  readonly since?: string | undefined;
  readonly until?: string | undefined;
}

export interface LetterPage {
  /** Changes when the file was replaced (rotated, moved away): ids of an older page are void. */
  readonly generation: string;
  readonly total: number;
  readonly matching: number;
  readonly letters: readonly LetterSummary[];
}

interface Entry {
  readonly offset: number;
  readonly length: number;
  /** Parsed from the line the first time a page or a filter needs it. */
  summary: LetterSummary | undefined;
}

const CHUNK = 1 << 20;
/** Lines parsed between two turns of the event loop (about 10-30 ms of work). */
const SUMMARIZE_CHUNK = 2000;
/** Summaries keep at most this much of each unsigned text (a forged id can be any size). */
const MAX_FIELD = 200;

/**
 * An index of the dead-letter file by line offsets, for the console: the file is scanned for
 * newlines once, then only what was appended since. A line is parsed when a page shows it or a
 * filter asks about it, and only the table's fields are kept (bounded); the line itself is read
 * from disk when asked for. A file that shrank or was replaced is indexed again under a new
 * generation.
 */
export class DeadLetterIndex {
  readonly path: string;
  #entries: Entry[] = [];
  #indexed = 0;
  #identity = '';
  #generation = 0;
  #summarizing: Promise<void> | undefined;

  constructor(path: string) {
    this.path = path;
  }

  get generation(): string {
    return `${this.#identity}:${this.#generation}`;
  }

  /** Brings the index up to the file's current end (complete lines only). */
  refresh(): void {
    let stat: ReturnType<typeof statSync>;
    try {
      stat = statSync(this.path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      this.#reset('none');
      return;
    }
    const identity = `${stat.dev}-${stat.ino}`;
    if (identity !== this.#identity || stat.size < this.#indexed) this.#reset(identity);
    if (stat.size > this.#indexed) this.#scan(stat.size);
  }

  /**
   * Parses every line not parsed yet, a chunk at a time with the event loop free in between, so
   * the first filter over a large file does not pause the worker. Call before a filtered `page`.
   */
  async summarizeAll(): Promise<void> {
    this.refresh();
    this.#summarizing ??= this.#summarizeChunks().finally(() => {
      this.#summarizing = undefined;
    });
    await this.#summarizing;
  }

  async #summarizeChunks(): Promise<void> {
    for (let start = 0; start < this.#entries.length; start += SUMMARIZE_CHUNK) {
      const end = Math.min(this.#entries.length, start + SUMMARIZE_CHUNK);
      if (this.#entries.slice(start, end).every((e) => e.summary !== undefined)) continue;
      this.#withFile((fd) => {
        for (let i = start; i < end; i++) this.#summary(i, fd);
      });
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  /** Newest first, filtered, one page. */
  page(filter: LetterFilter, page: number, pageSize: number): LetterPage {
    this.refresh();
    const total = this.#entries.length;
    const skip = page * pageSize;
    if (!filtering(filter)) {
      // No filter: the page is a slice of the offsets, and only its lines are parsed.
      const letters: LetterSummary[] = [];
      if (total === 0) return { generation: this.generation, total, matching: total, letters };
      this.#withFile((fd) => {
        for (let i = total - 1 - skip; i >= 0 && letters.length < pageSize; i--)
          letters.push(this.#summary(i, fd));
      });
      return { generation: this.generation, total, matching: total, letters };
    }
    const letters: LetterSummary[] = [];
    let matching = 0;
    if (total > 0) {
      this.#withFile((fd) => {
        for (let i = total - 1; i >= 0; i--) {
          const summary = this.#summary(i, fd);
          if (!letterMatches(summary, filter)) continue;
          if (matching >= skip && letters.length < pageSize) letters.push(summary);
          matching++;
        }
      });
    }
    return { generation: this.generation, total, matching, letters };
  }

  /** Line numbers of every letter matching the filter, oldest first. */
  select(filter: LetterFilter): number[] {
    this.refresh();
    const numbers: number[] = [];
    if (this.#entries.length === 0) return numbers;
    this.#withFile((fd) => {
      for (let i = 0; i < this.#entries.length; i++)
        if (letterMatches(this.#summary(i, fd), filter)) numbers.push(i);
    });
    return numbers;
  }

  /** The line of letter `n`, as written, or undefined when there is none. */
  line(n: number): string | undefined {
    const entry = this.#entries[n];
    if (!entry) return undefined;
    return this.#read(entry);
  }

  #summary(n: number, fd?: number): LetterSummary {
    const entry = this.#entries[n] as Entry;
    entry.summary ??= summarize(n, this.#read(entry, fd));
    return entry.summary;
  }

  #read(entry: Entry, fd?: number): string {
    const buffer = Buffer.alloc(entry.length);
    if (fd !== undefined) {
      readSync(fd, buffer, 0, entry.length, entry.offset);
      return buffer.toString('utf8');
    }
    return this.#withFile((file) => this.#read(entry, file));
  }

  /** One descriptor for the many reads of a page or a filter. */
  #withFile<T>(use: (fd: number) => T): T {
    const fd = openSync(this.path, 'r');
    try {
      return use(fd);
    } finally {
      closeSync(fd);
    }
  }

  #reset(identity: string): void {
    this.#entries = [];
    this.#indexed = 0;
    this.#identity = identity;
    this.#generation++;
  }

  /** Reads from the indexed end to `size` in chunks; a last line without its newline waits. */
  #scan(size: number): void {
    const fd = openSync(this.path, 'r');
    try {
      let carry: Buffer = Buffer.alloc(0);
      let position = this.#indexed;
      while (position < size) {
        const chunk = Buffer.alloc(Math.min(CHUNK, size - position));
        const read = readSync(fd, chunk, 0, chunk.length, position);
        if (read === 0) break;
        position += read;
        const data = carry.length ? Buffer.concat([carry, chunk.subarray(0, read)]) : chunk.subarray(0, read);
        let start = 0;
        for (let nl = data.indexOf(10, start); nl !== -1; nl = data.indexOf(10, start)) {
          this.#add(data.subarray(start, nl), this.#indexed);
          this.#indexed += nl - start + 1;
          start = nl + 1;
        }
        carry = Buffer.from(data.subarray(start));
      }
    } finally {
      closeSync(fd);
    }
  }

  #add(line: Buffer, offset: number): void {
    if (line.length === 0) return;
    this.#entries.push({ offset, length: line.length, summary: undefined });
  }
}

function summarize(n: number, line: string): LetterSummary {
  const record = parseRecord(line);
  if (!record) return unreadable(n);
  const claimed =
    record.event_id === null || record.event_id === undefined ? claimedIds(record, line) : NO_CLAIM;
  return {
    n,
    at: text(record.dead_lettered_at) ?? '',
    code: text(record.code) ?? 'UNKNOWN',
    reason: text(record.reason) ?? '',
    attempts: typeof record.attempts === 'number' ? record.attempts : 0,
    eventId: text(record.event_id),
    eventType: text(record.event_type),
    claimedEventId: claimed.eventId,
    claimedEventType: claimed.eventType,
    source: text(record.source) ?? '',
  };
}

const NO_CLAIM = { eventId: null, eventType: null } as const;

/**
 * The record's fields before `raw` (the message, most of the line): the writer puts `raw` after
 * every field the table shows, so parsing up to it is enough. Where that cut is not at the top
 * level (a metadata key named raw), the prefix is not valid JSON and the whole line is parsed.
 */
function parseRecord(line: string): Record<string, unknown> | undefined {
  const cut = line.indexOf(',"raw":');
  for (const candidate of cut > 0 ? [`${line.slice(0, cut)}}`, line] : [line]) {
    try {
      const parsed: unknown = JSON.parse(candidate);
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed))
        return parsed as Record<string, unknown>;
    } catch {
      // the next candidate
    }
  }
  return undefined;
}

function unreadable(n: number): LetterSummary {
  return {
    n,
    at: '',
    code: 'UNREADABLE_LINE',
    reason: 'this line of the dead-letter file is not a JSON record',
    attempts: 0,
    eventId: null,
    eventType: null,
    claimedEventId: null,
    claimedEventType: null,
    source: '',
  };
}

/** The envelope's unsigned copies of the ids, from `raw` (only when it is text). */
function claimedIds(
  prefix: Record<string, unknown>,
  line: string,
): { eventId: string | null; eventType: string | null } {
  const record = 'raw' in prefix ? prefix : (JSON.parse(line) as Record<string, unknown>);
  if (record.raw_encoding !== 'utf8' || typeof record.raw !== 'string') return NO_CLAIM;
  try {
    const envelope = JSON.parse(record.raw) as Record<string, unknown>;
    return { eventId: text(envelope.event_id), eventType: text(envelope.event_type) };
  } catch {
    return NO_CLAIM;
  }
}

function text(value: unknown): string | null {
  return typeof value === 'string' ? value.slice(0, MAX_FIELD) : null;
}

function filtering(filter: LetterFilter): boolean {
  return Boolean(
    (filter.codes && filter.codes.length > 0) ||
      filter.type ||
      filter.eventId ||
      filter.since ||
      filter.until,
  );
}

export function letterMatches(s: LetterSummary, filter: LetterFilter): boolean {
  if (filter.codes && filter.codes.length > 0 && !filter.codes.includes(s.code)) return false;
  if (filter.type) {
    const type = s.eventType ?? s.claimedEventType;
    if (type === null || !patternMatches(filter.type, type)) return false;
  }
  if (filter.eventId && s.eventId !== filter.eventId && s.claimedEventId !== filter.eventId) return false;
  if (filter.since && s.at < filter.since) return false;
  if (filter.until && s.at > filter.until) return false;
  return true;
}
