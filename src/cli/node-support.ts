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
  return date !== undefined && now.getTime() >= Date.parse(`${date}T00:00:00Z`) ? date : undefined;
}
