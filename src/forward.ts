import { RetryLaterError } from './errors.js';
import type { HandlerContext } from './router.js';

export interface ForwardOptions {
  /** The partner app's endpoint; the verified body is POSTed here. */
  readonly url: string;
  /** Per request. Default 10 000 ms (the spec's acknowledgment timeout, for symmetry). */
  readonly timeoutMs?: number;
  /** Extra headers, e.g. an internal auth token for the app. */
  readonly headers?: Readonly<Record<string, string>>;
}

/** Where forwards go, for messages and logs: origin and path only (no credentials, no query). */
export function describeUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return '(invalid url)';
  }
}

const MAX_RETRY_AFTER_MS = 15 * 60_000;

/**
 * A handler that POSTs the signed body exactly as received to the app, with the headers
 * `partner-event-id`, `partner-event-type` and `partner-event-attempt`. 2xx is success; any
 * other status, a timeout or a connection failure fails the attempt (retried with backoff,
 * dead-lettered after the configured attempts); `Retry-After` on 429/503 sets the delay.
 */
export function createForwarder(
  options: ForwardOptions,
): (event: unknown, context: HandlerContext) => Promise<void> {
  const target = describeUrl(options.url);
  const timeoutMs = options.timeoutMs ?? 10_000;
  return async (_event, context) => {
    const signal = AbortSignal.any([context.signal, AbortSignal.timeout(timeoutMs)]);
    let response: Response;
    try {
      response = await fetch(options.url, {
        method: 'POST',
        headers: {
          ...options.headers,
          'content-type': 'application/json',
          'partner-event-id': context.eventId,
          'partner-event-type': context.eventType,
          'partner-event-attempt': String(context.attempt),
        },
        body: context.rawBody,
        signal,
      });
    } catch (cause) {
      const reason =
        signal.aborted && !context.signal.aborted ? `timed out after ${timeoutMs}ms` : 'connection failed';
      throw new Error(`forward to ${target} ${reason}`, { cause });
    }
    // Drain the body so the connection goes back to the pool.
    await response.arrayBuffer().catch(() => undefined);
    if (response.ok) return;
    const message = `forward to ${target} answered HTTP ${response.status}`;
    const retryAfter = parseRetryAfter(response.headers.get('retry-after'));
    if (retryAfter !== undefined && (response.status === 429 || response.status === 503)) {
      throw new RetryLaterError(message, { delayMs: retryAfter });
    }
    throw new Error(message);
  };
}

function parseRetryAfter(value: string | null): number | undefined {
  if (!value) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return Math.min(seconds * 1000, MAX_RETRY_AFTER_MS);
  const date = Date.parse(value);
  if (Number.isNaN(date)) return undefined;
  return Math.min(Math.max(0, date - Date.now()), MAX_RETRY_AFTER_MS);
}
