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
  /** The console (`/` and `/console/…`), when it is on. */
  readonly console?: { handle(req: IncomingMessage, res: ServerResponse): boolean } | undefined;
}

export interface OpsServer {
  readonly url: string;
  close(): Promise<void>;
}

/**
 * The operations endpoints, on their own port so they never compete with ingress traffic:
 * `/healthz` (liveness), `/readyz` (readiness, with each check's result as JSON), `/metrics`
 * (Prometheus text format) and, unless turned off, the console at `/` (docs/console.md).
 */
export async function startOpsServer(options: OpsServerOptions): Promise<OpsServer> {
  const server: Server = createServer((req, res) => {
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
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
