/**
 * A separate process that claims ids in a shared SQLite dedupe file (used by
 * test/dedupe.contract.test.ts). Usage:
 *
 *   node --import tsx test/support/sqlite-claimer.ts <db> <count> <forward|reverse|shuffle> <chunk> [lockstep]
 *
 * Opens the store, prints `ready`, waits for a line on stdin, then claims `id-0 … id-<count-1>`
 * in the given order, `chunk` claims per event-loop tick (so each chunk is one group commit),
 * completes every id it claimed, and prints one JSON line: `{ claimed, duplicate, inProgress, errors }`.
 * With `lockstep`, it prints `step` after each chunk and waits for a line on stdin before the
 * next one, so the parent can make two claimers meet in the middle of the id range.
 */
import { createInterface } from 'node:readline';
import { createSqliteDedupe } from '../../src/dedupe/sqlite.js';

const [path, countText = '500', order = 'forward', chunkText = '10', mode = 'free'] = process.argv.slice(2);
if (!path) throw new Error('usage: sqlite-claimer.ts <db> <count> <order> <chunk>');
const count = Number(countText);
const chunk = Number(chunkText);

const ids = Array.from({ length: count }, (_, i) => `id-${i}`);
if (order === 'reverse') ids.reverse();
if (order === 'shuffle') {
  // A fixed-seed shuffle (mulberry32), so a failure can be reproduced.
  let seed = 0x9e3779b9;
  const random = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  for (let i = ids.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [ids[i], ids[j]] = [ids[j] as string, ids[i] as string];
  }
}

const store = createSqliteDedupe({ path, busyTimeoutMs: 10_000 });
process.stdout.write('ready\n');

const input: string[] = [];
let wake: (() => void) | undefined;
createInterface({ input: process.stdin }).on('line', (line) => {
  input.push(line);
  wake?.();
});
async function nextInput(): Promise<string> {
  while (input.length === 0) await new Promise<void>((resolve) => (wake = resolve));
  return input.shift() as string;
}

await nextInput();

const result = {
  claimed: [] as string[],
  duplicate: [] as string[],
  inProgress: [] as string[],
  errors: [] as string[],
};
for (let i = 0; i < ids.length; i += chunk) {
  const batch = ids.slice(i, i + chunk);
  const claims = await Promise.all(
    batch.map((id) =>
      store.claim(id, 60_000).catch((error: unknown) => ({ status: 'error' as const, error: String(error) })),
    ),
  );
  const completions: Promise<boolean>[] = [];
  claims.forEach((claim, k) => {
    const id = batch[k] as string;
    if (claim.status === 'claimed') {
      result.claimed.push(id);
      completions.push(store.complete(id, claim.token, 3_600_000));
    } else if (claim.status === 'duplicate') result.duplicate.push(id);
    else if (claim.status === 'in_progress') result.inProgress.push(id);
    else result.errors.push(`${id}: ${claim.error}`);
  });
  for (const ok of await Promise.all(completions)) if (!ok) result.errors.push('complete returned false');
  if (mode === 'lockstep' && i + chunk < ids.length) {
    process.stdout.write('step\n');
    await nextInput();
  }
}
await store.close();
process.stdout.write(`${JSON.stringify(result)}\n`);
process.stdin.destroy();
