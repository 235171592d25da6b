import { ConfigError } from '../core/errors.js';
import { EVENT_TYPES, type EventType, isKnownEventType } from '../core/events/schemas.js';
import { ENV_SECRET, Keyring } from '../core/secrets.js';
import { sign } from '../core/signature.js';
import { UsageError } from './common.js';
import { globMatches } from './filters.js';

/** A signed envelope as the service publishes it, and the message text that carries it. */
export interface SignedEvent {
  readonly eventId: string;
  readonly eventType: string;
  readonly signedAt: number;
  readonly raw: string;
}

/** Signs `event` the way the service does: HMAC-SHA256 of `signed_at + "." + body`. */
export function signEvent(event: Record<string, unknown>, secret: string, signedAt: number): SignedEvent {
  const body = JSON.stringify(event);
  const eventId = String(event.event_id);
  const eventType = String(event.event_type);
  const raw = JSON.stringify({
    event_id: eventId,
    event_type: eventType,
    signed_at: signedAt,
    signature: sign(body, secret, signedAt),
    body,
  });
  return { eventId, eventType, signedAt, raw };
}

/**
 * The secret to sign with: the variable `name` (default PARTNER_EVENTS_SIGNING_SECRET, the one
 * the worker verifies with). Checked like the worker checks it, and never echoed.
 */
export function signingSecret(name: string = ENV_SECRET, env: NodeJS.ProcessEnv = process.env): string {
  const secret = env[name];
  if (secret === undefined || secret === '') {
    throw new ConfigError(`no signing secret: set ${name}`, { code: 'SECRET_INVALID' });
  }
  new Keyring([{ id: name, secret }]); // same checks as the worker: no stray whitespace
  return secret;
}

/** One `--set path=value`: a dotted path, and a JSON value (or, when it is not JSON, the text). */
export function parseSetting(text: string): { path: string[]; value: unknown } {
  const eq = text.indexOf('=');
  const path = eq > 0 ? text.slice(0, eq).split('.') : [];
  if (path.length === 0 || path.some((p) => p === '')) {
    throw new UsageError(`--set expects field=value (dotted paths allowed: target.type=card), got "${text}"`);
  }
  const raw = text.slice(eq + 1);
  let value: unknown = raw;
  try {
    value = JSON.parse(raw);
  } catch {
    // plain text
  }
  return { path, value };
}

/** Sets `value` at `path` in `target`, creating objects on the way (a non-object is replaced). */
export function setPath(target: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (typeof next === 'object' && next !== null && !Array.isArray(next)) {
      node = next as Record<string, unknown>;
    } else {
      const created: Record<string, unknown> = {};
      node[key] = created;
      node = created;
    }
  }
  node[path[path.length - 1] as string] = value;
}

/** A catalog type by name; anything else is a usage error that lists the catalog. */
export function catalogType(name: string): EventType {
  if (isKnownEventType(name)) return name;
  throw new UsageError(`unknown event type "${name}"; the catalog has: ${EVENT_TYPES.join(', ')}`);
}

/** Catalog types matching any of the patterns (`*` wildcards, commas allowed); all without any. */
export function typesMatching(flag: string, patterns: readonly string[] | undefined): EventType[] {
  const list = (patterns ?? [])
    .flatMap((p) => p.split(','))
    .map((p) => p.trim())
    .filter(Boolean);
  if (list.length === 0) return [...EVENT_TYPES];
  const types = EVENT_TYPES.filter((t) => list.some((p) => globMatches(p, t)));
  if (types.length === 0) throw new UsageError(`${flag} ${list.join(',')} matches no catalog event type`);
  return types;
}
