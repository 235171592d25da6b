import { Pool } from 'undici';
import type { AbortSignalLike } from './abort-notice.js';
import { errorMessage } from './errors.js';
import type { AnswerHeaders } from './http-answer.js';
import { redactUrl } from './redact.js';

/**
 * How an event is POSTed, shared by the forwarder (`run --forward`, `replay --forward`) and the
 * `--to http(s)` target: a keep-alive connection pool to one origin, with failures named for an
 * operator. What the answer means is `classifyAnswer` (http-answer.ts).
 *
 * A pool, not `fetch`: `fetch` costs ~250 µs of CPU per request in its own machinery, a pool's
 * `request` ~20 µs (docs/performance-log.md, "Which HTTP client").
 */

export interface HttpHandoffOptions {
  /**
   * Connections kept to the origin, at most: the number of hand-offs in flight at once (the
   * consumer's `concurrency`). One request per connection at a time (no pipelining).
   */
  readonly connections: number;
  /** Limit for connecting, for the answer's headers after the request is sent, and between chunks of its body. */
  readonly timeoutMs: number;
}

export interface HttpPost {
  /** Header names in lower case; `content-length` and `host` are set by the pool. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | Uint8Array;
  /** Aborts the request (the consumer stops, or the handler's deadline passed). */
  readonly signal?: AbortSignalLike;
  /**
   * Read up to this many bytes of the answer's body as text (the rest is discarded and the
   * connection closed). Without it the body is discarded, read to its end so that the connection
   * goes back to the pool (closed instead when it is larger than 64 KiB).
   */
  readonly readBytes?: number;
}

export interface HttpPostAnswer {
  readonly status: number;
  readonly headers: AnswerHeaders;
  /** The body's first `readBytes` bytes as UTF-8, or `''` when it was discarded. */
  readonly text: string;
}

export interface HttpHandoff {
  /** Where requests go, as it may be printed (`redactUrl`). */
  readonly target: string;
  /**
   * POSTs once and resolves with the answer, whatever its status; rejects with an
   * `HttpHandoffFailure` when there is no answer (refused, not found, timed out, aborted).
   */
  post(request: HttpPost): Promise<HttpPostAnswer>;
  /** Closes every connection; requests in flight finish first. */
  close(): Promise<void>;
}

/** No answer to a hand-off: `reason` names why for an operator (`connection refused (ECONNREFUSED)`). */
export class HttpHandoffFailure extends Error {
  readonly reason: string;
  constructor(reason: string, options: { cause: unknown }) {
    super(reason, options);
    this.name = 'HttpHandoffFailure';
    this.reason = reason;
  }
}

const DISCARD_LIMIT = 64 * 1024;

/**
 * A keep-alive pool that POSTs to `url` (its path and query; the fragment is dropped). The URL
 * must already be checked (http: or https:, no user:password@). Close it once nothing is sent any
 * more, so that the process can exit without waiting for idle connections to time out.
 */
export function createHttpHandoff(url: string | URL, options: HttpHandoffOptions): HttpHandoff {
  const parsed = new URL(url);
  const path = `${parsed.pathname}${parsed.search}`;
  const { timeoutMs } = options;
  const pool = new Pool(parsed.origin, {
    connections: options.connections,
    pipelining: 1,
    connect: { timeout: timeoutMs },
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });

  async function once(request: HttpPost): Promise<HttpPostAnswer> {
    const response = await pool.request({
      path,
      method: 'POST',
      headers: request.headers,
      body: request.body,
      // undici takes any signal with `addEventListener` (its util.addAbortListener); its types
      // name only AbortSignal and EventEmitter.
      signal: (request.signal ?? null) as AbortSignal | null,
    });
    let text = '';
    try {
      if (request.readBytes === undefined) await response.body.dump({ limit: DISCARD_LIMIT });
      else text = await readText(response.body, request.readBytes);
    } catch {
      // The status and headers are the answer; a body cut short only costs the connection.
    }
    return { status: response.statusCode, headers: response.headers, text };
  }

  return {
    target: redactUrl(parsed),
    async post(request) {
      try {
        return await once(request);
      } catch (error) {
        // A kept-alive connection the app closed while it sat idle fails the next request sent on
        // it before any answer (the app never saw it). Send once more on a fresh connection: at
        // worst the app sees the event twice, which any retry can do (partner-event-id tells).
        if (!closedBeforeAnswer(error) || request.signal?.aborted)
          throw failure(error, request, parsed, timeoutMs);
        try {
          return await once(request);
        } catch (again) {
          throw failure(again, request, parsed, timeoutMs);
        }
      }
    },
    close: () => pool.close(),
  };
}

