import type { ClaimResult, DedupeStore, HeldClaim } from './types.js';

/** A store call that failed, in place of its answer (one per event, or one shared by a batch). */
export class StoreFailure {
  readonly error: unknown;

  constructor(error: unknown) {
    this.error = error;
  }
}

/**
 * Claims the events of a batch with the store's `claimMany` (one call, one promise; a single
 * event: the plain `claim`). Never rejects: a failed call answers `StoreFailure` for each event.
 */
export function claimAll(
  store: DedupeStore & Pick<Required<DedupeStore>, 'claimMany'>,
  eventIds: readonly string[],
  leaseMs: number,
): Promise<(ClaimResult | StoreFailure)[]> {
  if (eventIds.length === 1) {
    return store.claim(eventIds[0] as string, leaseMs).then((answer) => [answer], failAll(eventIds));
  }
  return store.claimMany(eventIds, leaseMs).then(identity, failAll(eventIds));
}

/**
 * Completes the claims of a batch: with `completeMany` when the store has it, one `complete` per
 * claim otherwise. Never rejects: a failed call answers `StoreFailure` for each claim it covered.
 */
export function completeAll(
  store: DedupeStore,
  claims: readonly HeldClaim[],
  retentionMs: number,
): Promise<(boolean | StoreFailure)[]> {
  if (store.completeMany && claims.length > 1) {
    return store.completeMany(claims, retentionMs).then(identity, failAll(claims));
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

/** Answers every item of a failed call with the same failure. */
function failAll(items: readonly unknown[]): (error: unknown) => StoreFailure[] {
  return (error) => {
    const failure = new StoreFailure(error);
    return items.map(() => failure);
  };
}
