import { randomUUID } from 'node:crypto';
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Delivery, OutgoingMessage, Target } from '../../src/core/target.js';

let sequence = 0;

/**
 * Puts each envelope in the spool directory as one file, whole or not at all (written under a
 * temporary name, then renamed); names sort in the order sent.
 */
export function standInTarget(directory: string): Target {
  return {
    name: `stand-in:${directory}`,
    async send(message: OutgoingMessage): Promise<Delivery> {
      const name = `${String(Date.now()).padStart(15, '0')}-${String(++sequence).padStart(9, '0')}-${randomUUID()}`;
      await writeFile(join(directory, `${name}.tmp`), message.body);
      await rename(join(directory, `${name}.tmp`), join(directory, `${name}.json`));
      return { accepted: true, detail: 'spooled' };
    },
    close: async () => {},
  };
}
