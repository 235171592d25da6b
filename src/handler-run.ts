import type { ErrorCode } from './errors.js';

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

export interface LeaseKeeperOptions {
  readonly leaseMs: number;
  readonly handlerTimeoutMs: number;
  /** Extends a lease; resolves false when another worker has taken it over. */
  readonly extend: (run: HandlerRun) => Promise<boolean>;
}

/**
 * Watches every running handler with ONE timer (not one per message): aborts runs past their
 * deadline and extends their dedupe leases every third of the lease. A failed extension is
 * retried until the lease would lapse; a lease taken over by another worker aborts at once.
 */
export class LeaseKeeper {
  readonly #runs = new Set<HandlerRun>();
  readonly #options: LeaseKeeperOptions;
  readonly #tickMs: number;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: LeaseKeeperOptions) {
    this.#options = options;
    const finest = Math.min(options.leaseMs / 3, options.handlerTimeoutMs);
    this.#tickMs = Math.min(1000, Math.max(5, Math.floor(finest / 4)));
  }

  start(run: HandlerRun): void {
    this.#runs.add(run);
    if (!this.#timer) {
      this.#timer = setInterval(() => this.#tick(), this.#tickMs);
      this.#timer.unref();
    }
  }

  finish(run: HandlerRun): void {
    this.#runs.delete(run);
    if (this.#runs.size === 0 && this.#timer) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }

  abortAll(code: AbortCode): void {
    for (const run of this.#runs) run.abort(code);
  }

  #tick(): void {
    const now = Date.now();
    const { leaseMs } = this.#options;
    for (const run of this.#runs) {
      if (now >= run.deadline) {
        run.abort('HANDLER_TIMEOUT');
      } else if (now >= run.nextExtendAt) {
        run.nextExtendAt = now + leaseMs / 3;
        this.#options.extend(run).then(
          (held) => {
            if (held) run.leaseUntil = now + leaseMs;
            else run.abort('LEASE_LOST');
          },
          () => {
            // The store is unreachable: try again next tick, give up when the lease would lapse.
            if (Date.now() + this.#tickMs >= run.leaseUntil) run.abort('LEASE_LOST');
            else run.nextExtendAt = Date.now() + this.#tickMs;
          },
        );
      }
    }
  }
}
