import { errorMessage } from '../core/errors.js';

/**
 * The causes under an error, one line each, outermost first, for a CLI's error output: what the
 * kit's message hides (`EACCES: permission denied, open '…'`, `SyntaxError: Unexpected token`).
 * A cause whose message the lines above already quote is skipped, so each text is printed once.
 */
export function causeLines(error: Error): string[] {
  const lines: string[] = [];
  let printed = errorMessage(error);
  const seen = new Set<unknown>([error]);
  for (let cause = error.cause; cause !== undefined && !seen.has(cause); cause = causeOf(cause)) {
    seen.add(cause);
    const message = errorMessage(cause);
    if (printed.includes(message)) continue;
    const line = describeCause(cause, message);
    lines.push(line);
    printed += `\n${line}`;
  }
  return lines;
}

function causeOf(error: unknown): unknown {
  return error instanceof Error ? error.cause : undefined;
}

/** `SyntaxError: Unexpected token ';'`; a plain `Error` by its message alone, its code added when the message lacks it. */
function describeCause(cause: unknown, message: string): string {
  if (!(cause instanceof Error)) return message;
  const code = (cause as { code?: unknown }).code;
  const named = cause.name && cause.name !== 'Error' ? `${cause.name}: ${message}` : message;
  return typeof code === 'string' && !named.includes(code) ? `${named} (${code})` : named;
}
