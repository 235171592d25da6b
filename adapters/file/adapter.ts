import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { parseAdapterOptions } from '../../src/core/adapter-options.js';
import {
  envelopeOfDeadLetter,
  isDeadLetterRecord,
  isTruncatedDeadLetter,
  storedRawOfDeadLetter,
  truncatedError,
} from '../../src/core/dead-letter-record.js';
import { AdapterError, errorMessage } from '../../src/core/errors.js';
import type { Outcome, RetryPolicy } from '../../src/core/outcome.js';
import { redact } from '../../src/core/redact.js';
import type { FiniteSourceProgress, RawMessage, SourceAdapter } from '../../src/core/source-adapter.js';
import { Waker } from '../../src/core/waker.js';
import { type FileSourceOptions, fileSourceOptionsSchema } from './options.js';

export interface FileMessage extends RawMessage {
  /** 1-based line number in the file. */
  readonly line: number;
}

/**
 * The longest retry schedule of a file's messages (`SourceAdapter.retryBound`): 3 deliveries, the
 * retries after about 1 s and 2 s. A file's bytes never change and its run should end, so a
 * failure that does not heal within seconds (a forged or unverifiable line, an app that is down)
 * goes to the dead letters, to be replayed once fixed (`partner-events replay`), instead of
 * holding the run for a broker-length backoff (10 deliveries over about 10 minutes).
 */
export const FILE_RETRY_BOUND: RetryPolicy = { maxAttempts: 3, baseDelayMs: 1000, maxDelayMs: 2000 };

export interface FileSourceStats {
  readonly lines: number;
  readonly acked: number;
  readonly dead: number;
}

/**
 * Reads a JSONL file line by line (memory stays bounded on large files). Each line is an
 * envelope exactly as published, or a dead-letter record, whose original message is replayed.
 * Retries are re-queued in memory after their delay; the source is exhausted once every line
 * is settled. A file has no broker enqueue time, so each line is stamped with the moment it was
 * first read (the clock at first receipt): a retry minutes later is not mistaken for a stale
 * event. A dead-letter record keeps the enqueue time its broker gave it.
 *
 * A failed read (a missing file, a directory, an I/O error mid-file) is not the end of the file:
 * the next `receive` with nothing to hand out throws it (an `AdapterError` naming the path), the
 * lines read before it are still handed out and settled (retries included), and then the source
 * ends with `progress.done` false and `progress.failure` set, so `run` and `replay` exit 1.
 */
export class FileSource implements SourceAdapter<FileMessage> {
  readonly name: string;
  readonly maxBatchSize = 100;
  readonly retryBound = FILE_RETRY_BOUND;
  readonly #path: string;
  readonly #lines: AsyncIterator<string>;
  readonly #ready: FileMessage[] = [];
  /** Retries waiting for their delay, with the time each comes due. */
  readonly #delayed = new Map<NodeJS.Timeout, number>();
  /** Retries still waiting when the source was closed: never settled for good. */
  #givenUp = 0;
  readonly #closeStream: () => void;
  #lineNo = 0;
  #records = 0;
  readonly #maxRecords: number;
  /** `maxRecords` ended the read with records left in the file. */
  #stoppedAtMax = false;
  #eof = false;
  /** The read failed: the file's end was never reached. */
  #failure: AdapterError | undefined;
  /** `#failure` has not been thrown from `receive` yet. */
  #failureUntold = false;
  #inFlight = 0;
  #acked = 0;
  #dead = 0;
  readonly #waker = new Waker();

