/**
 * Wraps a real adapter and records, with timestamps, what reached the broker and what did not:
 * each receive (messages or error) and each settle (ack / retry / dead, ok or failed). The
 * consumer logs a failed settle and moves on (the broker redelivers), so its reports alone cannot
 * tell an ack the broker applied from one it never got.
 */

import type { Outcome } from '../../../src/core/outcome.js';
import type { RawMessage, SourceAdapter } from '../../../src/core/source-adapter.js';

export type ObservedKind = 'receive-ok' | 'receive-error' | 'settle-ok' | 'settle-error';

export interface Observation {
  readonly t: number;
  readonly kind: ObservedKind;
  /** Messages received, for receive-ok. */
  readonly count?: number;
  readonly outcome?: Outcome['kind'];
  readonly error?: string;
}

export class ObservedSource<M extends RawMessage> implements SourceAdapter<M> {
  readonly name: string;
  readonly maxBatchSize: number;
  readonly heartbeatIntervalMs?: number;
  readonly maxReceiveWaitMs?: number;
  readonly heartbeat?: (message: M) => Promise<void>;
  readonly log: Observation[] = [];
  readonly #inner: SourceAdapter<M>;

  constructor(inner: SourceAdapter<M>) {
    this.#inner = inner;
    this.name = inner.name;
    this.maxBatchSize = inner.maxBatchSize;
    if (inner.heartbeatIntervalMs !== undefined) this.heartbeatIntervalMs = inner.heartbeatIntervalMs;
    if (inner.maxReceiveWaitMs !== undefined) this.maxReceiveWaitMs = inner.maxReceiveWaitMs;
    const beat = inner.heartbeat?.bind(inner);
    if (beat) this.heartbeat = beat;
  }

  /** The inner adapter's view (absent there means unknown, which readiness takes as connected). */
  get connected(): boolean {
    return this.#inner.connected ?? true;
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly M[] | null> {
    try {
      const batch = await this.#inner.receive(max, signal);
      this.log.push({ t: Date.now(), kind: 'receive-ok', count: batch?.length ?? 0 });
      return batch;
    } catch (error) {
      this.log.push({ t: Date.now(), kind: 'receive-error', error: (error as Error).message });
      throw error;
    }
  }

  async settle(message: M, outcome: Outcome): Promise<void> {
    try {
      await this.#inner.settle(message, outcome);
      this.log.push({ t: Date.now(), kind: 'settle-ok', outcome: outcome.kind });
    } catch (error) {
      this.log.push({
        t: Date.now(),
        kind: 'settle-error',
        outcome: outcome.kind,
        error: (error as Error).message,
      });
      throw error;
    }
  }

  close(): Promise<void> {
    return this.#inner.close();
  }

  /** Observations of `kind` in [from, to]. */
  between(kind: ObservedKind, from: number, to: number, outcome?: Outcome['kind']): Observation[] {
    return this.log.filter(
      (o) => o.kind === kind && o.t >= from && o.t <= to && (outcome === undefined || o.outcome === outcome),
    );
  }

  /** The first observation of `kind` at or after `from` (with messages, for receive-ok). */
  firstAfter(kind: ObservedKind, from: number): Observation | undefined {
    return this.log.find(
      (o) => o.kind === kind && o.t >= from && (kind !== 'receive-ok' || (o.count ?? 0) > 0),
    );
  }
}
