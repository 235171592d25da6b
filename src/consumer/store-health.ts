import type { Logger } from 'pino';
import type { DedupeStore } from '../dedupe/types.js';
import type { ProcessResult } from './pipeline.js';

/**
 * Whether the dedupe store is answering, as the results of the last messages say (each result
 * tells whether the store answered for it). An outage fails every message the same way, so its
 * start and end are logged once each, not once per message.
 */
export class StoreHealth {
  readonly #store: DedupeStore;
  readonly #logger: Logger;
  /** Set by a result the store did not answer, cleared by the next one it answered. */
  #failing = false;

  constructor(store: DedupeStore, logger: Logger) {
    this.#store = store;
    this.#logger = logger;
  }

  /** False while the store is unreachable; a store that reports its connection is trusted. */
  get available(): boolean {
    return this.#store.available ?? !this.#failing;
  }

  /** Notes the store's part in one result; true when the store failed it (an outage). */
  note(result: ProcessResult): boolean {
    if (result.store === 'unavailable') {
      if (!this.#failing) {
        this.#failing = true;
        const { outcome } = result;
        this.#logger.error(
          { reason: outcome.kind === 'ack' ? undefined : outcome.reason },
          'dedupe store unavailable: events are not acked; they are retried until it answers',
        );
      }
      return true;
    }
    // A store that reports its own state decides when the outage ended: on a Redis Cluster with
    // one master down, events of the other slots are answered all along.
    if (result.store === 'answered' && this.#failing && this.#store.available !== false) {
      this.#failing = false;
      this.#logger.warn('dedupe store answering again');
    }
    return false;
  }
}
