import type { Logger } from 'pino';
import { errorMessage } from '../core/errors.js';

/** A part a command opens at start: a source, a dedupe store, a forwarder. */
export interface Closable {
  close(): Promise<void>;
}

/**
 * What a command has opened so far while it starts, so that a later step's failure closes it
 * before the error propagates. Without this, a listening HTTP ingress or an open Redis connection
 * keeps the event loop, and so the process, alive after the error is printed: the exit 2 never
 * comes, and the ingress holds senders' POSTs without an answer.
 */
export class OpenedAtStart {
  readonly #parts: { readonly name: string; readonly part: Closable }[] = [];
  readonly #logger: Logger;

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  /** Records `part` (named in a failed close's log line) and returns it. */
  add<T extends Closable>(name: string, part: T): T {
    this.#parts.push({ name, part });
    return part;
  }

  /**
   * Closes every part in the reverse order of opening (a forwarder before the store it follows,
   * the store before the source). A close that fails is logged and the next one still runs: the
   * error that matters is the one that stopped the start, which the caller rethrows.
   */
  async closeAll(): Promise<void> {
    for (const { name, part } of this.#parts.splice(0).reverse()) {
      try {
        await part.close();
      } catch (error) {
        this.#logger.warn({ part: name, err: errorMessage(error) }, 'close after a failed start failed');
      }
    }
  }
}
