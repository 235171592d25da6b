/**
 * The publishing side of a transport, for the CLI's `--to` (replay, trigger, simulate): puts an
 * envelope on a queue exactly as given. Implemented per transport next to its adapter.
 */

/** One envelope to put on a target: the exact message bytes, with its ids for broker metadata. */
export interface OutgoingMessage {
  readonly body: string | Uint8Array;
  readonly eventId?: string | undefined;
  readonly eventType?: string | undefined;
}

/**
 * What the target answered. Queues accept every message (`accepted: true`); an HTTP ingress
 * answers with the worker's verdict, so `accepted` is false for a non-2xx status.
 */
export interface Delivery {
  readonly accepted: boolean;
  /** e.g. `sent`, `HTTP 200`, `HTTP 422 SIGNATURE_MISMATCH`. */
  readonly detail: string;
  readonly status?: number;
  /** Seconds, from an HTTP `Retry-After`. */
  readonly retryAfterSeconds?: number;
}

export interface Target {
  /** For logs and reports; never holds a credential. */
  readonly name: string;
  /**
   * Throws an `AdapterError` when the message could not be handed over (network, auth, no queue);
   * an HTTP target throws a `ForwardError` (`FORWARD_ANSWER_INCOMPLETE`) when a 2xx answer's body
   * did not arrive whole.
   */
  send(message: OutgoingMessage): Promise<Delivery>;
  close(): Promise<void>;
}
