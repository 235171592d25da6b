import { randomUUID } from 'node:crypto';
import {
  ABANDONED_CLAIM_MEMORY_MS,
  type ClaimResult,
  type DedupeState,
  type DedupeStore,
  type HeldClaim,
} from './types.js';

interface Entry {
  done: boolean;
  token: string;
  expiresAt: number;
  /** Claims since the entry was created or released; all but the current one were abandoned. */
  claims: number;
}

export interface MemoryDedupeOptions {
  /** Clock in ms, injectable for tests. */
  now?: () => number;
}

/**
 * An in-process store for tests and single-process consumers that accept losing the dedupe
 * state on restart. Expired entries are swept lazily.
 */
export class MemoryDedupeStore implements DedupeStore {
  readonly persistence = { kind: 'process' } as const;
  readonly #entries = new Map<string, Entry>();
  readonly #now: () => number;
  #sweepAt = 0;

  constructor(options: MemoryDedupeOptions = {}) {
    this.#now = options.now ?? Date.now;
  }

  async claim(eventId: string, leaseMs: number): Promise<ClaimResult> {
    return this.#claimOne(eventId, leaseMs, this.#now());
  }

  async claimMany(eventIds: readonly string[], leaseMs: number): Promise<ClaimResult[]> {
    const now = this.#now();
    return eventIds.map((eventId) => this.#claimOne(eventId, leaseMs, now));
  }

  async extend(eventId: string, token: string, leaseMs: number): Promise<boolean> {
    const entry = this.#owned(eventId, token);
    if (!entry) return false;
    entry.expiresAt = this.#now() + leaseMs;
    return true;
  }

  async complete(eventId: string, token: string, retentionMs: number): Promise<boolean> {
    return this.#completeOne(eventId, token, this.#now() + retentionMs);
  }

  async completeMany(claims: readonly HeldClaim[], retentionMs: number): Promise<boolean[]> {
    const expiresAt = this.#now() + retentionMs;
    return claims.map((c) => this.#completeOne(c.eventId, c.token, expiresAt));
  }

  async release(eventId: string, token: string): Promise<void> {
    if (this.#owned(eventId, token)) this.#entries.delete(eventId);
  }

  async peek(eventId: string): Promise<DedupeState> {
    const entry = this.#entries.get(eventId);
    if (!entry || entry.expiresAt <= this.#now()) return 'absent';
    return entry.done ? 'done' : 'in_progress';
  }

  async forget(eventId: string): Promise<boolean> {
    const entry = this.#entries.get(eventId);
    if (!entry?.done || entry.expiresAt <= this.#now()) return false;
    return this.#entries.delete(eventId);
  }

  async close(): Promise<void> {
    this.#entries.clear();
  }

  #claimOne(eventId: string, leaseMs: number, now: number): ClaimResult {
    this.#sweep(now);
    const entry = this.#entries.get(eventId);
    if (entry && entry.expiresAt > now) {
      return entry.done
        ? { status: 'duplicate' }
        : { status: 'in_progress', retryAfterMs: entry.expiresAt - now };
    }
    const token = randomUUID();
    // An expired lease that was neither completed nor released was abandoned: keep counting.
    const claims = entry && !entry.done ? entry.claims + 1 : 1;
    this.#entries.set(eventId, { done: false, token, expiresAt: now + leaseMs, claims });
    return { status: 'claimed', token, abandoned: claims - 1 };
  }

  #completeOne(eventId: string, token: string, expiresAt: number): boolean {
    const entry = this.#owned(eventId, token);
    if (!entry) return false;
    entry.done = true;
    entry.expiresAt = expiresAt;
    return true;
  }

  #owned(eventId: string, token: string): Entry | undefined {
    const entry = this.#entries.get(eventId);
    // An expired lease that nobody took over is still ours: the token is what proves ownership.
    if (!entry || entry.done || entry.token !== token) return undefined;
    return entry;
  }

  #sweep(now: number): void {
    if (now < this.#sweepAt) return;
    this.#sweepAt = now + 60_000;
    for (const [id, entry] of this.#entries) {
      // An abandoned claim is remembered a while longer, to count the next abandonment.
      const until = entry.done ? entry.expiresAt : entry.expiresAt + ABANDONED_CLAIM_MEMORY_MS;
      if (until <= now) this.#entries.delete(id);
    }
  }
}

export function createMemoryDedupe(options?: MemoryDedupeOptions): MemoryDedupeStore {
  return new MemoryDedupeStore(options);
}
