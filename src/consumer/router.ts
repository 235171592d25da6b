import type { Logger } from 'pino';
import { ConfigError } from '../core/errors.js';
import {
  EVENT_TYPES,
  type EventMap,
  type EventType,
  type PartnerEvent,
  type UnknownEvent,
} from '../core/events/schemas.js';

/** What a handler receives besides the typed event. */
export interface HandlerContext {
  readonly eventId: string;
  readonly eventType: string;
  /** `signed_at` of the envelope, Unix seconds. */
  readonly signedAt: number;
  /** Id of the signing secret that verified this event. */
  readonly keyId: string;
  /** 1-based delivery count as the broker reports it. */
  readonly attempt: number;
  /** The broker's message id. */
  readonly messageId: string;
  /** When the broker accepted the message (ms), when it says. */
  readonly enqueuedAt: number | undefined;
  /** The signed body exactly as received (forward it as-is, keep it for audit). */
  readonly rawBody: string;
  /** A child logger bound to this event's id, type and attempt. */
  readonly logger: Logger;
  /** Aborted when the handler should stop: timeout, lost lease or visibility, shutdown. */
  readonly signal: AbortSignal;
}

export type Handler<E> = (event: E, context: HandlerContext) => unknown;

/** An exact catalog type, a dotted wildcard (`daily.data.*`) or `*` (every catalog type). */
export type EventPattern = EventType | `${string}.*` | '*';

/** The event type(s) a pattern matches, for typing the handler. */
export type EventsFor<P extends EventPattern> = P extends EventType
  ? EventMap[P]
  : P extends '*'
    ? PartnerEvent
    : P extends `${infer Prefix}*`
      ? EventMap[Extract<EventType, `${Prefix}${string}`>]
      : never;

type AnyHandler = Handler<PartnerEvent>;

/**
 * Maps event types to handlers. Every handler whose pattern matches runs, in registration order;
 * the event succeeds only when all of them do. Types outside the catalog go to the `unknown`
 * handler only (wildcards promise a typed catalog event, which an unknown type is not).
 */
export class Router {
  readonly #routes: { pattern: string; handler: AnyHandler }[] = [];
  #unknown: Handler<UnknownEvent> | undefined;
  readonly #cache = new Map<string, readonly AnyHandler[]>();

  on<P extends EventPattern>(pattern: P, handler: Handler<EventsFor<P>>): this {
    if (typeof handler !== 'function') throw new ConfigError(`handler for "${pattern}" is not a function`);
    if (matchingTypes(pattern).length === 0) {
      throw new ConfigError(
        `"${pattern}" matches no event type of the catalog; use onUnknown() for types this version does not know`,
      );
    }
    this.#routes.push({ pattern, handler: handler as AnyHandler });
    this.#cache.clear();
    return this;
  }

  onUnknown(handler: Handler<UnknownEvent>): this {
    this.#unknown = handler;
    return this;
  }

  get unknownHandler(): Handler<UnknownEvent> | undefined {
    return this.#unknown;
  }

  /** Handlers for a catalog type, cached per type. */
  match(type: EventType): readonly AnyHandler[] {
    let handlers = this.#cache.get(type);
    if (!handlers) {
      handlers = this.#routes.filter((r) => patternMatches(r.pattern, type)).map((r) => r.handler);
      this.#cache.set(type, handlers);
    }
    return handlers;
  }
}

export function patternMatches(pattern: string, type: string): boolean {
  if (pattern === '*') return true;
  if (pattern.endsWith('.*')) return type.startsWith(pattern.slice(0, -1));
  return pattern === type;
}

function matchingTypes(pattern: string): EventType[] {
  return EVENT_TYPES.filter((t) => patternMatches(pattern, t));
}
