import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { RawMessage, SourceAdapter } from '../../src/adapter.js';
import { DEFAULT_MAX_ENVELOPE_BYTES } from '../../src/envelope.js';
import { ConfigError } from '../../src/errors.js';
import type { Outcome } from '../../src/outcome.js';
import { Waker } from '../../src/wake.js';

export interface HttpIngressOptions {
  /** Interface to bind. Default `127.0.0.1`; `0.0.0.0` to accept from other hosts. */
  readonly host?: string;
  /** Port; 0 picks a free one (see `url`). */
  readonly port: number;
  /** The path envelopes are POSTed to. Default `/events`. */
  readonly path?: string;
  /** Larger bodies are refused with 413 before they are read. Default 1 MiB. */
  readonly maxBodyBytes?: number;
  /** Requests waiting for the worker beyond this get 503 BUSY + Retry-After (backpressure). Default 1000. */
  readonly maxPending?: number;
}

export interface HttpMessage extends RawMessage {
  readonly response: ServerResponse;
}

/**
 * HTTP ingress, for partners who relay events over HTTP: POST one envelope per request to
 * `/events`. The response is the outcome: 200 = acked (handled, duplicate or ignored), 503 with
 * `Retry-After` = retry later (also when too many requests wait: code BUSY), 422 = rejected and
 * dead-lettered, with `{ outcome, code, reason }` as JSON. A body over the size limit gets 413
 * before it is read: not dead-lettered (the sender still holds it), nothing buffered. HTTP has no broker enqueue time, so age is measured
 * against the clock at receipt.
 */
export class HttpIngressSource implements SourceAdapter<HttpMessage> {
  readonly name: string;
  readonly maxBatchSize = 100;
  readonly #server: Server;
  readonly #path: string;
  readonly #maxBodyBytes: number;
  readonly #maxPending: number;
  readonly #pending: HttpMessage[] = [];
  readonly #waker = new Waker();
  #seq = 0;
  #closed = false;

  private constructor(options: HttpIngressOptions) {
    this.#path = options.path ?? '/events';
    this.#maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_ENVELOPE_BYTES;
    this.#maxPending = options.maxPending ?? 1000;
    this.#server = createServer((req, res) => this.#accept(req, res));
    this.name = 'http';
  }

  /** Starts listening; resolves once the port is bound. */
  static async listen(options: HttpIngressOptions): Promise<HttpIngressSource> {
    const source = new HttpIngressSource(options);
    const host = options.host ?? '127.0.0.1';
    await new Promise<void>((resolve, reject) => {
      source.#server.once('error', (cause: Error) =>
        reject(
          new ConfigError(`HTTP ingress cannot listen on ${host}:${options.port}: ${cause.message}`, {
            cause,
          }),
        ),
      );
      source.#server.listen(options.port, host, () => resolve());
    });
    return source;
  }

  /** Where to POST envelopes. */
  get url(): string {
    const { address, port } = this.#server.address() as AddressInfo;
    const host = address.includes(':') ? `[${address}]` : address;
    return `http://${host}:${port}${this.#path}`;
  }

  get connected(): boolean {
    return this.#server.listening;
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly HttpMessage[] | null> {
    while (this.#pending.length === 0) {
      if (this.#closed) return null;
      if (signal.aborted) return [];
      await this.#waker.wait(signal);
    }
    return this.#pending.splice(0, max);
  }

  async settle(message: HttpMessage, outcome: Outcome): Promise<void> {
    const res = message.response;
    if (res.writableEnded || res.destroyed) return; // the client gave up; it will send again
    if (outcome.kind === 'ack') {
      reply(res, 200, { outcome: 'ack', result: outcome.result });
    } else if (outcome.kind === 'retry') {
      res.setHeader('retry-after', String(Math.max(1, Math.ceil(outcome.delayMs / 1000))));
      reply(res, 503, { outcome: 'retry', code: outcome.code, reason: outcome.reason });
    } else {
      const status = outcome.code === 'ENVELOPE_TOO_LARGE' ? 413 : 422;
      reply(res, status, { outcome: 'rejected', code: outcome.code, reason: outcome.reason });
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Requests the worker never took: tell their senders to come back (nothing is lost).
    for (const message of this.#pending.splice(0)) {
      message.response.setHeader('retry-after', '5');
      reply(message.response, 503, { outcome: 'retry', code: 'SHUTDOWN', reason: 'shutting down' });
    }
    this.#waker.wake();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== this.#path) return void reply(res, 404, { error: `POST envelopes to ${this.#path}` });
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      return void reply(res, 405, { error: 'method not allowed' });
    }
    if (this.#closed) {
      res.setHeader('retry-after', '5');
      return void reply(res, 503, { outcome: 'retry', code: 'SHUTDOWN', reason: 'stopping: retry' });
    }
    if (this.#pending.length >= this.#maxPending) {
      res.setHeader('retry-after', '1');
      return void reply(res, 503, {
        outcome: 'retry',
        code: 'BUSY',
        reason: `${this.#maxPending} requests already waiting: retry`,
      });
    }
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > this.#maxBodyBytes) return void this.#tooLarge(req, res, declared);
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > this.#maxBodyBytes) return void this.#tooLarge(req, res, size);
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (res.writableEnded) return;
      const body = Buffer.concat(chunks);
      this.#pending.push({
        id: `http-${++this.#seq}`,
        body,
        attempt: 1,
        response: res,
        metadata: { remote: req.socket.remoteAddress ?? null },
      });
      this.#waker.wake();
    });
  }

  #tooLarge(req: IncomingMessage, res: ServerResponse, size: number): void {
    if (!res.writableEnded) {
      res.setHeader('connection', 'close');
      reply(res, 413, {
        outcome: 'rejected',
        code: 'ENVELOPE_TOO_LARGE',
        reason: `body is ${size} bytes or more, the limit is ${this.#maxBodyBytes}`,
      });
    }
    req.resume();
  }
}

function reply(res: ServerResponse, status: number, body: Record<string, unknown>): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(`${JSON.stringify(body)}\n`);
}

export function httpIngress(options: HttpIngressOptions): Promise<HttpIngressSource> {
  return HttpIngressSource.listen(options);
}
