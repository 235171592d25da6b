import type { HandlerContext } from '../consumer/router.js';
import { ConfigError, ForwardError, RetryLaterError } from '../core/errors.js';
import { classifyAnswer, hasCredentials, redirectReason } from '../core/http-answer.js';
import { redactUrl } from '../core/redact.js';

export interface ForwardOptions {
  /** The partner app's endpoint; the verified body is POSTed here. */
  readonly url: string;
  /** Per request. Default 10 000 ms (the spec's acknowledgment timeout, for symmetry). */
  readonly timeoutMs?: number;
  /** Extra headers, e.g. an internal auth token for the app. */
  readonly headers?: Readonly<Record<string, string>>;
}

/** Where forwards go, for messages and logs: scheme, host and path only (`redactUrl`). */
export function describeUrl(url: string): string {
  return redactUrl(url);
}

/** Why a forward URL with `user:password@` is refused, and what to do instead. */
export const FORWARD_URL_CREDENTIALS =
  'must not contain a user name or password (user:password@), which fetch refuses: send them in an Authorization header with forward.headers instead';

/** Why a forward URL can never work, or undefined. Never repeats the URL (it may hold a password). */
export function forwardUrlProblem(url: string): string | undefined {
  if (!URL.canParse(url)) return 'is not a URL';
  if (!/^https?:$/.test(new URL(url).protocol)) return 'must be an http: or https: URL';
  return hasCredentials(url) ? FORWARD_URL_CREDENTIALS : undefined;
}

/**
 * An id from the signed body as a header value: always `encodeURIComponent` of its UTF-8, so any
 * id can be sent (fetch refuses characters above U+00FF, and Latin-1 bytes would be ambiguous) and
 * one `decodeURIComponent` always gives it back, `%` included. The ids and types the service
 * issues are letters, digits, `_`, `-` and `.`, which the encoding leaves as they are. A lone
 * surrogate (no UTF-8 form) becomes U+FFFD.
 */
export function encodeHeaderValue(value: string): string {
  return encodeURIComponent(value.toWellFormed());
}

/**
 * A handler that POSTs the signed body exactly as received to the app, with the headers
 * `partner-event-id`, `partner-event-type` (percent-encoded: `encodeHeaderValue`) and
 * `partner-event-attempt`. 2xx is success; any
 * other status, a timeout or a connection failure fails the attempt (retried with backoff,
 * dead-lettered after the configured attempts); `Retry-After` on 429/503 sets the delay. A
 * redirect is not followed: it fails the attempt as `FORWARD_REDIRECTED` (see `classifyAnswer`).
 */
export function createForwarder(
  options: ForwardOptions,
): (event: unknown, context: HandlerContext) => Promise<void> {
  const target = describeUrl(options.url);
  const problem = forwardUrlProblem(options.url);
  if (problem) throw new ConfigError(`forward URL ${target} ${problem}`);
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
          'partner-event-id': encodeHeaderValue(context.eventId),
          'partner-event-type': encodeHeaderValue(context.eventType),
          'partner-event-attempt': String(context.attempt),
        },
        body: context.rawBody,
        redirect: 'manual',
        signal,
      });
    } catch (cause) {
      const reason =
        signal.aborted && !context.signal.aborted ? `timed out after ${timeoutMs}ms` : 'connection failed';
      throw new Error(`forward to ${target} ${reason}`, { cause });
    }
    // Drain the body so the connection goes back to the pool.
    await response.arrayBuffer().catch(() => undefined);
    const answer = classifyAnswer(response.status, response.headers, options.url);
    if (answer.kind === 'delivered') return;
    if (answer.kind === 'redirected') {
      throw new ForwardError('FORWARD_REDIRECTED', `forward to ${target} ${redirectReason(answer)}`, {
        details: { status: answer.status, location: answer.location },
      });
    }
    const message = `forward to ${target} answered HTTP ${answer.status}`;
    if (answer.retryAfterMs !== undefined)
      throw new RetryLaterError(message, { delayMs: answer.retryAfterMs });
    throw new Error(message);
  };
}