async function readText(body: AsyncIterable<Uint8Array> & { destroy(): void }, limit: number) {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buffer = Buffer.from(chunk);
    chunks.push(buffer);
    size += buffer.length;
    if (size >= limit) {
      body.destroy();
      break;
    }
  }
  return Buffer.concat(chunks).subarray(0, limit).toString('utf8');
}

/** The Node or undici error code of a failure (the first of an AggregateError's, as for several addresses). */
function codeOf(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') return code;
  if (error instanceof AggregateError) return codeOf(error.errors[0]);
  return codeOf((error as { cause?: unknown }).cause);
}

/** The connection closed (reset, or ended by the other side) after the request went out, before an answer. */
function closedBeforeAnswer(error: unknown): boolean {
  const code = codeOf(error);
  return code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EPIPE';
}

const REASONS: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'failed: connection refused (ECONNREFUSED)',
  ENOTFOUND: 'failed: host not found (ENOTFOUND)',
  EAI_AGAIN: 'failed: host name lookup failed, try again (EAI_AGAIN)',
  EHOSTUNREACH: 'failed: host unreachable (EHOSTUNREACH)',
  ENETUNREACH: 'failed: network unreachable (ENETUNREACH)',
  ECONNRESET: 'failed: connection reset before an answer (ECONNRESET)',
  EPIPE: 'failed: connection closed before an answer (EPIPE)',
  UND_ERR_SOCKET: 'failed: connection closed before an answer',
};

/**
 * The addresses a failed connection went to (`127.0.0.1:8080`, `[::1]:8080`), from the system
 * errors down the chain: which address a host name resolved to, when the URL names a host.
 */
function addressesOf(error: unknown, found: string[] = []): string[] {
  if (typeof error !== 'object' || error === null) return found;
  const { address, port } = error as { address?: unknown; port?: unknown };
  if (typeof address === 'string' && typeof port === 'number') {
    const where = `${address.includes(':') ? `[${address}]` : address}:${port}`;
    if (!found.includes(where)) found.push(where);
  }
  if (error instanceof AggregateError) for (const each of error.errors) addressesOf(each, found);
  return addressesOf((error as { cause?: unknown }).cause, found);
}

function failure(error: unknown, request: HttpPost, url: URL, timeoutMs: number): HttpHandoffFailure {
  const code = codeOf(error);
  let reason: string;
  if (request.signal?.aborted) {
    reason = 'aborted';
  } else if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'ETIMEDOUT') {
    reason = `timed out after ${timeoutMs}ms connecting`;
  } else if (code === 'UND_ERR_HEADERS_TIMEOUT') {
    reason = `timed out after ${timeoutMs}ms waiting for an answer`;
  } else {
    reason = (code && REASONS[code]) ?? `failed: ${errorMessage(error)}${code ? ` (${code})` : ''}`;
  }
  // A URL with an IP address names it already; a host name does not say which address was tried.
  const addresses = addressesOf(error).filter((a) => a !== url.host);
  if (addresses.length > 0) reason += `, address ${addresses.join(', ')}`;
  return new HttpHandoffFailure(reason, { cause: error });
}
