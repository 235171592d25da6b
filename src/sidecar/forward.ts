import { abortOf } from '../consumer/handler-context.js';
import type { HandlerContext } from '../consumer/router.js';
import { ConfigError, errorMessage, ForwardError, RetryLaterError } from '../core/errors.js';
import { classifyAnswer, hasCredentials, redirectReason } from '../core/http-answer.js';
import { createHttpHandoff, HttpHandoffFailure, type HttpPostAnswer } from '../core/http-handoff.js';
import { redactUrl } from '../core/redact.js';
import { startClientSpan } from '../core/tracing.js';

/** Where forwards go, for messages and logs: scheme, host and path only (`redactUrl`). */
export function describeUrl(url: string): string {
  return redactUrl(url);
}

/** Why a forward URL with `user:password@` is refused, and what to do instead. */
export const FORWARD_URL_CREDENTIALS =
  'must not contain a user name or password (user:password@), which would never be sent: send them in an Authorization header with forward.headers instead';

/** Why a forward URL can never work, or undefined. Never repeats the URL (it may hold a password). */
export function forwardUrlProblem(url: string): string | undefined {
  if (!URL.canParse(url)) return 'is not a URL';
  if (!/^https?:$/.test(new URL(url).protocol)) return 'must be an http: or https: URL';
  return hasCredentials(url) ? FORWARD_URL_CREDENTIALS : undefined;
}

/**
 * An id from the signed body as a header value: always `encodeURIComponent` of its UTF-8, so any
 * id can be sent (HTTP headers cannot carry characters above U+00FF, and Latin-1 bytes would be ambiguous) and
 * one `decodeURIComponent` always gives it back, `%` included. The ids and types the service
 * issues are letters, digits, `_`, `-` and `.`, which the encoding leaves as they are. A lone
 * surrogate (no UTF-8 form) becomes U+FFFD.
 */
export function encodeHeaderValue(value: string): string {
  return encodeURIComponent(value.toWellFormed());
}

export interface ForwardOptions {
  /** The partner app's endpoint; the verified body is POSTed here. */
  readonly url: string;
  /**
   * Limit for connecting, for the answer's headers once the request is sent, and between chunks
   * of its body. Default 10 000 ms (the spec's acknowledgment timeout, for symmetry). Any of them
   * passing fails the attempt, a 2xx's body too (`FORWARD_ANSWER_INCOMPLETE`).
   */
  readonly timeoutMs?: number;
  /** Extra headers, e.g. an internal auth token for the app. */
  readonly headers?: Readonly<Record<string, string>>;
  /**
   * Keep-alive connections to the app, at most. Default 16; give the consumer's `concurrency`,
   * so that every event in flight has its connection and none waits for one.
   */
  readonly connections?: number;
  /** Told the app's HTTP status for each forward it answered (for `run`'s terminal lines). */
  readonly onAnswer?: (eventId: string, status: number) => void;
}

/** The forward handler, and the connection pool behind it. */
export interface Forwarder {
  (event: unknown, context: HandlerContext): Promise<void>;
  /**
   * Whether the app is reachable, for `/readyz`: not ok once `FORWARD_UNREACHABLE_AFTER`
   * forwards in a row got no answer at all (refused, host not found, timed out, reset), with the
   * last reason; ok again at the next answer, whatever its status (the app is there).
   */
  reachability(): { readonly ok: boolean; readonly detail?: string };
  /** Closes the connections to the app. Call it once the consumer has stopped. */
  close(): Promise<void>;
}

/** Forwards in a row without an answer after which the app counts as unreachable (one failure can be a restart). */
export const FORWARD_UNREACHABLE_AFTER = 3;

/**
 * A handler that POSTs the signed body exactly as received to the app, with the headers
 * `partner-event-id`, `partner-event-type` (percent-encoded: `encodeHeaderValue`) and
 * `partner-event-attempt`, over a pool of keep-alive connections. 2xx is success; any other
 * status, a timeout or a connection failure (named: refused, host not found, reset) fails the
 * attempt (retried with backoff, dead-lettered after the configured attempts); `Retry-After` on
 * 429/503 sets the delay. A redirect is not followed: it fails the attempt as
 * `FORWARD_REDIRECTED` (see `classifyAnswer`). The answer's body is read and discarded, so that
 * its connection is reused; a 2xx whose body is then cut off or stalls for `timeoutMs` fails the
 * attempt as `FORWARD_ANSWER_INCOMPLETE` (a body over 64 KiB is not read: its connection is closed).
 */
/** Forwards in a row that got no answer at all (refused, not found, timed out): for /readyz. */
class Reachability {
  #unanswered = 0;
  #lastFailure = '';

