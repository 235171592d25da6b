import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { median, medianInterval } from '../bench/stats.js';

describe('medianInterval (bench/stats.ts)', () => {
  const oneTo = (n: number) => Array.from({ length: n }, (_, i) => n - i); // unsorted on purpose

  it('takes the order statistics the binomial tails allow', () => {
    // n = 8: P(B <= 0) = 0.0039, P(B <= 1) = 0.035, so one value is left out at each end (99.2 %).
    expect(medianInterval(oneTo(8))).toEqual({ low: 2, high: 7 });
    // n = 40: P(B <= 13) = 0.0192, P(B <= 14) = 0.0403, so 14 at each end (96.2 %).
    expect(medianInterval(oneTo(40))).toEqual({ low: 15, high: 26 });
    // Too few values for 95 %: the whole range.
    expect(medianInterval(oneTo(5))).toEqual({ low: 1, high: 5 });
    expect(medianInterval(oneTo(6))).toEqual({ low: 2, high: 5 });
  });

  it('is wider at a higher confidence', () => {
    expect(medianInterval(oneTo(40), 0.99)).toEqual({ low: 13, high: 28 });
  });

  it('always holds the median, inside the range of the values', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ noNaN: true, min: -1e6, max: 1e6 }), { minLength: 1, maxLength: 200 }),
        (xs) => {
          const { low, high } = medianInterval(xs);
          const m = median(xs);
          expect(low).toBeLessThanOrEqual(m);
          expect(high).toBeGreaterThanOrEqual(m);
          expect(low).toBeGreaterThanOrEqual(Math.min(...xs));
          expect(high).toBeLessThanOrEqual(Math.max(...xs));
        },
      ),
    );
  });

  it('has nothing to say about no values, and refuses more than it can count', () => {
    expect(medianInterval([])).toEqual({ low: Number.NaN, high: Number.NaN });
    expect(() => medianInterval(oneTo(1001))).toThrow(RangeError);
  });
});
