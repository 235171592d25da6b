import type { Logger } from 'pino';
import { AbortNotice, type AbortSignalLike } from '../core/abort-notice.js';
import { errorMessage } from '../core/errors.js';
import type { AbortCause } from '../core/outcome.js';
import type { RawMessage } from '../core/source-adapter.js';

/** One message kept invisible while it is handled. */
export interface HeartbeatWatch<M extends RawMessage> {
  readonly message: M;
  /** Aborts with 'visibility-lost' when a beat fails: the handlers stop, the message is handed back. */
  readonly signal: AbortSignalLike;
}

interface Watch<M extends RawMessage> extends HeartbeatWatch<M> {
  /** Not an AbortController: one per message cost 4–6 µs on Node 20 (src/core/abort-notice.ts). */
  readonly signal: AbortNotice;
  nextBeatAt: number;
  beating: boolean;
  done: boolean;
}

/**
 * Keeps every in-flight message of a source invisible to other consumers with ONE timer (not a
 * timer chain per message), like the LeaseKeeper does for dedupe leases. A message's first beat
 * comes about `intervalMs` after it was watched, each next one about `intervalMs` after the
 * previous one finished, so beats of one message never overlap (a broker that rotates receipts,
 * like Storage Queue's popReceipt, sees them in order). The timer ticks every quarter interval
 * (5 ms – 1 s) and runs only while messages are watched.
 */
export class VisibilityHeartbeats<M extends RawMessage> {
  readonly #beat: (message: M) => Promise<void>;
  readonly #intervalMs: number;
  readonly #tickMs: number;
  readonly #logger: Logger;
  readonly #watches = new Set<Watch<M>>();
  #timer: NodeJS.Timeout | undefined;

  constructor(beat: (message: M) => Promise<void>, intervalMs: number, logger: Logger) {
    this.#beat = beat;
    this.#intervalMs = intervalMs;
    this.#tickMs = Math.min(1000, Math.max(5, Math.floor(intervalMs / 4)));
    this.#logger = logger;
  }

  watch(message: M): HeartbeatWatch<M> {
    const watch: Watch<M> = {
      message,
      signal: new AbortNotice(),
      nextBeatAt: Date.now() + this.#intervalMs,
      beating: false,
      done: false,
    };
    this.#watches.add(watch);
    this.#timer ??= setInterval(() => this.#tick(), this.#tickMs);
    return watch;
  }

  /** Stops beating for a message whose handling ended (a beat under way is let finish, unheeded). */
  unwatch(handle: HeartbeatWatch<M>): void {
    const watch = handle as Watch<M>;
    watch.done = true;
    this.#watches.delete(watch);
    if (this.#watches.size === 0 && this.#timer) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }

  #tick(): void {
    const now = Date.now();
    for (const watch of this.#watches) {
      if (!watch.beating && now >= watch.nextBeatAt) void this.#beatOnce(watch);
    }
  }

  async #beatOnce(watch: Watch<M>): Promise<void> {
    watch.beating = true;
    try {
      await this.#beat(watch.message);
    } catch (error) {
      if (watch.done) return;
      this.#logger.warn(
        { message_id: watch.message.id, err: errorMessage(error) },
        'visibility heartbeat failed: aborting handler',
      );
      this.#watches.delete(watch); // nothing left to keep
      watch.signal.abort('visibility-lost' satisfies AbortCause);
      return;
    } finally {
      watch.beating = false;
    }
    watch.nextBeatAt = Date.now() + this.#intervalMs;
  }
}
