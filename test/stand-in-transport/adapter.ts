import { readdir, readFile, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { ConfigError } from '../../src/core/errors.js';
import type { Outcome } from '../../src/core/outcome.js';
import type { RawMessage, SourceAdapter } from '../../src/core/source-adapter.js';
import { type StandInOptions, standInOptionsSchema } from './options.js';

/** One envelope file of the spool directory. */
export interface StandInMessage extends RawMessage {
  readonly file: string;
}

/**
 * A stand-in transport for the registry's tests: a spool directory is the queue. Each `*.json`
 * file is one message (its modification time the enqueue time); ack and dead delete it, a retry
 * leaves it and hands it out again after the delay, with the attempt raised.
 */
export class StandInSource implements SourceAdapter<StandInMessage> {
  readonly name: string;
  readonly maxBatchSize: number;
  readonly #directory: string;
  readonly #pollIntervalMs: number;
  readonly #endWhenEmpty: boolean;
  readonly #inFlight = new Set<string>();
  readonly #delayed = new Map<string, NodeJS.Timeout>();
  readonly #attempts = new Map<string, number>();
  readonly #closing = new AbortController();

  constructor(options: StandInOptions) {
    const { directory, ...rest } = options;
    const parsed = standInOptionsSchema.safeParse(rest);
    if (!parsed.success) {
      throw new ConfigError(`invalid stand-in options:\n${z.prettifyError(parsed.error)}`);
    }
    this.#directory = directory;
    this.name = `stand-in:${directory}`;
    this.maxBatchSize = parsed.data.maxBatchSize;
    this.#pollIntervalMs = parsed.data.pollIntervalMs;
    this.#endWhenEmpty = parsed.data.endWhenEmpty;
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly StandInMessage[] | null> {
    for (;;) {
      if (this.#closing.signal.aborted) return null;
      const names = (await readdir(this.#directory))
        .filter((name) => name.endsWith('.json') && !this.#inFlight.has(name) && !this.#delayed.has(name))
        .sort()
        .slice(0, Math.max(1, Math.min(max, this.maxBatchSize)));
      if (names.length > 0) return Promise.all(names.map((name) => this.#read(name)));
      if (this.#endWhenEmpty && this.#inFlight.size === 0 && this.#delayed.size === 0) return null;
      if (signal.aborted) return [];
      const wake = AbortSignal.any([signal, this.#closing.signal]);
      await sleep(this.#pollIntervalMs, undefined, { signal: wake }).catch(() => undefined);
      if (signal.aborted) return [];
    }
  }

  async settle(message: StandInMessage, outcome: Outcome): Promise<void> {
    if (outcome.kind === 'retry') {
      this.#inFlight.delete(message.file);
      this.#attempts.set(message.file, message.attempt + 1);
      const timer = setTimeout(() => this.#delayed.delete(message.file), outcome.delayMs);
      this.#delayed.set(message.file, timer);
      return;
    }
    this.#attempts.delete(message.file);
    // Still in flight until its file is gone, so that a receive meanwhile does not list it again.
    try {
      await unlink(join(this.#directory, message.file)).catch((error: NodeJS.ErrnoException) => {
        if (error.code !== 'ENOENT') throw error;
      });
    } finally {
      this.#inFlight.delete(message.file);
    }
  }

  async close(): Promise<void> {
    this.#closing.abort();
    for (const timer of this.#delayed.values()) clearTimeout(timer);
    this.#delayed.clear();
  }

  async #read(file: string): Promise<StandInMessage> {
    this.#inFlight.add(file);
    const path = join(this.#directory, file);
    let body: Buffer;
    let info: Awaited<ReturnType<typeof stat>>;
    try {
      [body, info] = await Promise.all([readFile(path), stat(path)]);
    } catch (error) {
      this.#inFlight.delete(file); // not received: an end-when-empty run must not wait for it
      throw error;
    }
    return {
      id: file,
      file,
      body: new Uint8Array(body),
      attempt: this.#attempts.get(file) ?? 1,
      enqueuedAt: info.mtimeMs,
    };
  }
}

export function createStandInSource(options: StandInOptions): StandInSource {
  return new StandInSource(options);
}
