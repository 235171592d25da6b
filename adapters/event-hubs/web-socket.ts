/**
 * AMQP over WebSockets, for hosts whose firewall or proxy lets only 443 through: the SDK then
 * dials `wss://<namespace>:443/$servicebus/websocket` instead of AMQP on 5671. It needs a
 * WebSocket class, which on Node it never finds by itself: Node's own global one (Node 22 and
 * later), else the `ws` package, an optional peer dependency loaded with `require` when asked for.
 */
import { createRequire } from 'node:module';
import type { EventHubClientOptions, WebSocketOptions } from '@azure/event-hubs';
import { ConfigError } from '../../src/core/errors.js';
import { ENV_WEBSOCKETS } from './names.js';

/** The constructor `webSocketOptions.webSocket` takes (rhea's `WebSocketImpl`). */
type WebSocketClass = NonNullable<WebSocketOptions['webSocket']>;

/** Where a WebSocket class may come from (the tests give their own to play a Node without either). */
export interface WebSocketSources {
  /** Node's global `WebSocket` (undefined before Node 22). */
  readonly global: () => unknown;
  /** `require` as from this module. */
  readonly require: (id: string) => unknown;
}

const NODE_SOURCES: WebSocketSources = {
  global: () => (globalThis as { WebSocket?: unknown }).WebSocket,
  require: (id) => createRequire(import.meta.url)(id),
};

/**
 * Node's own `WebSocket`, else `ws`'s; a ConfigError naming what to install when there is neither,
 * so a worker fails at start rather than on its first connection.
 */
export function webSocketClass(sources: WebSocketSources = NODE_SOURCES): WebSocketClass {
  const own = sources.global();
  if (typeof own === 'function') return own as WebSocketClass;
  let ws: unknown;
  try {
    ws = sources.require('ws');
  } catch (cause) {
    throw new ConfigError(
      `AMQP over WebSockets needs a WebSocket class: Node ${process.versions.node} has no global WebSocket (Node 22 and later have one) and the ws package is not installed: npm install ws`,
      { cause },
    );
  }
  // ws 8's CommonJS export is the class itself, which also has itself as `WebSocket`.
  const made = (ws as { WebSocket?: unknown } | undefined)?.WebSocket ?? ws;
  if (typeof made !== 'function') {
    throw new ConfigError(
      'AMQP over WebSockets: the installed ws package has no WebSocket class: npm install ws@8',
    );
  }
  return made as WebSocketClass;
}

/**
 * The client options that make a client dial over WebSockets when `on`: a WebSocket class of the
 * caller's own (`own.webSocket`) wins, and the caller's `webSocketConstructorOptions` are kept.
 * Without `on`, the caller's own options as they are.
 */
export function webSocketOptionsFor(
  on: boolean,
  own: WebSocketOptions | undefined,
  sources?: WebSocketSources,
): WebSocketOptions | undefined {
  if (!on || own?.webSocket) return own;
  return { ...own, webSocket: webSocketClass(sources) };
}

/** `EVENTHUBS_WEBSOCKETS`: `true` or `false`; unset or empty is false. */
export function webSocketsFromEnv(env: NodeJS.ProcessEnv): boolean {
  const raw = env[ENV_WEBSOCKETS]?.trim().toLowerCase();
  if (raw === undefined || raw === '' || raw === 'false') return false;
  if (raw === 'true') return true;
  throw new ConfigError(`${ENV_WEBSOCKETS}="${env[ENV_WEBSOCKETS]}": expected true or false`);
}

/**
 * The client options of the clients the CLI opens outside `run` (replay's reader of a hub, a
 * `--to` target): over WebSockets with `EVENTHUBS_WEBSOCKETS=true`, else none.
 */
export function clientOptionsFromEnv(
  env: NodeJS.ProcessEnv,
  sources?: WebSocketSources,
): EventHubClientOptions {
  const webSocketOptions = webSocketOptionsFor(webSocketsFromEnv(env), undefined, sources);
  return webSocketOptions ? { webSocketOptions } : {};
}
