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
  readonly summary: LetterSummary;
}

const CHUNK = 1 << 20;
/** Summaries keep at most this much of each unsigned text (a forged id can be any size). */
const MAX_FIELD = 200;

/**
 * An index of the dead-letter file by line offsets, for the console: the file is read once,
 * then only what was appended since; the table's fields of each line are kept (bounded), the
 * line itself is read from disk when asked for. A file that shrank or was replaced is indexed
 * again under a new generation.
 */
export class DeadLetterIndex {
  readonly path: string;
  #entries: Entry[] = [];
  #indexed = 0;
  #identity = '';
  #generation = 0;

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

  /** Newest first, filtered, one page. */
  page(filter: LetterFilter, page: number, pageSize: number): LetterPage {
    this.refresh();
    const matches = (s: LetterSummary) => letterMatches(s, filter);
    const letters: LetterSummary[] = [];
    let matching = 0;
    const skip = page * pageSize;
    for (let i = this.#entries.length - 1; i >= 0; i--) {
      const { summary } = this.#entries[i] as Entry;
      if (!matches(summary)) continue;
      if (matching >= skip && letters.length < pageSize) letters.push(summary);
      matching++;
    }
    return { generation: this.generation, total: this.#entries.length, matching, letters };
  }

  /** Line numbers of every letter matching the filter, oldest first. */
  select(filter: LetterFilter): number[] {
    this.refresh();
    return this.#entries.filter((e) => letterMatches(e.summary, filter)).map((e) => e.summary.n);
  }

  /** The line of letter `n`, as written, or undefined when there is none. */
  line(n: number): string | undefined {
    const entry = this.#entries[n];
    if (!entry) return undefined;
    const buffer = Buffer.alloc(entry.length);
    const fd = openSync(this.path, 'r');
    try {
      readSync(fd, buffer, 0, entry.length, entry.offset);
    } finally {
      closeSync(fd);
    }
    return buffer.toString('utf8');
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
    const n = this.#entries.length;
    this.#entries.push({ offset, length: line.length, summary: summarize(n, line.toString('utf8')) });
  }
}

function summarize(n: number, line: string): LetterSummary {
  let record: Record<string, unknown> = {};
  try {
    const parsed: unknown = JSON.parse(line);
    if (parsed && typeof parsed === 'object') record = parsed as Record<string, unknown>;
  } catch {
    return unreadable(n);
  }
  const claimed = claimedIds(record);
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
function claimedIds(record: Record<string, unknown>): { eventId: string | null; eventType: string | null } {
  if (record.raw_encoding !== 'utf8' || typeof record.raw !== 'string')
    return { eventId: null, eventType: null };
  try {
    const envelope = JSON.parse(record.raw) as Record<string, unknown>;
    return { eventId: text(envelope.event_id), eventType: text(envelope.event_type) };
  } catch {
    return { eventId: null, eventType: null };
  }
}

function text(value: unknown): string | null {
  return typeof value === 'string' ? value.slice(0, MAX_FIELD) : null;
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