  constructor(options: FileSourceOptions) {
    const { path, name, maxRecords } = parseAdapterOptions(fileSourceOptionsSchema, options, 'file source');
    this.name = name ?? `file:${path}`;
    this.#path = path;
    this.#maxRecords = maxRecords ?? Number.POSITIVE_INFINITY;
    const stream = createReadStream(path, { encoding: 'utf8' });
    const rl = createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY });
    this.#lines = rl[Symbol.asyncIterator]();
    this.#closeStream = () => {
      rl.close();
      stream.destroy();
    };
  }

  /** True once `maxRecords` ended the read while the file had more records. */
  get stoppedAtMax(): boolean {
    return this.#stoppedAtMax;
  }

  get stats(): FileSourceStats {
    return { lines: this.#lineNo, acked: this.#acked, dead: this.#dead };
  }

  get progress(): FiniteSourceProgress {
    let nextRetryAt: number | undefined;
    for (const dueAt of this.#delayed.values()) {
      if (nextRetryAt === undefined || dueAt < nextRetryAt) nextRetryAt = dueAt;
    }
    if (this.#ready.length > 0) nextRetryAt = Date.now(); // due already, being handed out
    const pendingRetries = this.#delayed.size + this.#ready.length + this.#givenUp;
    const failure = this.#failure;
    const done = this.#eof && !failure && this.#inFlight === 0 && pendingRetries === 0;
    return { done, pendingRetries, nextRetryAt, ...(failure ? { failure: errorMessage(failure) } : {}) };
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly FileMessage[] | null> {
    const batch: FileMessage[] = [];
    while (batch.length < max) {
      const ready = this.#ready.shift();
      if (ready) {
        batch.push(ready);
        continue;
      }
      if (this.#eof) break;
      const line = await this.#nextLine();
      if (line === undefined) break;
      const message = toMessage(line, this.#lineNo + 1, Date.now());
      if (message && this.#records >= this.#maxRecords) {
        // A record beyond the limit: it and the rest of the file stay unread.
        this.#stoppedAtMax = true;
        this.#eof = true;
        break;
      }
      this.#lineNo++;
      if (message) {
        this.#records++;
        batch.push(message);
      }
    }
    if (batch.length > 0) {
      this.#inFlight += batch.length;
      return batch;
    }
    if (this.#failureUntold) {
      // Once: the consumer logs it (`receive failed`) and polls again, which drains what was read.
      // Thrown on every call, the consumer's loop would never end.
      this.#failureUntold = false;
      throw this.#failure;
    }
    if (this.#inFlight === 0 && this.#delayed.size === 0) return null;
    // Only retries remain: wait for one to come due (or for a stop).
    await this.#waker.wait(signal);
    return [];
  }

  /** The next line; undefined at the end of the file or when the read failed (`#failure`). */
  async #nextLine(): Promise<string | undefined> {
    try {
      const next = await this.#lines.next();
      if (!next.done) return next.value;
    } catch (error) {
      const path = redact(this.#path);
      const where = this.#lineNo === 0 ? path : `${path} after line ${this.#lineNo}`;
      this.#failure = new AdapterError(`cannot read ${where}: ${errorMessage(error)}`, {
        cause: error,
        details: { path, line: this.#lineNo, errno: errnoOf(error) },
      });
      this.#failureUntold = true;
    }
    this.#eof = true;
    return undefined;
  }

  async settle(message: FileMessage, outcome: Outcome): Promise<void> {
    this.#inFlight--;
    if (outcome.kind === 'retry') {
      const timer = setTimeout(() => {
        this.#delayed.delete(timer);
        this.#ready.push({ ...message, attempt: message.attempt + 1 });
        this.#waker.wake();
      }, outcome.delayMs);
      this.#delayed.set(timer, Date.now() + outcome.delayMs);
      return;
    }
    if (outcome.kind === 'ack') this.#acked++;
    else this.#dead++;
    if (this.#inFlight === 0 && this.#delayed.size === 0) this.#waker.wake();
  }

  async close(): Promise<void> {
    for (const timer of this.#delayed.keys()) clearTimeout(timer);
    this.#givenUp += this.#delayed.size + this.#ready.length;
    this.#delayed.clear();
    this.#ready.length = 0;
    this.#closeStream();
    this.#waker.wake();
  }
}

function toMessage(line: string, lineNo: number, readAt: number): FileMessage | undefined {
  if (line.trim() === '') return undefined;
  const id = `line:${lineNo}`;
  // Cheap pre-check: only lines that look like dead-letter records are parsed here.
  if (line.includes('"dead_lettered_at"')) {
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch {
      record = undefined;
    }
    if (isDeadLetterRecord(record)) {
      const message = {
        id,
        line: lineNo,
        attempt: 1,
        enqueuedAt: parseTime(record.enqueued_at) ?? readAt,
        metadata: {
          original_code: record.code,
          original_source: record.source,
          original_message_id: record.message_id,
          original_dead_lettered_at: record.dead_lettered_at,
        },
      };
      if (!isTruncatedDeadLetter(record)) return { ...message, body: envelopeOfDeadLetter(record) };
      // Only a prefix was kept: rejected as such (never re-driven), and still marked truncated
      // in the dead-letter record it becomes.
      const { code, message: reason } = truncatedError(record);
      return {
        ...message,
        body: storedRawOfDeadLetter(record),
        rejection: { code, reason },
        truncated: { bytes: record.raw_bytes ?? 0, sha256: record.raw_sha256 ?? '' },
      };
    }
  }
  return { id, line: lineNo, body: line, attempt: 1, enqueuedAt: readAt };
}

function errnoOf(error: unknown): string | null {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === 'string' ? code : null;
}

function parseTime(text: string | null): number | undefined {
  if (text === null) return undefined;
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? undefined : ms;
}

export function createFileSource(options: FileSourceOptions): FileSource {
  return new FileSource(options);
}
