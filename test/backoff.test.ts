/**
 * Property tests of the one backoff helper (fast-check prints the seed and the shrunk
 * counterexample on failure; re-run with `{ seed, path }` to reproduce).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type BackoffOptions, backoff } from '../src/core/backoff.js';

const params = { numRuns: 300 };

/** Any numbers a caller may pass, a zero base and attempts far past any real count included. */
const optionsArb: fc.Arbitrary<BackoffOptions> = fc.record({
  baseMs: fc.integer({ min: 0, max: 10 * 60_000 }),
  maxMs: fc.integer({ min: 0, max: 7 * 24 * 3_600_000 }),
  jitter: fc.constantFrom('equal' as const, 'none' as const),
});
const attemptArb = fc.oneof(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 1_000_000 }));
/** What `Math.random` returns: [0, 1). */
const randomArb = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true });

/** The delay without jitter: `min(maxMs, baseMs × 2^(attempt − 1))`, computed the slow way. */
function ceiling(attempt: number, { baseMs, maxMs }: BackoffOptions): number {
  let delay = baseMs;
  for (let i = 1; i < attempt && delay > 0 && delay < maxMs; i++) delay *= 2;
  return Math.min(maxMs, delay);
}

describe('backoff', () => {
  it('stays within [0, maxMs], is a whole number of ms, and never more than the exponential ceiling', () => {
    fc.assert(
      fc.property(attemptArb, optionsArb, randomArb, (attempt, options, r) => {
        const delay = backoff(attempt, options, () => r);
        expect(Number.isInteger(delay)).toBe(true);
        expect(delay).toBeGreaterThanOrEqual(0);
        expect(delay).toBeLessThanOrEqual(options.maxMs);
        expect(delay).toBeLessThanOrEqual(Math.round(ceiling(attempt, options)));
      }),
      params,
    );
  });

  it('its cap never decreases from one attempt to the next', () => {
    fc.assert(
      fc.property(attemptArb, optionsArb, (attempt, options) => {
        // With the random part fixed, the delays follow the ceiling: never smaller for a later attempt.
        for (const r of [0, 0.5, 0.999]) {
          expect(backoff(attempt + 1, options, () => r)).toBeGreaterThanOrEqual(
            backoff(attempt, options, () => r),
          );
        }
      }),
      params,
    );
  });

  it('equal jitter: between half the ceiling and the ceiling; none: the ceiling exactly', () => {
    fc.assert(
      fc.property(attemptArb, optionsArb, randomArb, (attempt, options, r) => {
        const top = ceiling(attempt, options);
        if (options.jitter === 'none') {
          expect(backoff(attempt, options, () => r)).toBe(Math.round(top));
          return;
        }
        const delay = backoff(attempt, options, () => r);
        expect(delay).toBeGreaterThanOrEqual(Math.floor(top / 2));
        expect(delay).toBeLessThanOrEqual(Math.ceil(top));
        // The random part moves the delay across the whole upper half.
        expect(backoff(attempt, options, () => 0)).toBe(Math.round(top / 2));
      }),
      params,
    );
  });

  it('doubles from baseMs (the numbers the kit uses)', () => {
    const none = { baseMs: 500, maxMs: 30_000, jitter: 'none' } as const;
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((a) => backoff(a, none))).toEqual([
      500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000,
    ]);
    const equal = { baseMs: 2000, maxMs: 600_000, jitter: 'equal' } as const;
    expect(backoff(1, equal, () => 0)).toBe(1000);
    expect(backoff(1, equal, () => 0.999_999)).toBe(2000);
    expect(backoff(3, equal, () => 0)).toBe(4000);
  });

  it('treats an attempt below 1 as the first', () => {
    const options = { baseMs: 100, maxMs: 1000, jitter: 'none' } as const;
    expect(backoff(0, options)).toBe(100);
    expect(backoff(-3, options)).toBe(100);
  });
});
