// Replay reads the kit's own JSONL files (dead-letter records, envelopes): the file adapter is that
// reader, whatever `--to` names, so it is used directly, not through the transport registry.
import { createFileSource, type FileMessage, type FileSource } from '../../adapters/file/index.js';
import type { Outcome } from '../core/outcome.js';
import type { SourceAdapter } from '../core/source-adapter.js';
import { isEmptyFilter, matchesFilter, type ReplayFilter } from './filters.js';
import type { Pacer } from './rate.js';

export interface ReplaySourceOptions {
  readonly path: string;
  readonly filter: ReplayFilter;
  /** Hands out one message per slot (`--rate`); retries are paced too. */
  readonly pacer?: Pacer | undefined;
  /** Called for each record the filter leaves out (for progress). */
  readonly onFiltered?: (message: FileMessage) => void;
}

/** One record of the replayed file, as the file adapter reads it. */
export type ReplayMessage = FileMessage;

/** The code a record was dead-lettered with; undefined for a bare envelope. */
export function recordedCode(message: FileMessage): string | undefined {
  const code = message.metadata?.original_code;
  return typeof code === 'string' ? code : undefined;
}

/**
 * The replay's view of a JSONL file: records the filter leaves out are settled at once and never
 * reach the pipeline; the rest are handed out (one per `--rate` slot when paced). Keeps each
 * in-flight message's exact bytes, so `--to` can put the original envelope back on a queue.
 */
export class ReplaySource implements SourceAdapter<FileMessage> {
  readonly name: string;
  readonly maxBatchSize: number;
  readonly #inner: FileSource;
  readonly #filter: ReplayFilter;
  readonly #filtering: boolean;
  readonly #pacer: Pacer | undefined;
  readonly #onFiltered: ((message: FileMessage) => void) | undefined;
  readonly #ready: FileMessage[] = [];
  readonly #bodies = new Map<string, string | Uint8Array>();
  #filteredOut = 0;

  constructor(options: ReplaySourceOptions) {
    this.#inner = createFileSource({ path: options.path });
    this.name = this.#inner.name;
    this.maxBatchSize = this.#inner.maxBatchSize;
    this.#filter = options.filter;
    this.#filtering = !isEmptyFilter(options.filter);
    this.#pacer = options.pacer;
    this.#onFiltered = options.onFiltered;
  }

  /** Records left out by the filter so far. */
  get filteredOut(): number {
    return this.#filteredOut;
  }

  /** The exact message of an in-flight record, by message id. */
  bodyOf(messageId: string): string | Uint8Array | undefined {
    return this.#bodies.get(messageId);
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly FileMessage[] | null> {
    while (this.#ready.length === 0) {
      const batch = await this.#inner.receive(this.#pacer ? this.maxBatchSize : max, signal);
      if (batch === null) return null;
      if (batch.length === 0) return [];
      for (const message of batch) {
        if (message.attempt === 1 && this.#filtering && !this.#selected(message)) {
          this.#filteredOut++;
          await this.#inner.settle(message, { kind: 'ack', result: 'ignored' });
          this.#onFiltered?.(message);
        } else {
          this.#ready.push(message);
        }
      }
    }
    if (this.#pacer) {
      if (!(await this.#pacer.take(signal))) return [];
      return this.#handOut(this.#ready.splice(0, 1));
    }
    return this.#handOut(this.#ready.splice(0, max));
  }

  async settle(message: FileMessage, outcome: Outcome): Promise<void> {
    if (outcome.kind !== 'retry') this.#bodies.delete(message.id);
    await this.#inner.settle(message, outcome);
  }

  async close(): Promise<void> {
    this.#ready.length = 0;
    this.#bodies.clear();
    await this.#inner.close();
  }

  #selected(message: FileMessage): boolean {
    return matchesFilter(this.#filter, { body: message.body, code: recordedCode(message) });
  }

  #handOut(messages: FileMessage[]): FileMessage[] {
    for (const m of messages) this.#bodies.set(m.id, m.body);
    return messages;
  }
}
