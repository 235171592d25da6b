import type { Outcome } from '../core/outcome.js';
import type { ReplayMessage, ReplayReader } from '../core/replay-reader.js';
import type { SourceAdapter } from '../core/source-adapter.js';
import { isEmptyFilter, matchesFilter, type ReplayFilter } from './filters.js';
import type { Pacer } from './rate.js';

export type { ReplayMessage } from '../core/replay-reader.js';

export interface ReplaySourceOptions {
  /** Where the messages come from: a file, a queue or a hub (opened through the transport registry). */
  readonly reader: ReplayReader;
  readonly filter: ReplayFilter;
  /** Hands out one message per slot (`--rate`); retries are paced too. */
  readonly pacer?: Pacer | undefined;
  /** Called for each message the filter leaves out (for progress). */
  readonly onFiltered?: (message: ReplayMessage) => void;
}

/** The code a message was dead-lettered with; undefined for a bare envelope or a message with none. */
export function recordedCode(message: ReplayMessage): string | undefined {
  return message.recordedCode;
}

/**
 * The replay's view of its reader: messages the filter leaves out are given back at once (`skip`:
 * a queue message is visible again) and never reach the pipeline; the rest are handed out (one
 * per `--rate` slot when paced). Keeps each in-flight message's exact bytes, so `--to` can put the
 * original envelope back on a queue.
 */
export class ReplaySource implements SourceAdapter<ReplayMessage> {
  readonly name: string;
  readonly maxBatchSize: number;
  readonly #reader: ReplayReader;
  readonly #filter: ReplayFilter;
  readonly #filtering: boolean;
  readonly #pacer: Pacer | undefined;
  readonly #onFiltered: ((message: ReplayMessage) => void) | undefined;
  readonly #ready: ReplayMessage[] = [];
  readonly #bodies = new Map<string, string | Uint8Array>();
  #filteredOut = 0;

  constructor(options: ReplaySourceOptions) {
    this.#reader = options.reader;
    this.name = this.#reader.name;
    this.maxBatchSize = this.#reader.maxBatchSize;
    this.#filter = options.filter;
    this.#filtering = !isEmptyFilter(options.filter);
    this.#pacer = options.pacer;
    this.#onFiltered = options.onFiltered;
  }

  /** Messages left out by the filter so far. */
  get filteredOut(): number {
    return this.#filteredOut;
  }

  /** The exact message of an in-flight record, by message id. */
  bodyOf(messageId: string): string | Uint8Array | undefined {
    return this.#bodies.get(messageId);
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly ReplayMessage[] | null> {
    while (this.#ready.length === 0) {
      const batch = await this.#reader.receive(this.#pacer ? this.maxBatchSize : max, signal);
      if (batch === null) return null;
      if (batch.length === 0) return [];
      for (const message of batch) {
        if (message.attempt === 1 && this.#filtering && !this.#selected(message)) {
          this.#filteredOut++;
          await this.#reader.skip(message);
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

  async settle(message: ReplayMessage, outcome: Outcome): Promise<void> {
    if (outcome.kind !== 'retry') this.#bodies.delete(message.id);
    await this.#reader.settle(message, outcome);
  }

  /** A message only looked at (dry run): see `ReplayReader.hold`. */
  hold(message: ReplayMessage): Promise<void> {
    return this.#reader.hold(message);
  }

  /** Gives back what was read but not handed out, then closes the reader. */
  async close(): Promise<void> {
    const unread = this.#ready.splice(0);
    await Promise.all(unread.map((message) => this.#reader.skip(message)));
    this.#bodies.clear();
    await this.#reader.close();
  }

  #selected(message: ReplayMessage): boolean {
    return matchesFilter(this.#filter, { body: message.body, code: recordedCode(message) });
  }

  #handOut(messages: ReplayMessage[]): ReplayMessage[] {
    for (const m of messages) this.#bodies.set(m.id, m.body);
    return messages;
  }
}
