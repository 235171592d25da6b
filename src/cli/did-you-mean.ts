/**
 * The candidate closest to what was typed, for a usage error's "did you mean …?": within two
 * edits (one for words of four letters or fewer), or the only candidate it is a prefix of.
 */
export function closest(typed: string, candidates: readonly string[]): string | undefined {
  const limit = typed.length <= 4 ? 1 : 2;
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of candidates) {
    const distance = editDistance(typed, candidate);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  if (best !== undefined && bestDistance <= limit) return best;
  const extended = candidates.filter((c) => typed.length >= 2 && c.startsWith(typed));
  return extended.length === 1 ? extended[0] : undefined;
}

/** `': did you mean X?'`, or `''` when nothing is close. */
export function didYouMean(typed: string, candidates: readonly string[], show = (c: string) => c): string {
  const match = closest(typed, candidates);
  return match === undefined ? '' : `: did you mean ${show(match)}?`;
}

/** Levenshtein distance, with a transposition of neighbours counting as one edit. */
function editDistance(a: string, b: string): number {
  const rows: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  const at = (i: number, j: number) => rows[i]?.[j] ?? Number.POSITIVE_INFINITY;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d = Math.min(d, at(i - 2, j - 2) + 1);
      (rows[i] as number[])[j] = d;
    }
  }
  return at(a.length, b.length);
}
