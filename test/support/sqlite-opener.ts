/**
 * A separate process that opens SQLite dedupe stores on new files at agreed moments, so that
 * several of them open the same new file at once (used by test/dedupe.contract.test.ts). Usage:
 *
 *   node --import tsx test/support/sqlite-opener.ts <dir> <rounds> <interval-ms>
 *
 * Prints `ready`, reads a start time (ms since the epoch) from stdin, then for each round r waits
 * until start + r × interval, opens `<dir>/r<r>/dedupe.db`, claims one id, closes, and prints one
 * JSON line `{ round, error }` (error: the message and its cause, or null).
 */
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { createSqliteDedupe } from '../../src/dedupe/sqlite.js';

const [dir, roundsText = '30', intervalText = '60'] = process.argv.slice(2);
if (!dir) throw new Error('usage: sqlite-opener.ts <dir> <rounds> <interval-ms>');
const rounds = Number(roundsText);
const interval = Number(intervalText);

process.stdout.write('ready\n');
const lines = createInterface({ input: process.stdin });
const start = Number(await new Promise<string>((resolve) => lines.once('line', resolve)));
lines.close();

for (let round = 0; round < rounds; round++) {
  const at = start + round * interval;
  // Busy-wait the last stretch: a timer's lateness would spread the processes apart.
  while (Date.now() < at) {}
  let error: string | null = null;
  try {
    const store = createSqliteDedupe({ path: join(dir, `r${round}`, 'dedupe.db') });
    await store.claim(`event-${process.pid}`, 60_000);
    await store.close();
  } catch (e) {
    const cause = (e as { cause?: unknown }).cause;
    error = `${(e as Error).message}${cause instanceof Error ? `: ${cause.message}` : ''}`;
  }
  process.stdout.write(`${JSON.stringify({ round, error })}\n`);
}
