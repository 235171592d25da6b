import type { VerificationCode } from './errors.js';
import type { Outcome, RetryPolicy } from './outcome.js';

/** One message as the broker delivered it. `body` is kept exactly as received, for the HMAC. */
export interface RawMessage {
  /** The broker's id for this delivery (for logs and dead letters). */
  readonly id: string;
  readonly body: string | Uint8Array;
  /** 1-based delivery count (SQS ApproximateReceiveCount, Storage Queue dequeueCount, …). */
  readonly attempt: number;
  /** When the broker accepted the message, in ms; the reference for the age check. */
  readonly enqueuedAt?: number | undefined;
  /** Broker facts worth keeping in a dead-letter record. */
  readonly metadata?: Readonly<Record<string, string | number | boolean | null>>;
  /**
   * Set by an adapter that already knows the message cannot be verified as delivered (its
   * transport encoding does not match the configuration): the pipeline dead-letters it with this
   * code and reason, and the raw message is kept for replay.
   */
  readonly rejection?: { readonly code: VerificationCode; readonly reason: string };
  /**
   * Set when `body` is only the first bytes of a message (read back from a truncated dead-letter
   * record): the whole message's length and SHA-256 (hex), kept in its next dead-letter record.
   */
  readonly truncated?: { readonly bytes: number; readonly sha256: string };
  /**
   * The trace context the message carried (SQS message attributes or `AWSTraceHeader`, Event
   * Hubs application properties, HTTP headers). The delivery span links to it: a link, not a
   * parent, since the producer's trace may be huge or untrusted.
   */
  readonly traceContext?: TraceCarrier | undefined;
}

/**
 * Size of a message as held in memory, for `maxInFlightBytes` and the store's commit timing:
 * bytes of a binary body, characters of a text one (nothing is scanned).
 */
export function messageSize(message: RawMessage): number {
  const { body } = message;
  return typeof body === 'string' ? body.length : body.byteLength;
}

/** W3C trace context as a message carried it, or an AWS X-Ray trace header. Unchecked text. */
export interface TraceCarrier {
  readonly traceparent?: string | undefined;
  readonly tracestate?: string | undefined;
  readonly awsTraceHeader?: string | undefined;
}

/**
 * The one interface every transport implements. The worker calls `receive` while it has free
 * capacity, runs the pipeline, and hands each message's outcome to `settle`, which maps it onto
 * the broker (delete, change visibility, checkpoint, HTTP status).
 */
export interface SourceAdapter<M extends RawMessage = RawMessage> {
  /** A short name for logs and dead-letter records, e.g. `sqs:orders`. */
  readonly name: string;
  /** The most messages one `receive` call returns. */
  readonly maxBatchSize: number;
  /**
   * Waits for up to `max` messages. Returns `[]` when a wait ended empty and `null` once the
   * source is exhausted for good (a file read to its end). Must return promptly when `signal`
   * aborts.
   */
  receive(max: number, signal: AbortSignal): Promise<readonly M[] | null>;
  /** Applies an outcome. A message is settled exactly once. */
  settle(message: M, outcome: Outcome): Promise<void>;
  /**
   * Keeps a message that is still being handled invisible to other consumers. Called every
   * `heartbeatIntervalMs`; when it throws, the handler is aborted and the message is not acked.
   */
  heartbeat?(message: M): Promise<void>;
  readonly heartbeatIntervalMs?: number;
  /**
   * The longest one `receive` may block when all is well (an SQS long poll: 20 s). The sidecar's
   * watchdog reports the worker not ready when a receive hangs well beyond it. Leave it out for
   * sources that wait for pushes (HTTP ingress, files, memory).
   */
  readonly maxReceiveWaitMs?: number;
  /**
   * How many `receive` calls may run at once (`receive` must then be safe to call concurrently).
   * Default 1. A source whose receive is a network round trip (SQS) allows more, so that fetching
   * keeps up when `concurrency` is several batches; the consumer runs
   * `min(this, ceil(concurrency / maxBatchSize))` pollers.
   */
  readonly maxConcurrentReceives?: number;
  /**
   * The longest retry schedule this source's messages may get: each field caps the consumer's
   * `retry` setting (the smaller value wins). Set by a source whose messages can never change and
   * whose run should end (a file), so that a failure that will not heal by itself ends in the
   * dead letters within seconds, not after a broker-length backoff. Brokers leave it out.
   */
  readonly retryBound?: RetryPolicy;
  /**
   * Set by a finite source that holds its own retries in memory (a file): how far it got. `run`
   * prints the pending retries from it and exits 1 when such a source ends short of `done`.
   */
  readonly progress?: FiniteSourceProgress;
  /** False while the source knows it cannot reach its broker (readiness). Absent means unknown. */
  readonly connected?: boolean;
  close(): Promise<void>;
}

/** Where a finite source stands (`SourceAdapter.progress`). */
export interface FiniteSourceProgress {
  /** Read to its end, and every message settled for good (acked or dead-lettered). */
  readonly done: boolean;
  /** Messages given back for a retry, waiting in memory for their delay. */
  readonly pendingRetries: number;
  /** When the next of them comes due (ms since the epoch); undefined when none waits. */
  readonly nextRetryAt: number | undefined;
  /**
   * Set when reading the source failed (a file that is a directory, an I/O error): why, as its
   * error says (redacted). The end was never reached, so `done` stays false.
   */
  readonly failure?: string;
}
