import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseAdapterOptions } from '../../src/core/adapter-options.js';
import { ConfigError } from '../../src/core/errors.js';
import type { Outcome } from '../../src/core/outcome.js';
import type { RawMessage, SourceAdapter, TraceCarrier } from '../../src/core/source-adapter.js';
import { Waker } from '../../src/core/waker.js';
import {
  type HttpIngressOptions,
  httpIngressOptionsSchema,
  type ResolvedHttpIngressOptions,
} from './options.js';

export interface HttpMessage extends RawMessage {
  readonly response: ServerResponse;
}

/**
 * HTTP ingress, for partners who relay events over HTTP: POST one envelope per request to
 * `/events`. The response is the outcome: 200 = acked (handled, duplicate or ignored), 503 with
 * `Retry-After` = retry later (also when too many requests wait: code BUSY), 422 = rejected and
 * dead-lettered, with `{ outcome, code, reason }` as JSON. A body over the size limit gets 413
 * before it is read: not dead-lettered (the sender still holds it), nothing buffered. Memory is
 * bounded for any number of senders: bodies being received or waiting share `maxBufferedBytes`
 * (beyond: 503 BUSY), and a body that takes longer than `bodyTimeoutMs` gets 408. HTTP has no
 * broker enqueue time, so age is measured against the clock at receipt.
 *
 * long: the byte and request bounds are one budget shared by every request being read and every
 * body waiting for the worker; the answers that spend and release it are kept next to it.
 */
export class HttpIngressSource implements SourceAdapter<HttpMessage> {
  readonly name: string;
  readonly maxBatchSize = 100;
  readonly #server: Server;
  readonly #path: string;
  readonly #maxBodyBytes: number;
  readonly #maxPending: number;
  readonly #maxBufferedBytes: number;
  readonly #bodyTimeoutMs: number;
  readonly #pending: HttpMessage[] = [];
  /** Handed to the worker and not settled yet: answered by `close()` if still so then. */
  readonly #taken = new Set<HttpMessage>();
  /** Bytes of the bodies being received and of those in `#pending`. */
  #bufferedBytes = 0;
  readonly #waker = new Waker();
  #seq = 0;
  #closed = false;

  private constructor(options: ResolvedHttpIngressOptions) {
    this.#path = options.path;
    this.#maxBodyBytes = options.maxBodyBytes;
    this.#maxPending = options.maxPending;
    this.#maxBufferedBytes = options.maxBufferedBytes ?? this.#maxPending * this.#maxBodyBytes;
    this.#bodyTimeoutMs = options.bodyTimeoutMs;
    if (this.#maxBufferedBytes < this.#maxBodyBytes) {
      throw new ConfigError(
        `HTTP ingress maxBufferedBytes (${this.#maxBufferedBytes}) is below maxBodyBytes (${this.#maxBodyBytes}): the largest bodies could never be received`,
      );
    }
    this.#server = createServer((req, res) => this.#accept(req, res));
    this.name = 'http';
  }

