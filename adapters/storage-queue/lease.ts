/**
 * The popReceipt of one received message. Every `updateMessage` (heartbeat, retry) invalidates the
 * receipt it was called with and returns a new one, so calls on one message run one at a time and
 * each uses the newest receipt: a delete that started while a heartbeat was in flight would
 * otherwise carry a stale receipt and fail with `PopReceiptMismatch`.
 */
export class MessageLease {
  #popReceipt: string;
  #settled = false;
  #tail: Promise<unknown> = Promise.resolve();

  constructor(popReceipt: string) {
    this.#popReceipt = popReceipt;
  }

  get popReceipt(): string {
    return this.#popReceipt;
  }

  /** True once an outcome was handed over: later heartbeats have nothing to keep. */
  get settled(): boolean {
    return this.#settled;
  }

  markSettled(): void {
    this.#settled = true;
  }

  /**
   * Runs `op` after every earlier call on this message, with the newest receipt. `op` returns the
   * receipt the service issued (after an update), or `undefined` when there is none (a delete).
   */
  run(op: (popReceipt: string) => Promise<string | undefined>): Promise<void> {
    const next = this.#tail.then(async () => {
      const receipt = await op(this.#popReceipt);
      if (receipt !== undefined) this.#popReceipt = receipt;
    });
    // One failed call must not poison the calls queued behind it.
    this.#tail = next.catch(() => undefined);
    return next;
  }
}
