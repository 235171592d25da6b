import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

export interface ReadinessCheck {
  readonly ok: boolean;
  readonly detail?: string;
}

export interface OpsServerOptions {
  readonly host: string;
  readonly port: number;
  /** Named checks; /readyz is 200 only when all pass. */
  readonly readiness: () => Record<string, ReadinessCheck>;
  /** /healthz: the process is alive and its loop has not died. */
  readonly alive: () => boolean;
  readonly registry: Registry;
  /**
   * The console (`/` and `/console/…`), when it is on. `close()`, called as the server closes,
   * ends the answers it holds open (its live streams).
   */
  readonly console?:
    | { handle(req: IncomingMessage, res: ServerResponse): boolean; close?(): void }
    | undefined;
}

export interface OpsServer {
  readonly url: string;
  /**
   * Stops listening and resolves once every connection has ended: the console's live streams
   * are ended, idle keep-alive connections closed, and requests still in flight get
   * `CLOSE_GRACE_MS` before their connections are closed under them.
   */
  close(): Promise<void>;
}

/** How long a request in flight when the ops server closes gets to finish (a scrape takes ms). */
export const CLOSE_GRACE_MS = 1000;

/**
 * The operations endpoints, on their own port so they never compete with ingress traffic:
 * `/healthz` (liveness), `/readyz` (readiness, with each check's result as JSON), `/metrics`
 * (Prometheus text format) and, unless turned off, the console at `/` (docs/console.md).
 */
export async function startOpsServer(options: OpsServerOptions): Promise<OpsServer> {
  let closing = false;
  const server: Server = createServer((req, res) => {
    // Once closing, a connection is closed as soon as its answer is out, not kept alive for 5 s.
    res.once('close', () => closing && server.closeIdleConnections());
    if (options.console?.handle(req, res)) return;
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (path === '/healthz') {
      const alive = options.alive();
      res.writeHead(alive ? 200 : 503, { 'content-type': 'text/plain' }).end(alive ? 'ok\n' : 'stopped\n');
      return;
    }
    if (path === '/readyz') {
      const checks = options.readiness();
      const ready = Object.values(checks).every((c) => c.ok);
      res
        .writeHead(ready ? 200 : 503, { 'content-type': 'application/json' })
        .end(`${JSON.stringify({ ready, checks })}\n`);
      return;
    }
    if (path === '/metrics') {
      options.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': options.registry.contentType }).end(text),
        () => res.writeHead(500).end(),
      );
      return;
    }
    res
      .writeHead(404, { 'content-type': 'text/plain' })
      .end('not found: try /healthz, /readyz or /metrics\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const { address, port } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  return {
    url: `http://${host}:${port}`,
    close: () => {
      closing = true;
      return closeServer(server, options.console);
    },
  };
}

/**
 * `server.close()` alone waits for every connection to end, and neither a console page's live
 * stream nor a browser's or a scraper's keep-alive connection ever does by itself: a stopping
 * worker would live on until killed. Node's close() closes the idle ones; the streams are ended
 * here (their connections close as their answers do); anything left is closed after the grace.
 */
function closeServer(server: Server, held: OpsServerOptions['console']): Promise<void> {
  return new Promise<void>((resolve) => {
    const grace = setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS);
    server.close(() => {
      clearTimeout(grace);
      resolve();
    });
    held?.close?.();
  });
}
