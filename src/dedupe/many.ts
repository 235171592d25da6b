import type { ClaimResult, DedupeStore, HeldClaim } from './types.js';

/** A store call that failed, in place of its answer (one per event, or one shared by a batch). */
export class StoreFailure {
  readonly error: unknown;

  constructor(error: unknown) {
    this.error = error;
  }
}

/**
 * Claims every event of a received batch: with the store's `claimMany` when it has one (one call
 * and one promise for the batch), one `claim` per event otherwise. Never rejects: a failed call
 * answers `StoreFailure` for each event it covered, so each message learns its own fate.
 */
export function claimEach(
  store: DedupeStore,
  eventIds: readonly string[],
  leaseMs: number,
): Promise<(ClaimResult | StoreFailure)[]> {
  if (store.claimMany && eventIds.length > 1) {
    return store.claimMany(eventIds, leaseMs).then(identity, (error: unknown) => failAll(eventIds, error));
  }
  return Promise.all(eventIds.map((id) => store.claim(id, leaseMs).then(identity, toFailure)));
}

/** Completes every claim, as `claimEach` claims: `completeMany` when the store has it. */
export function completeEach(
  store: DedupeStore,
  claims: readonly HeldClaim[],
  retentionMs: number,
): Promise<(boolean | StoreFailure)[]> {
  if (store.completeMany && claims.length > 1) {
    return store.completeMany(claims, retentionMs).then(identity, (error: unknown) => failAll(claims, error));
  }
  return Promise.all(
    claims.map((c) => store.complete(c.eventId, c.token, retentionMs).then(identity, toFailure)),
  );
}

function identity<T>(value: T): T {
  return value;
}

function toFailure(error: unknown): StoreFailure {
  return new StoreFailure(error);
}

function failAll(items: readonly unknown[], error: unknown): StoreFailure[] {
  const failure = new StoreFailure(error);
  return items.map(() => failure);
}
