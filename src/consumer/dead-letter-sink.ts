import type { DeadLetterRecord } from '../core/dead-letter-record.js';
import { appendLine } from '../core/durable-append.js';

export interface DeadLetterSink {
  /** Resolves once the record is durable; the message is acked only after that. */
  write(record: DeadLetterRecord): Promise<void>;
  close(): Promise<void>;
}

/**
 * Appends records to a JSONL file, serialised so lines never interleave. Each record opens the
 * file, appends, `datasync`s and closes it (`appendLine`: all of the line or none of it, the
 * file created 0600): dead letters are rare, durability matters more than speed, and a file
 * moved away by log rotation is simply created anew on the next record.
 */
export class JsonlDeadLetterSink implements DeadLetterSink {
  readonly path: string;
  #tail: Promise<void> = Promise.resolve();
  #count = 0;

  constructor(path: string) {
    this.path = path;
  }

  /** Records written by this sink since it was created. */
  get count(): number {
    return this.#count;
  }

  write(record: DeadLetterRecord): Promise<void> {
    const line = JSON.stringify(record);
    const next = this.#tail.then(async () => {
      await appendLine(this.path, line);
      this.#count++;
    });
    this.#tail = next.catch(() => undefined);
    return next;
  }

  async close(): Promise<void> {
    await this.#tail;
  }
}

export function createJsonlDeadLetters(path: string): JsonlDeadLetterSink {
  return new JsonlDeadLetterSink(path);
}
