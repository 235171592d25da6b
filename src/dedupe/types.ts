/**
 * De-duplication on `event_id` as a lease, not a flag:
 *
 *   claim ──► handler ──► complete   (done: later deliveries are duplicates for `retentionMs`)
 *         └─► handler fails ──► release (the next delivery may claim again)
 *
 * A claim held by another live worker means "not now" (`in_progress`): the message is retried
 * later, never acked as a duplicate. A claim whose lease expired (its worker crashed) can be
 * taken over. Every call carries the owner token returned by `claim`, so a worker whose lease
 * was taken over cannot complete or release someone else's claim.
 */
export type ClaimResult =
  | {
      readonly status: 'claimed';
      readonly token: string;
      /**
       * Earlier claims of this event that ended without `complete` or `release`: their lease
       * expired because the worker died or hung while handling it. A store that does not count
       * them leaves this out (read as 0).
       */
      readonly abandoned?: number;
    }
  | { readonly status: 'duplicate' }
  | { readonly status: 'in_progress'; readonly retryAfterMs: number };

export type DedupeState = 'absent' | 'in_progress' | 'done';

/** A claim this worker holds: the event and the token its claim returned. */
export interface HeldClaim {
  readonly eventId: string;
  readonly token: string;
}

/** How a batch call (`claimMany`, `completeMany`) wants to be committed. */
export interface BatchCallOptions {
  /**
   * Commit without waiting for other calls to share the commit. A store that groups the calls
   * of a turn of the event loop into one commit (SQLite) commits this call, with those queued
   * before it, once the current code has run instead of in the next turn. The consumer asks for
   * it when the batch's messages are large: kept alive for a turn, they cost the garbage
   * collector more than the shared commit saves. Stores that do not group calls ignore it.
   */
  readonly commitAtOnce?: boolean;
}

export interface DedupeStore {
  /** Takes the lease for `eventId` for `leaseMs`, unless it is done or leased by someone else. */
  claim(eventId: string, leaseMs: number): Promise<ClaimResult>;
  /**
   * Claims several events in one call, answering for each what `claim` would, in order (a repeated
   * id sees the lease its earlier copy took). A rejection means none was claimed. Optional: the
   * consumer claims a received batch with it when present, one `claim` per event otherwise.
   */
  claimMany?(
    eventIds: readonly string[],
    leaseMs: number,
    options?: BatchCallOptions,
  ): Promise<ClaimResult[]>;
  /** Extends a held lease (heartbeat for slow handlers). False when the lease is no longer ours. */
  extend(eventId: string, token: string, leaseMs: number): Promise<boolean>;
  /** Marks the event done for `retentionMs`. False when the lease was lost to another worker. */
  complete(eventId: string, token: string, retentionMs: number): Promise<boolean>;
  /**
   * Completes several events in one call, answering for each what `complete` would, in order. A
   * rejection means none was completed. Optional, like `claimMany`.
   */
  completeMany?(
    claims: readonly HeldClaim[],
    retentionMs: number,
    options?: BatchCallOptions,
  ): Promise<boolean[]>;
  /** Gives a held lease back so the next delivery can claim it. */
  release(eventId: string, token: string): Promise<void>;
  /** Reads the state without changing it (dry runs, diagnostics). */
  peek(eventId: string): Promise<DedupeState>;
  /**
   * Deletes a *done* record, so that the next delivery of the event is handled again
   * (`partner-events replay --force --to`). A lease in progress is left alone. True when a done
   * record was deleted. Optional: stores without it cannot be used to re-apply events.
   */
  forget?(eventId: string): Promise<boolean>;
  /** False while the store is known to be unreachable (readiness checks). Absent means always. */
  readonly available?: boolean;
  /**
   * Where the state lives, for callers that must know whether it outlives this process (a
   * serverless wrapper refuses a store lost at the next cold start). Absent means unknown.
   */
  readonly persistence?: DedupePersistence;
  close(): Promise<void>;
}

/** `process`: lost when the process ends (memory); `file`: a database file; `server`: a shared server (Redis). */
export type DedupePersistence =
  | { readonly kind: 'process' }
  | { readonly kind: 'file'; readonly path: string }
  | { readonly kind: 'server' };

/**
 * How long a store remembers a claim that was abandoned (its lease expired without complete or
 * release), so that a handler that keeps killing its worker is noticed: 24 h.
 */
export const ABANDONED_CLAIM_MEMORY_MS = 24 * 60 * 60 * 1000;

/** 7 days: well past the publisher's 48-hour retry window. */
export const DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;
/** 60 s lease, extended every third of it while the handler runs. */
export const DEFAULT_LEASE_MS = 60_000;
/** The publisher's maximum retry window (spec, Events → Delivery). */
export const PUBLISHER_RETRY_WINDOW_MS = 48 * 60 * 60 * 1000;
