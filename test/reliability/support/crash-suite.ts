/**
 * The crash test as the suites declare it, per queue × dedupe store: the same title, sizes,
 * timeouts, figure line and checks for every pair (the scenario itself is in crash.ts).
 */
import { expect, it } from 'vitest';
import { type CrashEnvironment, type CrashOptions, type CrashResult, runCrash } from './crash.js';
import { report, SIZES, seedFor, timeout } from './profile.js';

const CONCURRENCY = 8;

/** Prints the run's figures, then checks that nothing was lost or forged and repeats stayed in bound. */
function check(result: CrashResult): void {
  const f = result.figures;
  report(`crash-${f.queue}-${f.dedupe}`, {
    ...f,
    killed_at_handled: result.killedAt,
    ...result.scan.figures,
  });
  expect(f.lost, 'events never handled').toBe(0);
  expect(f.unexpected_ids).toBe(0);
  expect(f.handled_distinct).toBe(f.events);
  expect(f.repeated_runs, 'repeats beyond the crash window').toBeLessThanOrEqual(f.repeat_bound);
  expect(f.forged_accepted, 'forged events handled').toBe(0);
  expect(f.forged_dead_lettered, 'forged events not in the dead letters').toBe(f.forged_sent);
  expect(f.valid_dead_lettered).toBe(0);
  expect(f.final_exit_code, result.logTail).toBe(0);
  expect(result.scan.hits).toEqual([]);
}

/**
 * Declares the crash test of `queue` × `dedupe` (skipped when `skip`); `env` is called inside the
 * test, so it sees what the file's hooks set up and may start a broker of its own.
 */
export function crashTest(
  queue: CrashOptions['queue'],
  dedupe: CrashOptions['dedupe'],
  env: () => CrashEnvironment | Promise<CrashEnvironment>,
  skip = false,
): void {
  const { events, kills } = SIZES.crash;
  const store = dedupe === 'sqlite' ? 'SQLite' : 'Redis';
  it.skipIf(skip)(
    `${store} dedupe: ${events} events, ${kills} kills — none lost, no forgery handled, repeats ≤ kills × concurrency`,
    async () => {
      const result = await runCrash(
        {
          queue,
          dedupe,
          events,
          kills,
          concurrency: CONCURRENCY,
          seed: seedFor(`crash-${queue}-${dedupe}`),
          finishTimeoutMs: timeout(30_000, 300_000),
        },
        await env(),
      );
      check(result);
    },
    timeout(60_000, 900_000),
  );
}
