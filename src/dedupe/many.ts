import type { BatchCallOptions, ClaimResult, DedupeStore, HeldClaim } from './types.js';

/** A store call that failed, in place of its answer (one per event, or one shared by a batch). */
export class StoreFailure {
  readonly error: unknown;

  constructor(error: unknown) {
    this.error = error;
  }
}

/** One event's claim; never rejects nor throws: a failed call answers `StoreFailure`. */
export function claimOne(
  store: DedupeStore,
  eventId: string,
  leaseMs: number,
): Promise<ClaimResult | StoreFailure> {
  try {
    return store.claim(eventId, leaseMs).then(identity, toFailure);
  } catch (error) {
    // A store that throws instead of rejecting (or answers no promise) failed all the same.
    return Promise.resolve(new StoreFailure(error));
  }
}

/** One claim's complete; never rejects, as `claimOne`. */
export function completeOne(
  store: DedupeStore,
  claim: HeldClaim,
  retentionMs: number,
): Promise<boolean | StoreFailure> {
  try {
    return store.complete(claim.eventId, claim.token, retentionMs).then(identity, toFailure);
  } catch (error) {
    return Promise.resolve(new StoreFailure(error));
  }
}

/**
 * Claims the events of a batch: with the store's `claimMany` when it has one (one call, one
 * promise), one `claim` per event otherwise. Never rejects: a failed call answers `StoreFailure`
 * for each event it covered.
 */
export function claimAll(
  store: DedupeStore,
  eventIds: readonly string[],
  leaseMs: number,
  options?: BatchCallOptions,
): Promise<(ClaimResult | StoreFailure)[]> {
  if (store.claimMany && eventIds.length > 1) {
    try {
      return store.claimMany(eventIds, leaseMs, options).then(identity, failAll(eventIds));
    } catch (error) {
      return Promise.resolve(failAll(eventIds)(error));
    }
  }
  return Promise.all(eventIds.map((id) => claimOne(store, id, leaseMs)));
}

/** Completes the claims of a batch, as `claimAll` claims: `completeMany` when the store has it. */
export function completeAll(
  store: DedupeStore,
  claims: readonly HeldClaim[],
  retentionMs: number,
  options?: BatchCallOptions,
): Promise<(boolean | StoreFailure)[]> {
  if (store.completeMany && claims.length > 1) {
    try {
      return store.completeMany(claims, retentionMs, options).then(identity, failAll(claims));
    } catch (error) {
      return Promise.resolve(failAll(claims)(error));
    }
  }
  return Promise.all(claims.map((c) => completeOne(store, c, retentionMs)));
}

function identity<T>(value: T): T {
  return value;
}

function toFailure(error: unknown): StoreFailure {
  return new StoreFailure(error);
}

/** Answers every item of a failed call with the same failure. */
function failAll(items: readonly unknown[]): (error: unknown) => StoreFailure[] {
  return (error) => {
    const failure = new StoreFailure(error);
    return items.map(() => failure);
  };
}
