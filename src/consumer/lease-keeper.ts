import type { AbortCause } from '../core/outcome.js';
import type { HandlerRun } from './handler-run.js';

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

  abortAll(cause: AbortCause): void {
    for (const run of this.#runs) run.abort(cause);
  }

  #tick(): void {
    const now = Date.now();
    const { leaseMs } = this.#options;
    for (const run of this.#runs) {
      if (now >= run.deadline) {
        run.abort('handler-timeout');
      } else if (now >= run.nextExtendAt) {
        run.nextExtendAt = now + leaseMs / 3;
        this.#options.extend(run).then(
          (held) => {
            if (held) run.leaseUntil = now + leaseMs;
            else run.abort('lease-lost');
          },
          () => {
            // The store is unreachable: try again next tick, give up when the lease would lapse.
            if (Date.now() + this.#tickMs >= run.leaseUntil) run.abort('lease-lost');
            else run.nextExtendAt = Date.now() + this.#tickMs;
          },
        );
      }
    }
  }
}
