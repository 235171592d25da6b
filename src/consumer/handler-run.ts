import type { ErrorCode } from '../core/errors.js';

/** Why a run of handlers was cut short. */
export type AbortCode = Extract<ErrorCode, 'SHUTDOWN' | 'HANDLER_TIMEOUT' | 'LEASE_LOST'>;

/**
 * One execution of an event's handlers: its deadline, its dedupe lease, and an AbortSignal that
 * is created only when a handler asks for it (an AbortSignal costs microseconds; most handlers
 * never look at theirs).
 */
export class HandlerRun {
  readonly eventId: string;
  readonly token: string;
  readonly deadline: number;
  nextExtendAt: number;
  leaseUntil: number;
  #abortCode: AbortCode | undefined;
  #controller: AbortController | undefined;
  #wake: (() => void) | undefined;

  constructor(eventId: string, token: string, timing: { now: number; timeoutMs: number; leaseMs: number }) {
    this.eventId = eventId;
    this.token = token;
    this.deadline = timing.now + timing.timeoutMs;
    this.leaseUntil = timing.now + timing.leaseMs;
    this.nextExtendAt = timing.now + timing.leaseMs / 3;
  }

  get abortCode(): AbortCode | undefined {
    return this.#abortCode;
  }

  get signal(): AbortSignal {
    this.#controller ??= new AbortController();
    if (this.#abortCode && !this.#controller.signal.aborted)
      this.#controller.abort(abortReason(this.#abortCode));
    return this.#controller.signal;
  }

  abort(code: AbortCode): void {
    if (this.#abortCode) return;
    this.#abortCode = code;
    this.#controller?.abort(abortReason(code));
    this.#wake?.();
  }

  /** Resolves when `pending` settles (rejecting with its error) or when the run is aborted. */
  wait(pending: PromiseLike<unknown>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#wake = resolve;
      pending.then(() => resolve(), reject);
    });
  }
}

function abortReason(code: AbortCode): Error {
  const error = new Error(`handler aborted: ${code}`);
  error.name = 'AbortError';
  return error;
}
