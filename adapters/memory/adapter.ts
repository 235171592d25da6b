import { parseAdapterOptions } from '../../src/core/adapter-options.js';
import type { Outcome } from '../../src/core/outcome.js';
import type { RawMessage, SourceAdapter } from '../../src/core/source-adapter.js';
import { Waker } from '../../src/core/waker.js';
import { type MemorySourceOptions, memorySourceOptionsSchema } from './options.js';

export interface MemoryMessage extends RawMessage {
  readonly id: string;
}

export interface SettledMessage {
  readonly message: MemoryMessage;
  readonly outcome: Outcome;
}

/**
 * An in-process queue with broker semantics: messages are stamped with an enqueue time, a retry
 * makes a message visible again after its delay with the attempt count raised, and ack/dead
 * remove it. For tests, benchmarks, demos and library users' own unit tests.
 */
export class MemorySource implements SourceAdapter<MemoryMessage> {
  readonly name: string;
  readonly maxBatchSize = 100;
  readonly settled: SettledMessage[] = [];
  readonly #endWhenEmpty: boolean;
  readonly #now: () => number;
  readonly #queue: MemoryMessage[] = [];
  readonly #delayed = new Set<NodeJS.Timeout>();
  #head = 0;
  #inFlight = 0;
  #seq = 0;
  #closed = false;
  readonly #waker = new Waker();
  #idleWaiters: (() => void)[] = [];

  constructor(options: MemorySourceOptions = {}) {
    const { name, endWhenEmpty, now } = parseAdapterOptions(
      memorySourceOptionsSchema,
      options,
      'memory source',
    );
    this.name = name;
    this.#endWhenEmpty = endWhenEmpty;
    this.#now = now;
  }

  /** Enqueues a message; returns its id. */
  send(body: string | Uint8Array, options: { enqueuedAt?: number; id?: string } = {}): string {
    const id = options.id ?? `m${++this.#seq}`;
    this.#push({ id, body, attempt: 1, enqueuedAt: options.enqueuedAt ?? this.#now() });
    return id;
  }

  /** Messages queued, waiting out a retry delay, or in flight. */
  get pending(): number {
    return this.#queue.length - this.#head + this.#delayed.size + this.#inFlight;
  }

  /** Resolves when nothing is queued, delayed or in flight. */
  idle(): Promise<void> {
    if (this.pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly MemoryMessage[] | null> {
    while (this.#head === this.#queue.length) {
      if (this.#closed) return null;
      if (this.#endWhenEmpty && this.pending === 0) return null;
      if (signal.aborted) return [];
      await this.#waker.wait(signal);
    }
    const end = Math.min(this.#queue.length, this.#head + max);
    const batch = this.#queue.slice(this.#head, end);
    this.#head = end;
    if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue.splice(0, this.#head);
      this.#head = 0;
    }
    this.#inFlight += batch.length;
    return batch;
  }

  async settle(message: MemoryMessage, outcome: Outcome): Promise<void> {
    this.#inFlight--;
    this.settled.push({ message, outcome });
    if (outcome.kind === 'retry' && !this.#closed) {
      const timer = setTimeout(() => {
        this.#delayed.delete(timer);
        this.#push({ ...message, attempt: message.attempt + 1 });
      }, outcome.delayMs);
      this.#delayed.add(timer);
    }
    this.#checkIdle();
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const timer of this.#delayed) clearTimeout(timer);
    this.#delayed.clear();
    this.#waker.wake();
    this.#checkIdle();
  }

  #push(message: MemoryMessage): void {
    this.#queue.push(message);
    this.#waker.wake();
  }

  #checkIdle(): void {
    if (this.pending !== 0 && !this.#closed) return;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const w of waiters) w();
    // Wake a waiting receiver so an endWhenEmpty source can report exhaustion.
    if (this.#endWhenEmpty) this.#waker.wake();
  }
}

export function createMemorySource(options?: MemorySourceOptions): MemorySource {
  return new MemorySource(options);
}
