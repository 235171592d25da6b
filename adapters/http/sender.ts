import { AdapterError, errorMessage, ForwardError } from '../../src/core/errors.js';
import { classifyAnswer, header, redirectReason } from '../../src/core/http-answer.js';
import { createHttpHandoff, HttpHandoffFailure } from '../../src/core/http-handoff.js';
import type { Target } from '../../src/core/target.js';

/** An ingress answers with one short JSON line; more than this is not an ingress's answer. */
const ANSWER_BYTES = 64 * 1024;

/**
 * POSTs each envelope to an HTTP ingress (`run --source http://…`) over a keep-alive connection
 * pool of at most `connections` connections; the answer is the worker's verdict. A redirect is
 * not followed and not accepted (a 2xx from elsewhere is no ingress's). A 2xx whose body is cut
 * off or stalls throws a `ForwardError` (`FORWARD_ANSWER_INCOMPLETE`): not a whole answer.
 */
export function httpTarget(url: URL, options: { connections: number; timeoutMs?: number }): Target {
  const handoff = createHttpHandoff(url, {
    connections: options.connections,
    timeoutMs: options.timeoutMs ?? 10_000,
  });
  const name = handoff.target;
  return {
    name,
    async send(message) {
      let answer: Awaited<ReturnType<typeof handoff.post>>;
      try {
        answer = await handoff.post({
          headers: { 'content-type': 'application/json' },
          body: message.body,
          readBytes: ANSWER_BYTES,
        });
      } catch (cause) {
        const reason = cause instanceof HttpHandoffFailure ? cause.reason : `failed: ${errorMessage(cause)}`;
        // A 2xx whose body was cut off or stalled: answered, but not whole, so not taken.
        if (cause instanceof HttpHandoffFailure && cause.status !== undefined)
          throw new ForwardError('FORWARD_ANSWER_INCOMPLETE', `POST ${name} ${reason}`, { cause });
        throw new AdapterError(`POST ${name} ${reason}`, { cause });
      }
      const verdict = classifyAnswer(answer.status, answer.headers, url);
      const code = codeOf(answer.text);
      const retryAfter = Number(header(answer.headers, 'retry-after'));
      return {
        accepted: verdict.kind === 'delivered',
        status: answer.status,
        detail:
          verdict.kind === 'redirected'
            ? redirectReason(verdict).replace(/^answered /, '')
            : `HTTP ${answer.status}${code ? ` ${code}` : ''}`,
        ...(Number.isFinite(retryAfter) && retryAfter > 0 ? { retryAfterSeconds: retryAfter } : {}),
      };
    },
    close: () => handoff.close(),
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
