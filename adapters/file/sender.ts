import { appendLine } from '../../src/core/durable-append.js';
import type { Target } from '../../src/core/target.js';

/**
 * `--to file:PATH`: appends each envelope as one JSONL line, all of it synced or none of it
 * (`appendLine`). Sends are serialised, so concurrent sends never interleave within a line.
 */
export function fileTarget(path: string): Target {
  let tail: Promise<unknown> = Promise.resolve();
  return {
    name: `file:${path}`,
    send(message) {
      const text =
        typeof message.body === 'string' ? message.body : Buffer.from(message.body).toString('utf8');
      const write = tail.then(() => appendLine(path, text));
      tail = write.catch(() => undefined);
      return write.then(() => ({ accepted: true, detail: 'appended' }));
    },
    close: async () => {
      await tail;
    },
  };
}
