import { setTimeout as sleep } from 'node:timers/promises';
import { UsageError } from './common.js';

/** `N/s`, `N/m` (`N/min`), or a bare `N` (per second); N may be fractional. Returns per second. */
export function parseRate(flag: string, text: string): number {
  const match = /^(\d+(?:\.\d+)?)\s*(?:\/\s*(s|sec|m|min))?$/.exec(text.trim());
  const n = match ? Number(match[1]) : Number.NaN;
  if (!match || !(n > 0)) {
    throw new UsageError(`${flag} must be a rate such as 50/s or 120/min, got "${text}"`);
  }
  return match[2] === 'm' || match[2] === 'min' ? n / 60 : n;
}

/** `5%` or `0.05`, as a fraction in [0, 1]. */
export function parsePercent(flag: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const trimmed = text.trim();
  const value = trimmed.endsWith('%') ? Number(trimmed.slice(0, -1)) / 100 : Number(trimmed);
  if (trimmed === '' || !Number.isFinite(value) || value < 0 || value > 1) {
    throw new UsageError(`${flag} must be a share such as 5% or 0.05, got "${text}"`);
  }
  return value;
}

/**
 * Spaces calls evenly at `perSecond`: each `take()` resolves at the next free slot. No burst: the
 * first slot is now, the next 1/rate later. An aborted wait resolves `false`.
 */
export class Pacer {
  readonly #intervalMs: number;
  #next = 0;

  constructor(perSecond: number) {
    this.#intervalMs = 1000 / perSecond;
  }

  async take(signal?: AbortSignal): Promise<boolean> {
    const now = performance.now();
    const slot = Math.max(now, this.#next);
    this.#next = slot + this.#intervalMs;
    if (slot > now) {
      try {
        await sleep(slot - now, undefined, signal ? { signal } : {});
      } catch {
        this.#next -= this.#intervalMs; // the slot was not used
        return false;
      }
    }
    return true;
  }
}
