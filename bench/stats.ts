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
