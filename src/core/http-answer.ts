/**
 * What an HTTP hand-off's answer means, for every sender of the kit that POSTs an event somewhere
 * (the sidecar's forward to the app, `--to` an HTTP ingress). A hand-off is complete or it failed:
 * only a 2xx from the URL asked for delivers, and a redirect is never followed.
 */
import { redactUrl } from './redact.js';

const MAX_RETRY_AFTER_MS = 15 * 60_000;

/** Whether a URL carries `user:password@` (or just `user@`), which a request never sends. */
export function hasCredentials(url: string): boolean {
  try {
    const parsed = new URL(url);
    return parsed.username !== '' || parsed.password !== '';
  } catch {
    return false;
  }
}

/**
 * What an HTTP answer to a hand-off means. Only a 2xx from the URL asked for delivers: a 3xx is
 * never followed (a 302 would turn the POST into a GET to a login page whose 200 is not the app's;
 * a 307 would re-send the body and the headers to wherever it points), so it fails the attempt.
 */
export type HttpAnswer =
  | { readonly kind: 'delivered' }
  | { readonly kind: 'redirected'; readonly status: number; readonly location: string }
  | { readonly kind: 'failed'; readonly status: number; readonly retryAfterMs: number | undefined };

/** Answer headers as an HTTP client gives them: lower-case names, a list when repeated. */
export type AnswerHeaders = Readonly<Record<string, string | string[] | undefined>>;

/** Classifies an answer to a request sent (redirects not followed) to `url`. */
export function classifyAnswer(status: number, headers: AnswerHeaders, url: string | URL): HttpAnswer {
  if (status >= 200 && status < 300) return { kind: 'delivered' };
  if (status >= 300 && status < 400) {
    return { kind: 'redirected', status, location: describeLocation(header(headers, 'location'), url) };
  }
  const retryAfter =
    status === 429 || status === 503 ? parseRetryAfter(header(headers, 'retry-after')) : undefined;
  return { kind: 'failed', status, retryAfterMs: retryAfter };
}

/** A header's one value (the first when repeated). */
export function header(headers: AnswerHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** The `Location` of a redirect, for logs: resolved against the request, origin and path only. */
function describeLocation(location: string | undefined, base: string | URL): string {
  if (!location) return '(no Location)';
  try {
    return redactUrl(new URL(location, base).href);
  } catch {
    return '(invalid Location)';
  }
}

/** The reason a redirect failed an attempt, e.g. `answered HTTP 302, redirect to http://app/login (not followed)`. */
export function redirectReason(answer: { status: number; location: string }): string {
  return `answered HTTP ${answer.status}, redirect to ${answer.location} (not followed)`;
}

/** `Retry-After` in ms (seconds or an HTTP date), capped at 15 minutes; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | undefined): number | undefined {
  if (!value) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return Math.min(seconds * 1000, MAX_RETRY_AFTER_MS);
  const date = Date.parse(value);
  if (Number.isNaN(date)) return undefined;
  return Math.min(Math.max(0, date - Date.now()), MAX_RETRY_AFTER_MS);
}