  /** Starts listening; resolves once the port is bound. */
  static async listen(input: HttpIngressOptions): Promise<HttpIngressSource> {
    const options = parseAdapterOptions(httpIngressOptionsSchema, input, 'HTTP ingress');
    const source = new HttpIngressSource(options);
    const { host, port } = options;
    await new Promise<void>((resolve, reject) => {
      source.#server.once('error', (cause: Error) =>
        reject(new ConfigError(`HTTP ingress cannot listen on ${host}:${port}: ${cause.message}`, { cause })),
      );
      source.#server.listen(port, host, () => resolve());
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

  /** Bytes of request bodies held now: being received, or waiting for the worker. */
  get bufferedBytes(): number {
    return this.#bufferedBytes;
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly HttpMessage[] | null> {
    while (this.#pending.length === 0) {
      if (this.#closed) return null;
      if (signal.aborted) return [];
      await this.#waker.wait(signal);
    }
    const taken = this.#pending.splice(0, max);
    for (const message of taken) {
      this.#bufferedBytes -= message.body.length;
      this.#taken.add(message);
    }
    return taken;
  }

  async settle(message: HttpMessage, outcome: Outcome): Promise<void> {
    this.#taken.delete(message);
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
    // Requests the worker never took or has not settled: tell their senders to come back
    // (nothing is lost, nothing unfinished is acked; the server closes once all are answered).
    const pending = this.#pending.splice(0);
    for (const message of pending) this.#bufferedBytes -= message.body.length;
    for (const message of [...this.#taken, ...pending]) {
      if (message.response.writableEnded || message.response.destroyed) continue;
      message.response.setHeader('retry-after', '5');
      reply(message.response, 503, { outcome: 'retry', code: 'SHUTDOWN', reason: 'shutting down' });
    }
    this.#taken.clear();
    this.#waker.wake();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(req: IncomingMessage, res: ServerResponse): void {
    if (this.#refused(req, res)) return;
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > this.#maxBodyBytes) {
      this.#tooLarge(res, declared);
      return void this.#discard(req);
    }
    this.#readBody(req, res, declared);
  }

  /** Answers a request that cannot be taken (wrong path or method, stopping, queue full): true. */
  #refused(req: IncomingMessage, res: ServerResponse): boolean {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== this.#path) {
      reply(res, 404, { error: `POST envelopes to ${this.#path}` });
      return true;
    }
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      reply(res, 405, { error: 'method not allowed' });
      return true;
    }
    if (this.#closed) {
      res.setHeader('retry-after', '5');
      reply(res, 503, { outcome: 'retry', code: 'SHUTDOWN', reason: 'stopping: retry' });
      return true;
    }
    if (this.#pending.length >= this.#maxPending) {
      res.setHeader('retry-after', '1');
      reply(res, 503, {
        outcome: 'retry',
        code: 'BUSY',
        reason: `${this.#maxPending} requests already waiting: retry`,
      });
      return true;
    }
    return false;
  }

  /** Reads a body within the byte and time bounds, then queues it for the worker. */
  #readBody(req: IncomingMessage, res: ServerResponse, declared: number): void {
    const chunks: Buffer[] = [];
    let size = 0;
    // Every byte held is counted in #bufferedBytes until the worker takes the body, or until the
    // request ends any other way (refused, timed out, the sender went away).
    const release = () => {
      this.#bufferedBytes -= size;
      size = 0;
      chunks.length = 0;
    };
    // The whole body must arrive in time, even once answered (its rest is then read and thrown
    // away): past the deadline, a sender is answered 408, or disconnected if answered already.
    const deadline = setTimeout(() => {
      release();
      if (res.writableEnded) req.socket.destroy();
      else this.#timedOut(res);
    }, this.#bodyTimeoutMs);
    req.on('data', (chunk: Buffer) => {
      if (res.writableEnded) return; // already answered: the rest is discarded
      if (size + chunk.length > this.#maxBodyBytes) {
        const seen = size + chunk.length;
        release();
        return void this.#tooLarge(res, seen); // the rest is discarded, within the deadline
      }
      if (this.#bufferedBytes + chunk.length > this.#maxBufferedBytes) {
        release();
        return void this.#full(res);
      }
      size += chunk.length;
      this.#bufferedBytes += chunk.length;
      chunks.push(chunk);
    });
    req.on('close', () => {
      clearTimeout(deadline);
      if (!req.complete) release(); // the sender went away mid-body
    });
    req.on('end', () => {
      clearTimeout(deadline);
      if (res.writableEnded) return;
      const body = Buffer.concat(chunks);
      this.#pending.push({
        id: `http-${++this.#seq}`,
        body,
        attempt: 1,
        response: res,
        metadata: { remote: req.socket.remoteAddress ?? null },
        ...traceContextOf(req.headers),
      });
      this.#waker.wake();
    });
    // Declared too large for what is left: refused before its body is read (then thrown away).
    if (this.#bufferedBytes + declared > this.#maxBufferedBytes) this.#full(res);
  }

  /**
   * Bodies already take `maxBufferedBytes`: come back later. The connection stays open, so the
   * sender reads this answer (a close while it still sends could reset it unread); the rest of the
   * body is discarded and the body deadline still applies.
   */
  #full(res: ServerResponse): void {
    if (res.writableEnded) return;
    res.setHeader('retry-after', '1');
    reply(res, 503, {
      outcome: 'retry',
      code: 'BUSY',
      reason: `request bodies already hold ${this.#maxBufferedBytes} bytes: retry`,
    });
  }

  /** The body did not arrive within `bodyTimeoutMs` (a slow or stalled sender). The connection is closed. */
  #timedOut(res: ServerResponse): void {
    if (res.writableEnded) return;
    res.setHeader('connection', 'close');
    reply(res, 408, {
      outcome: 'retry',
      code: 'BODY_TIMEOUT',
      reason: `body not received within ${this.#bodyTimeoutMs}ms: send it again`,
    });
  }

  /**
   * A body over `maxBodyBytes`. The connection stays open while the rest of the body arrives (and
   * is thrown away), as for #full: closed while the sender still sends, it would be reset and the
   * 413 lost. The body deadline bounds how long that may take.
   */
  #tooLarge(res: ServerResponse, size: number): void {
    if (res.writableEnded) return;
    reply(res, 413, {
      outcome: 'rejected',
      code: 'ENVELOPE_TOO_LARGE',
      reason: `body is ${size} bytes or more, the limit is ${this.#maxBodyBytes}`,
    });
  }

  /** Reads and throws away a refused body; a sender still sending at the body deadline is disconnected. */
  #discard(req: IncomingMessage): void {
    const deadline = setTimeout(() => req.socket.destroy(), this.#bodyTimeoutMs);
    req.once('close', () => clearTimeout(deadline));
    req.resume();
  }
}

function reply(res: ServerResponse, status: number, body: Record<string, unknown>): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(`${JSON.stringify(body)}\n`);
}

export function createHttpIngress(options: HttpIngressOptions): Promise<HttpIngressSource> {
  return HttpIngressSource.listen(options);
}

/** The sender's W3C trace context headers, kept for the delivery span's link. */
function traceContextOf(headers: IncomingHttpHeaders): { traceContext?: TraceCarrier } {
  const { traceparent, tracestate } = headers;
  if (typeof traceparent !== 'string') return {};
  return {
    traceContext: { traceparent, tracestate: typeof tracestate === 'string' ? tracestate : undefined },
  };
}
