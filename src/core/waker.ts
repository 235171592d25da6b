/**
 * Lets one receiver sleep until something arrives (`wake`) or its signal aborts. Sources use it
 * so that `receive` blocks without polling and still returns promptly on `stop()`.
 */
export class Waker {
  #wake: (() => void) | undefined;

  wait(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        signal.removeEventListener('abort', done);
        if (this.#wake === done) this.#wake = undefined;
        resolve();
      };
      this.#wake = done;
      signal.addEventListener('abort', done, { once: true });
    });
  }

  wake(): void {
    this.#wake?.();
  }
}
