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
 * retried until the lease would lapse, and a run whose lease would lapse before any extension
 * answered (a store that hangs) is aborted then; a lease taken over by another worker aborts at
 * once. An answer that arrives after its run was settled is ignored.
 */
export class LeaseKeeper {
  readonly #runs = new Set<HandlerRun>();
  readonly #extending = new Set<HandlerRun>();
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
    for (const run of this.#runs) {
      if (now >= run.deadline) {
        run.abort('handler-timeout');
      } else if (now + 2 * this.#tickMs >= run.leaseUntil) {
        // The lease would lapse within two ticks (one for a late timer) and no extension has
        // answered in time (it failed, or still hangs): stop the handler before another worker
        // may claim the event.
        run.abort('lease-lost');
      } else if (now >= run.nextExtendAt && !this.#extending.has(run)) {
        this.#extend(run, now);
      }
    }
  }

  /** One extension at a time per run; its answer counts only while the run is still watched. */
  #extend(run: HandlerRun, now: number): void {
    const { leaseMs } = this.#options;
    run.nextExtendAt = now + leaseMs / 3;
    this.#extending.add(run);
    this.#options.extend(run).then(
      (held) => {
        this.#extending.delete(run);
        if (!this.#runs.has(run)) return; // settled meanwhile: nothing left to abort
        if (held) run.leaseUntil = now + leaseMs;
        else run.abort('lease-lost');
      },
      () => {
        // The store is unreachable: try again next tick; #tick aborts once the lease would lapse.
        this.#extending.delete(run);
        if (this.#runs.has(run)) run.nextExtendAt = Date.now() + this.#tickMs;
      },
    );
  }
}
