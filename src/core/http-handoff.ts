import { finished, type Readable } from 'node:stream';
import { type Dispatcher, Pool } from 'undici';
import type { AbortSignalLike } from './abort-notice.js';
import { errorMessage } from './errors.js';
import { type AnswerHeaders, header } from './http-answer.js';
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
   * goes back to the pool (closed instead when it is larger than 64 KiB). Either way, a 2xx whose
   * body fails before then (reset, closed, stalled for `timeoutMs`) rejects: it was not complete.
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
   * `HttpHandoffFailure` when there is no answer (refused, not found, timed out, aborted), or when
   * a 2xx answer's body did not arrive whole (cut off or stalled; its `status` is then set).
   */
  post(request: HttpPost): Promise<HttpPostAnswer>;
  /** Closes every connection; requests in flight finish first. */
  close(): Promise<void>;
}

/**
 * No answer to a hand-off, or a 2xx whose body did not arrive whole: `reason` names why for an
 * operator (`connection refused (ECONNREFUSED)`, `answered HTTP 200, then timed out after …`).
 */
export class HttpHandoffFailure extends Error {
  readonly reason: string;
  /** The 2xx status of an answer whose body then failed; undefined when there was no answer. */
  readonly status: number | undefined;
  constructor(reason: string, options: { cause: unknown; status?: number }) {
    super(reason, { cause: options.cause });
    this.name = 'HttpHandoffFailure';
    this.reason = reason;
    this.status = options.status;
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
    return readAnswer(response, request, timeoutMs);
  }

  return {
    target: redactUrl(parsed),
    async post(request) {
      try {
        return await once(request);
      } catch (error) {
        // A 2xx whose body failed was answered: the app has seen the request, and said why.
        if (error instanceof HttpHandoffFailure) throw error;
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

/** The answer to a POST, its body read as `request` asks; a 2xx whose body fails rejects. */
async function readAnswer(
  response: Dispatcher.ResponseData,
  request: HttpPost,
  timeoutMs: number,
): Promise<HttpPostAnswer> {
  const { statusCode: status, headers } = response;
  const read = { bytes: 0 };
  try {
    let text = '';
    if (request.readBytes === undefined) await discard(response.body, headers, read);
    else text = await readText(response.body, request.readBytes, read);
    return { status, headers, text };
  } catch (error) {
    // A failure's status and headers are its whole answer: a body cut short only costs the
    // connection. A 2xx is a success only with all of its body (the hand-off is complete or it
    // failed): a reset or a stall could be a proxy or an app that fell over mid-answer.
    if (status < 200 || status >= 300) return { status, headers, text: '' };
    throw bodyFailure(error, { status, headers, read: read.bytes }, request, timeoutMs);
  }
}

/**
 * Reads an answer's body to its end and throws it away, so that its connection goes back to the
 * pool; counts its bytes in `read`. Past `DISCARD_LIMIT` bytes the body is let go instead
 * (destroyed: only the connection is lost, and the answer stands), at once when its
 * `content-length` says so. Rejects when the body fails before its end (reset, closed,
 * `bodyTimeout`, aborted): undici's `dump()`, which this replaces, resolves on close whatever
 * happened. Events, not `for await`: this is every forward's path, and an iterator costs promise
 * hops per chunk.
 */
function discard(body: Readable, headers: AnswerHeaders, read: { bytes: number }): Promise<void> {
  if (Number(header(headers, 'content-length')) > DISCARD_LIMIT) {
    body.destroy();
    return Promise.resolve();
  }
  return new Promise((resolve, reject) => {
    body.on('data', (chunk: Uint8Array) => {
      read.bytes += chunk.length;
      if (read.bytes <= DISCARD_LIMIT) return;
      resolve(); // before the destroy, whose premature close `finished` reports
      body.destroy();
    });
    finished(body, (error) => (error ? reject(error) : resolve()));
  });
}

/**
 * The first `limit` bytes of an answer's body as UTF-8, its bytes counted in `read`; the rest is
 * let go (destroyed: only the connection is lost). Rejects when the body fails before either.
 */
async function readText(body: Readable, limit: number, read: { bytes: number }): Promise<string> {
  const chunks: Buffer[] = [];
  // Leaving the loop early (break) destroys the body; an error ends it by throwing.
  for await (const chunk of body as AsyncIterable<Uint8Array>) {
    const buffer = Buffer.from(chunk);
    chunks.push(buffer);
    read.bytes += buffer.length;
    if (read.bytes >= limit) break;
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

/**
 * A 2xx answer whose body did not arrive whole, e.g. `answered HTTP 200, then the connection
 * closed before the end of its body (7 of 1000 bytes)`. An abort is only `aborted`, as before an answer.
 */
function bodyFailure(
  error: unknown,
  answer: { status: number; headers: AnswerHeaders; read: number },
  request: HttpPost,
  timeoutMs: number,
): HttpHandoffFailure {
  if (request.signal?.aborted) return new HttpHandoffFailure('aborted', { cause: error });
  const code = codeOf(error);
  const length = header(answer.headers, 'content-length');
  const received = `(${answer.read}${length === undefined ? '' : ` of ${length}`} bytes)`;
  let what: string;
  if (code === 'UND_ERR_BODY_TIMEOUT')
    what = `timed out after ${timeoutMs}ms waiting for the rest of its body`;
  else if (closedBeforeAnswer(error)) what = 'the connection closed before the end of its body';
  else what = `its body failed: ${errorMessage(error)}${code ? ` (${code})` : ''}`;
  const reason = `answered HTTP ${answer.status}, then ${what} ${received}`;
  return new HttpHandoffFailure(reason, { cause: error, status: answer.status });
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
