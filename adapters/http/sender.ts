import { AdapterError, errorMessage } from '../../src/core/errors.js';
import { classifyAnswer, redirectReason } from '../../src/core/http-answer.js';
import { redactUrl } from '../../src/core/redact.js';
import type { Target } from '../../src/core/target.js';

/**
 * POSTs each envelope to an HTTP ingress (`run --source http://…`); the answer is the worker's
 * verdict. A redirect is not followed and not accepted (a 2xx from elsewhere is no ingress's).
 */
export function httpTarget(url: URL, timeoutMs = 10_000): Target {
  const name = redactUrl(url.href);
  return {
    name,
    async send(message) {
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: typeof message.body === 'string' ? message.body : Buffer.from(message.body),
          redirect: 'manual',
          signal: AbortSignal.timeout(timeoutMs),
        });
      } catch (cause) {
        throw new AdapterError(`POST ${name} failed: ${errorMessage(cause)}`, { cause });
      }
      const text = await response.text().catch(() => '');
      const answer = classifyAnswer(response.status, Object.fromEntries(response.headers), url);
      const code = codeOf(text);
      const retryAfter = Number(response.headers.get('retry-after'));
      return {
        accepted: answer.kind === 'delivered',
        status: response.status,
        detail:
          answer.kind === 'redirected'
            ? redirectReason(answer).replace(/^answered /, '')
            : `HTTP ${response.status}${code ? ` ${code}` : ''}`,
        ...(Number.isFinite(retryAfter) && retryAfter > 0 ? { retryAfterSeconds: retryAfter } : {}),
      };
    },
    close: async () => {},
  };
}

/** The `code` (or ack `result`) of an ingress answer, if it is one. */
function codeOf(text: string): string | undefined {
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== 'object' || value === null) return undefined;
    const { code, result } = value as { code?: unknown; result?: unknown };
    if (typeof code === 'string') return code;
    return typeof result === 'string' ? result : undefined;
  } catch {
    return undefined;
  }
}
