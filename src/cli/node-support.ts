/**
 * End of life of each Node major the kit runs on (nodejs.org, "Previous releases"): from that
 * day a Node line gets no more security fixes. Past it, `run` says so at start.
 */
export const NODE_END_OF_LIFE: Readonly<Record<number, string>> = {
  20: '2026-04-30',
  22: '2027-04-30',
  24: '2028-04-30',
};

/** The end-of-life date (YYYY-MM-DD) of `version`'s major when `now` is past it; else undefined. */
export function nodeEndOfLife(
  version: string = process.versions.node,
  now: Date = new Date(),
): string | undefined {
  const date = NODE_END_OF_LIFE[Number.parseInt(version, 10)];
  return date !== undefined && hasEnded(date, now) ? date : undefined;
}

/** Whether the day `date` (YYYY-MM-DD, UTC) has begun at `now`. */
function hasEnded(date: string, now: Date): boolean {
  return now.getTime() >= Date.parse(`${date}T00:00:00Z`);
}

/** The Node majors of the table still maintained at `now`, newest first (e.g. [24, 22]). */
export function maintainedNodeLines(now: Date = new Date()): number[] {
  return Object.entries(NODE_END_OF_LIFE)
    .filter(([, date]) => !hasEnded(date, now))
    .map(([major]) => Number(major))
    .sort((a, b) => b - a);
}

/** The warning `run` logs on a Node past its end of life; undefined on a maintained one. */
export function endOfLifeWarning(
  version: string = process.versions.node,
  now: Date = new Date(),
): { readonly fields: { node: string; end_of_life: string }; readonly message: string } | undefined {
  const endOfLife = nodeEndOfLife(version, now);
  if (endOfLife === undefined) return undefined;
  const maintained = maintainedNodeLines(now);
  const advice = maintained.length > 0 ? ` (${maintained.join(' or ')})` : '';
  return {
    fields: { node: version, end_of_life: endOfLife },
    message: `this Node version is past its end of life (no more security fixes): run a maintained LTS${advice}`,
  };
}
