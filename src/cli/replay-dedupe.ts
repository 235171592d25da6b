import { ConfigError } from '../core/errors.js';
import { createMemoryDedupe } from '../dedupe/memory.js';
import type { ClaimResult, DedupeState, DedupeStore } from '../dedupe/types.js';

const FORCED = 'forced:';

/**
 * `replay --forward --force`: an event the store marks done is claimed anyway, once per run (a
 * second copy in the same file is still a duplicate), and `onForced` is told. The store's record
 * is left as it is: done. Events the store does not know go through it as usual.
 */
export function forcingDedupe(store: DedupeStore, onForced: (eventId: string) => void): DedupeStore {
  const forced = new Map<string, 'held' | 'done'>();
  return {
    async claim(eventId: string, leaseMs: number): Promise<ClaimResult> {
      const result = await store.claim(eventId, leaseMs);
      if (result.status !== 'duplicate') return result;
      const state = forced.get(eventId);
      if (state === 'done') return result;
      if (state === 'held') return { status: 'in_progress', retryAfterMs: 500 };
      forced.set(eventId, 'held');
      onForced(eventId);
      return { status: 'claimed', token: `${FORCED}${eventId}` };
    },
    async extend(eventId, token, leaseMs) {
      return token.startsWith(FORCED) ? true : store.extend(eventId, token, leaseMs);
    },
    async complete(eventId, token, retentionMs) {
      if (!token.startsWith(FORCED)) return store.complete(eventId, token, retentionMs);
      forced.set(eventId, 'done');
      return true;
    },
    async release(eventId, token) {
      if (token.startsWith(FORCED)) forced.delete(eventId);
      else await store.release(eventId, token);
    },
    peek: (eventId: string): Promise<DedupeState> => store.peek(eventId),
    get available() {
      return store.available ?? true;
    },
    close: () => store.close(),
  };
}

/**
 * `replay --to --force` deletes the store's done record of each forced event: a store that cannot
 * is refused before anything is sent (and by the dry run, which must decide as the run does).
 */
export function checkCanForget(store: DedupeStore): void {
  if (!store.forget) {
    throw new ConfigError(
      '--force with --to needs a dedupe store that can forget an event (sqlite:, redis:): this one cannot',
    );
  }
}

/**
 * `replay --to`: the worker's store is only read (the worker claims and completes when it
 * processes the re-injected envelope); an event it marks done is a duplicate unless `force`.
 * With `force`, the store's done record is deleted (`forget`) just before the event is
 * re-injected, so the worker handles it again instead of acking it as a duplicate.
 * Claims for this run are kept in memory, so two copies in one file are injected once.
 */
export function injectingDedupe(
  store: DedupeStore,
  options: { force: boolean; onForced: (eventId: string) => void },
): DedupeStore {
  const forget = store.forget?.bind(store);
  if (options.force) checkCanForget(store);
  const run = createMemoryDedupe();
  return {
    async claim(eventId: string, leaseMs: number): Promise<ClaimResult> {
      if ((await store.peek(eventId)) === 'done') {
        if (!options.force || !forget) return { status: 'duplicate' };
        const result = await run.claim(eventId, leaseMs);
        if (result.status !== 'claimed') return result;
        try {
          await forget(eventId);
        } catch (error) {
          await run.release(eventId, result.token);
          throw error;
        }
        options.onForced(eventId);
        return result;
      }
      return run.claim(eventId, leaseMs);
    },
    extend: (eventId, token, leaseMs) => run.extend(eventId, token, leaseMs),
    complete: (eventId, token, retentionMs) => run.complete(eventId, token, retentionMs),
    release: (eventId, token) => run.release(eventId, token),
    peek: (eventId: string) => store.peek(eventId),
    get available() {
      return store.available ?? true;
    },
    async close() {
      await Promise.all([run.close(), store.close()]);
    },
  };
}
