import { AdapterError } from '../../src/core/errors.js';

/** What the Storage service said about a failed call (a `RestError`), read without trusting its type. */
export interface ServiceErrorInfo {
  /** HTTP status, when the service answered. */
  readonly status: number | undefined;
  /** The service's error code, e.g. `QueueNotFound`, `PopReceiptMismatch`, `AuthorizationFailure`. */
  readonly code: string | undefined;
  readonly message: string;
}

export function serviceErrorInfo(error: unknown): ServiceErrorInfo {
  if (typeof error !== 'object' || error === null) {
    return { status: undefined, code: undefined, message: String(error) };
  }
  const { statusCode, code, message } = error as { statusCode?: unknown; code?: unknown; message?: unknown };
  return {
    status: typeof statusCode === 'number' ? statusCode : undefined,
    code: typeof code === 'string' ? code : undefined,
    // The SDK appends RequestId/Time lines; the first line is the part worth logging.
    message: typeof message === 'string' ? (message.split('\n')[0] ?? message) : String(error),
  };
}

/** The likely fix for the service codes an operator can do something about. */
const HINTS: Readonly<Record<string, string>> = {
  QueueNotFound: 'create the queue first (the consumer never creates the queue it reads)',
  AuthorizationPermissionMismatch:
    'the credential lacks a permission: the consumer needs Process and Update on the queue, and Add on the poison queue',
  AuthorizationFailure: 'the credential is not allowed here (network rules, role or SAS scope)',
  AuthenticationFailed:
    'the credential was refused: check the SAS expiry and signature; a service SAS covers one queue only, so the poison queue needs an account SAS or a client of its own',
};

/**
 * Wraps a failed SDK call as an `AdapterError` whose message names the operation, the cause and the
 * fix. `deadline` is the call's abort signal: when its timeout fired, the service did not answer.
 */
export function adapterError(operation: string, error: unknown, deadline?: AbortSignal): AdapterError {
  if (deadline?.aborted && (deadline.reason as { name?: unknown } | undefined)?.name === 'TimeoutError') {
    return new AdapterError(
      `${operation} failed: no answer within requestTimeoutMs (the service or the network path is stalled)`,
      { cause: error, details: { status: undefined, service_code: undefined, timed_out: true } },
    );
  }
  const info = serviceErrorInfo(error);
  const status = [info.status, info.code].filter((part) => part !== undefined).join(' ');
  const hint = info.code === undefined ? undefined : HINTS[info.code];
  const text = `${operation} failed${status ? ` (${status})` : ''}: ${info.message}${hint ? ` — ${hint}` : ''}`;
  return new AdapterError(text, {
    cause: error,
    details: { status: info.status, service_code: info.code },
  });
}
