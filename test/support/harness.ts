import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MemoryMessage } from '../../adapters/memory/index.js';
import { createMemorySource, type MemorySource } from '../../adapters/memory/index.js';
import { type ConsumerOptions, createConsumer, type SettledReport } from '../../src/consumer/consumer.js';
import { TEST_SIGNING_SECRET } from '../../src/consumer/testing.js';
import { silentLogger } from '../../src/core/logger.js';
import { createMemoryDedupe } from '../../src/dedupe/memory.js';
import type { DedupeStore } from '../../src/dedupe/types.js';

export function tempDir(prefix = 'phe-test-'): { path: string; cleanup(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

export interface Harness {
  source: MemorySource;
  dedupe: DedupeStore;
  deadLetterPath: string;
  reports: SettledReport<MemoryMessage>[];
  consumer: ReturnType<typeof createConsumer<MemoryMessage>>;
  /** Resolves with the first settled report matching `predicate`. */
  waitFor(predicate: (r: SettledReport<MemoryMessage>) => boolean): Promise<SettledReport<MemoryMessage>>;
  cleanup(): Promise<void>;
}

/** A consumer over an in-memory queue with fast retries, a temp dead-letter file and no logs. */
export function harness(
  options: Partial<ConsumerOptions<MemoryMessage>> & { endWhenEmpty?: boolean } = {},
): Harness {
  const dir = tempDir();
  const { endWhenEmpty, ...rest } = options;
  const source = createMemorySource({ endWhenEmpty: endWhenEmpty ?? false });
  const dedupe = options.dedupe ?? createMemoryDedupe();
  const deadLetterPath = join(dir.path, 'dead.jsonl');
  const reports: SettledReport<MemoryMessage>[] = [];
  const waiters: {
    predicate: (r: SettledReport<MemoryMessage>) => boolean;
    resolve: (r: SettledReport<MemoryMessage>) => void;
  }[] = [];
  const consumer = createConsumer<MemoryMessage>({
    source,
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    dedupe,
    deadLetter: deadLetterPath,
    logger: silentLogger(),
    retry: { maxAttempts: 3, baseDelayMs: 5, maxDelayMs: 20 },
    ...rest,
    onSettled: (report) => {
      reports.push(report);
      rest.onSettled?.(report);
      for (const w of [...waiters]) {
        if (w.predicate(report)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(report);
        }
      }
    },
  });
  return {
    source,
    dedupe,
    deadLetterPath,
    reports,
    consumer,
    waitFor(predicate) {
      const found = reports.find(predicate);
      if (found) return Promise.resolve(found);
      return new Promise((resolve) => waiters.push({ predicate, resolve }));
    },
    async cleanup() {
      await consumer.stop();
      dir.cleanup();
    },
  };
}
