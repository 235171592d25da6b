/**
 * A one-line progress display on standard error: redrawn in place on a TTY, a plain line every
 * few seconds otherwise (so CI logs and `tee` stay readable).
 */
export class Progress {
  /** Undefined when not known (a queue's size, a hub read from a time): no bar and no ETA then. */
  readonly #total: number | undefined;
  readonly #tty: boolean;
  readonly #started = Date.now();
  readonly #timer: NodeJS.Timeout;
  #done = 0;
  #detail = '';

  constructor(total: number | undefined, options: { tty?: boolean; intervalMs?: number } = {}) {
    this.#total = total;
    this.#tty = options.tty ?? process.stderr.isTTY === true;
    this.#timer = setInterval(() => this.#draw(), options.intervalMs ?? (this.#tty ? 200 : 5000));
    this.#timer.unref();
  }

  update(done: number, detail: string): void {
    this.#done = done;
    this.#detail = detail;
  }

  finish(): void {
    clearInterval(this.#timer);
    if (this.#tty) process.stderr.write('\r\x1b[2K');
  }

  #draw(): void {
    const elapsed = (Date.now() - this.#started) / 1000;
    const rate = elapsed > 0 ? `${(this.#done / elapsed).toFixed(1)}/s` : '';
    if (this.#total === undefined) {
      const text = `${this.#done} ${rate} ${this.#detail}`;
      process.stderr.write(this.#tty ? `\r\x1b[2K${text}` : `progress: ${text}\n`);
      return;
    }
    const total = Math.max(this.#total, this.#done);
    const ratio = total === 0 ? 1 : this.#done / total;
    const eta = ratio > 0 && ratio < 1 ? Math.round((elapsed / ratio) * (1 - ratio)) : 0;
    const text = `${this.#done}/${total} (${Math.round(ratio * 100)}%) ${rate} ${this.#detail} eta ${eta}s`;
    if (this.#tty) {
      const width = 24;
      const filled = Math.round(ratio * width);
      process.stderr.write(`\r\x1b[2K[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${text}`);
    } else {
      process.stderr.write(`progress: ${text}\n`);
    }
  }
}
