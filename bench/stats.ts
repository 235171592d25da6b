/** Small helpers shared by the bench sections: medians, number formatting, plain-text tables. */

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/**
 * An interval that holds the true median of what `values` sample with at least `confidence`,
 * assuming nothing about their distribution: the k-th smallest and k-th largest value, for the
 * largest k at which Binomial(n, 1/2) leaves at most 1 − confidence in its two tails. For
 * example the 15th and 26th of 40 values (96 %), the 2nd and 7th of 8 (99 %).
 */
export function medianInterval(values: readonly number[], confidence = 0.95): { low: number; high: number } {
  const n = values.length;
  if (n === 0) return { low: Number.NaN, high: Number.NaN };
  // 0.5 ** n underflows past 1074; a bench never takes that many rounds.
  if (n > 1000) throw new RangeError(`medianInterval: ${n} values, at most 1000`);
  const sorted = [...values].sort((a, b) => a - b);
  const alpha = 1 - confidence;
  let cut = 0; // values left out at each end
  let pmf = 0.5 ** n; // P(B = cut), B ~ Binomial(n, 1/2)
  let tail = pmf; // P(B <= cut): leaving out one more at each end keeps the coverage 1 - 2 * tail
  while (2 * tail <= alpha && cut + 1 <= n - 2 - cut) {
    cut++;
    pmf = (pmf * (n - cut + 1)) / cut;
    tail += pmf;
  }
  return { low: sorted[cut] as number, high: sorted[n - 1 - cut] as number };
}

/** Per-round (or per-repetition) ratios summarised: median, the 95 % interval of the median, and the extremes. */
export interface RatioSummary {
  readonly median: number;
  readonly low: number;
  readonly high: number;
  readonly min: number;
  readonly max: number;
}

export function summariseRatios(perRound: readonly number[]): RatioSummary {
  const { low, high } = medianInterval(perRound);
  return { median: median(perRound), low, high, min: Math.min(...perRound), max: Math.max(...perRound) };
}

/** Whether the median's interval reaches across `goal`: a verdict this run cannot make firmly. */
export function spansGoal(r: RatioSummary, goal: number): boolean {
  return r.low < goal && goal <= r.high;
}

/**
 * The sides of repetition `r` in the order to run them: as given, reversed every other
 * repetition. A run is slower right after some runs than after others (docs/performance-log.md,
 * "Another host"), so a fixed order would bias every ratio taken between the sides.
 */
export function repetitionOrder<T>(sides: readonly T[], r: number): readonly T[] {
  return r % 2 === 0 ? sides : [...sides].reverse();
}

/** Runs each side `warmups` times, then once per repetition in `repetitionOrder`: results by side. */
export async function runInterleaved<S extends string, R>(
  sides: Readonly<Record<S, () => Promise<R>>>,
  reps: number,
  warmups = 1,
): Promise<Record<S, R[]>> {
  const names = Object.keys(sides) as S[];
  const results = Object.fromEntries(names.map((name) => [name, [] as R[]])) as Record<S, R[]>;
  for (let w = 0; w < warmups; w++) for (const name of names) await sides[name]();
  for (let r = 0; r < reps; r++) {
    for (const name of repetitionOrder(names, r)) results[name].push(await sides[name]());
  }
  return results;
}

/** Rounds to `digits` significant digits (for the JSON line: readable, still exact enough). */
export function sig(value: number, digits = 4): number {
  if (!Number.isFinite(value) || value === 0) return value;
  return Number(value.toPrecision(digits));
}

export function fmtInt(value: number): string {
  return Math.round(value).toLocaleString('en-US');
}

export function fmtFixed(value: number, digits: number): string {
  return value.toFixed(digits);
}

export function fmtMiB(bytes: number): string {
  return (bytes / (1024 * 1024)).toFixed(1);
}

/** A plain table: first row is the header; numbers-looking cells are right-aligned. */
export function table(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const row of rows) {
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, cell.length);
    });
  }
  const numeric = /^[-+]?[\d,.]+( ?[×x%])?$|^[\d.]+×$/;
  const line = (row: readonly string[]) =>
    row
      .map((cell, i) => {
        const w = widths[i] ?? 0;
        return i > 0 && numeric.test(cell) ? cell.padStart(w) : cell.padEnd(w);
      })
      .join('  ')
      .trimEnd();
  const [head, ...body] = rows;
  if (!head) return '';
  const rule = widths.map((w) => '─'.repeat(w)).join('  ');
  return [line(head), rule, ...body.map(line)].join('\n');
}