  failed(reason: string): void {
    this.#unanswered++;
    this.#lastFailure = reason;
  }

  answered(): void {
    this.#unanswered = 0;
  }

  check(): { ok: boolean; detail?: string } {
    if (this.#unanswered < FORWARD_UNREACHABLE_AFTER) return { ok: true };
    return {
      ok: false,
      detail: `${this.#unanswered} forwards in a row got no answer; last: ${this.#lastFailure}`,
    };
  }
}

/** Header names in lower case, so that ours replace any same-named ones given in `headers`. */
function forwardHeaders(headers: Readonly<Record<string, string>> | undefined): Record<string, string> {
  const base: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) base[name.toLowerCase()] = value;
  base['content-type'] = 'application/json';
  return base;
}

/** The app's 2xx status; anything else throws: a redirect (never followed), a retry-after, a failure. */
function deliveredStatus(answer: HttpPostAnswer, url: string, target: string): number {
  const outcome = classifyAnswer(answer.status, answer.headers, url);
  if (outcome.kind === 'delivered') return answer.status;
  if (outcome.kind === 'redirected') {
    throw new ForwardError('FORWARD_REDIRECTED', `forward to ${target} ${redirectReason(outcome)}`, {
      details: { status: outcome.status, location: outcome.location },
    });
  }
  const message = `forward to ${target} answered HTTP ${outcome.status}`;
  if (outcome.retryAfterMs !== undefined)
    throw new RetryLaterError(message, { delayMs: outcome.retryAfterMs });
  throw new Error(message);
}

/** What a failed POST throws: FORWARD_ANSWER_INCOMPLETE for a 2xx cut off, else a plain error. */
function postFailure(
  cause: unknown,
  post: {
    readonly target: string;
    readonly reach: Reachability;
    readonly options: ForwardOptions;
    readonly eventId: string;
    readonly aborted: boolean;
  },
): Error {
  const { target, reach } = post;
  const reason = cause instanceof HttpHandoffFailure ? cause.reason : `failed: ${errorMessage(cause)}`;
  const status = cause instanceof HttpHandoffFailure ? cause.status : undefined;
  if (status !== undefined) {
    // The app answered (it is reachable), but not all of its answer arrived: not delivered.
    reach.answered();
    post.options.onAnswer?.(post.eventId, status);
    return new ForwardError('FORWARD_ANSWER_INCOMPLETE', `forward to ${target} ${reason}`, {
      cause,
      details: { status },
    });
  }
  // An abort is the consumer stopping or the handler's deadline: nothing about the app.
  if (!post.aborted) reach.failed(`forward to ${target} ${reason}`);
  return new Error(`forward to ${target} ${reason}`, { cause });
}

export function createForwarder(options: ForwardOptions): Forwarder {
  const target = describeUrl(options.url);
  const problem = forwardUrlProblem(options.url);
  if (problem) throw new ConfigError(`forward URL ${target} ${problem}`);
  const handoff = createHttpHandoff(options.url, {
    connections: options.connections ?? 16,
    timeoutMs: options.timeoutMs ?? 10_000,
  });
  const baseHeaders = forwardHeaders(options.headers);

  const reach = new Reachability();
  // The span's url.full: no query (it may hold a token); credentials were refused above.
  const { origin, pathname } = new URL(options.url);
  const spanUrl = `${origin}${pathname}`;
  const forward = async (_event: unknown, context: HandlerContext): Promise<void> => {
    // A span of its own, so that the app's spans are its children (traceparent).
    const span = startClientSpan('partner_events.forward', spanUrl);
    try {
      const status = await post(context, span?.headers);
      span?.end(status);
    } catch (error) {
      span?.end(undefined, error);
      throw error;
    }
  };

  /** POSTs the event; resolves with the 2xx status, throws for anything else. */
  const post = async (
    context: HandlerContext,
    trace: Readonly<Record<string, string>> | undefined,
  ): Promise<number> => {
    let answer: HttpPostAnswer;
    const abort = abortOf(context);
    try {
      answer = await handoff.post({
        headers: {
          ...baseHeaders,
          ...trace,
          'partner-event-id': encodeHeaderValue(context.eventId),
          'partner-event-type': encodeHeaderValue(context.eventType),
          'partner-event-attempt': String(context.attempt),
        },
        body: context.rawBody,
        signal: abort,
      });
    } catch (cause) {
      throw postFailure(cause, { target, reach, options, eventId: context.eventId, aborted: abort.aborted });
    }
    reach.answered();
    options.onAnswer?.(context.eventId, answer.status);
    return deliveredStatus(answer, options.url, target);
  };

  return Object.assign(forward, { reachability: () => reach.check(), close: () => handoff.close() });
}
