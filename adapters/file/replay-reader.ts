import { createReadStream } from 'node:fs';
import type { Outcome } from '../../src/core/outcome.js';
import type { MaxStop, ReplayMessage, ReplayReader } from '../../src/core/replay-reader.js';
import type { FiniteSourceProgress } from '../../src/core/source-adapter.js';
import { createFileSource, type FileMessage, type FileSource } from './adapter.js';

/** A record of a replayed JSONL file: its line number is its position. */
export type FileReplayMessage = FileMessage & ReplayMessage;

/**
 * `replay FILE`: the file source, whose records are numbered by line and carry the code they were
 * dead-lettered with. Retries are the file source's own (re-queued in memory); a record left out
 * or only looked at is simply done with, since reading a file changes nothing.
 */
export class FileReplayReader implements ReplayReader<FileReplayMessage> {
  readonly kind = 'file';
  readonly name: string;
  readonly maxBatchSize: number;
  readonly #path: string;
  readonly #max: number | undefined;
  readonly #inner: FileSource;

  /** With `max` (`--max N`), the first N records of the file only. */
  constructor(path: string, max?: number) {
    this.#path = path;
    this.#max = max;
    this.#inner = createFileSource({ path, ...(max === undefined ? {} : { maxRecords: max }) });
    this.name = this.#inner.name;
    this.maxBatchSize = this.#inner.maxBatchSize;
  }

  /** The file's line count (at most `max`). */
  async total(): Promise<number> {
    const lines = await countLines(this.#path);
    return this.#max === undefined ? lines : Math.min(lines, this.#max);
  }

  /** Set when `max` ended the read with records left in the file. */
  get stoppedAtMax(): MaxStop | undefined {
    return this.#inner.stoppedAtMax ? { unread: 'remain' } : undefined;
  }

  /** The file source's: `failure` says when reading the file failed before its end. */
  get progress(): FiniteSourceProgress {
    return this.#inner.progress;
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly FileReplayMessage[] | null> {
    const batch = await this.#inner.receive(max, signal);
    return batch === null ? null : batch.map(numbered);
  }

  settle(message: FileReplayMessage, outcome: Outcome): Promise<void> {
    return this.#inner.settle(message, outcome);
  }

  skip(message: FileReplayMessage): Promise<void> {
    return this.#inner.settle(message, { kind: 'ack', result: 'ignored' });
  }

  hold(message: FileReplayMessage): Promise<void> {
    return this.#inner.settle(message, { kind: 'ack', result: 'ignored' });
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}

function numbered(message: FileMessage): FileReplayMessage {
  const code = message.metadata?.original_code;
  return {
    ...message,
    position: message.line,
    ...(typeof code === 'string' ? { recordedCode: code } : {}),
  };
}

/** Counts newline-terminated lines without holding the file in memory. */
export async function countLines(path: string): Promise<number> {
  let count = 0;
  let last = 10;
  for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) {
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) count++;
    last = chunk[chunk.length - 1] ?? last;
  }
  return last === 10 ? count : count + 1;
}

export function createFileReplayReader(path: string, max?: number): FileReplayReader {
  return new FileReplayReader(path, max);
}
