import { createReadStream } from 'node:fs';

/** Counts newline-terminated lines without holding the file in memory. */
export async function countLines(path: string): Promise<number> {
  let count = 0;
  let last = 10;
  for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) {
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) count++;
    last = chunk[chunk.length - 1] ?? last;
  }
  return last === 10 ? count : count + 1;
}

/**
 * A one-line progress display on standard error: redrawn in place on a TTY, a plain line every
 * few seconds otherwise (so CI logs and `tee` stay readable).
 */
export class Progress {
  readonly #total: number;
  readonly #tty: boolean;
  readonly #started = Date.now();
  readonly #timer: NodeJS.Timeout;
  #done = 0;
  #detail = '';

  constructor(total: number, options: { tty?: boolean; intervalMs?: number } = {}) {
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
    const total = Math.max(this.#total, this.#done);
    const ratio = total === 0 ? 1 : this.#done / total;
    const elapsed = (Date.now() - this.#started) / 1000;
    const eta = ratio > 0 && ratio < 1 ? Math.round((elapsed / ratio) * (1 - ratio)) : 0;
    const text = `${this.#done}/${total} (${Math.round(ratio * 100)}%) ${this.#detail} eta ${eta}s`;
    if (this.#tty) {
      const width = 24;
      const filled = Math.round(ratio * width);
      process.stderr.write(`\r\x1b[2K[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${text}`);
    } else {
      process.stderr.write(`progress: ${text}\n`);
    }
  }
}
