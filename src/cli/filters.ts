import { parseEnvelope } from '../core/envelope.js';
import { UsageError } from './common.js';

/**
 * Which records `replay` takes. Every given criterion must hold; a criterion given several times
 * (or as a comma-separated list) holds when any of its values does. Type, id and `signed_at` are
 * read from the envelope (unverified: selection only; the replay verifies every record it takes),
 * the code from the dead-letter record.
 */
export interface ReplayFilter {
  /** Exact types or globs: `*` matches any run of characters (`daily.data.*`, `*.created`). */
  readonly types: readonly string[];
  readonly eventIds: ReadonlySet<string>;
  /** The code the record was dead-lettered with. Bare envelopes have none, so never match. */
  readonly codes: ReadonlySet<string>;
  /** Unix seconds, inclusive. */
  readonly since: number | undefined;
  /** Unix seconds, inclusive. */
  readonly until: number | undefined;
}

export interface FilterInput {
  readonly type?: readonly string[] | undefined;
  readonly eventId?: readonly string[] | undefined;
  readonly code?: readonly string[] | undefined;
  readonly since?: string | undefined;
  readonly until?: string | undefined;
}

/** What a record offers to match on. */
export interface FilterSubject {
  readonly body: string | Uint8Array;
  readonly code: string | undefined;
}

function list(values: readonly string[] | undefined): string[] {
  return (values ?? [])
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
}

export function parseFilter(input: FilterInput): ReplayFilter {
  const since = input.since === undefined ? undefined : parseTime('--since', input.since);
  const until = input.until === undefined ? undefined : parseTime('--until', input.until);
  if (since !== undefined && until !== undefined && since > until) {
    throw new UsageError(`--since (${input.since}) is after --until (${input.until})`);
  }
  return {
    types: list(input.type),
    eventIds: new Set(list(input.eventId)),
    codes: new Set(list(input.code).map((c) => c.toUpperCase())),
    since,
    until,
  };
}

/** Unix seconds (`1767225600`) or an ISO 8601 date or time (`2026-01-01`, `2026-01-01T12:00:00Z`). */
export function parseTime(flag: string, text: string): number {
  if (/^\d+$/.test(text)) return Number(text);
  const ms = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : Number.NaN;
  if (Number.isNaN(ms)) {
    throw new UsageError(
      `${flag} must be Unix seconds or an ISO 8601 time (2026-01-31T12:00:00Z), got "${text}"`,
    );
  }
  return Math.floor(ms / 1000);
}

/** As `parseTime`, in ms (an ISO time keeps its fraction of a second): a hub's read window. */
export function parseTimeMs(flag: string, text: string): number {
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  parseTime(flag, text); // the same usage error for a bad value
  return Date.parse(text);
}

export function isEmptyFilter(filter: ReplayFilter): boolean {
  return (
    filter.types.length === 0 &&
    filter.eventIds.size === 0 &&
    filter.codes.size === 0 &&
    filter.since === undefined &&
    filter.until === undefined
  );
}

/** `*` matches any run of characters; everything else is literal. */
export function globMatches(pattern: string, value: string): boolean {
  if (!pattern.includes('*')) return pattern === value;
  const source = pattern
    .split('*')
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
    .join('.*');
  return new RegExp(`^${source}$`).test(value);
}

export function matchesFilter(filter: ReplayFilter, subject: FilterSubject): boolean {
  if (filter.codes.size > 0 && (subject.code === undefined || !filter.codes.has(subject.code))) return false;
  const needsEnvelope =
    filter.types.length > 0 ||
    filter.eventIds.size > 0 ||
    filter.since !== undefined ||
    filter.until !== undefined;
  if (!needsEnvelope) return true;
  let claims: { event_id: string; event_type: string; signed_at: number };
  try {
    claims = parseEnvelope(subject.body, Number.POSITIVE_INFINITY);
  } catch {
    return false; // no envelope: nothing to select it by
  }
  if (filter.types.length > 0 && !filter.types.some((p) => globMatches(p, claims.event_type))) return false;
  if (filter.eventIds.size > 0 && !filter.eventIds.has(claims.event_id)) return false;
  if (filter.since !== undefined && claims.signed_at < filter.since) return false;
  if (filter.until !== undefined && claims.signed_at > filter.until) return false;
  return true;
}
