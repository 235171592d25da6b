/**
 * The two profiles of the reliability suites. `npm run test:reliability` sets
 * RELIABILITY_PROFILE=full (the sizes of issue 9); inside plain `npm test` the same files run the
 * small profile, which is bounded to a few seconds per file.
 *
 * Every random choice (kill points, handler delays, fast-check cases) comes from RELIABILITY_SEED
 * (printed with every figure line), so a run can be repeated: RELIABILITY_SEED=N npm run …
 */
import { appendFileSync } from 'node:fs';
import { prng } from '../../../src/cli/simulator.js';

export const FULL = process.env.RELIABILITY_PROFILE === 'full';
export const PROFILE: 'full' | 'small' = FULL ? 'full' : 'small';

const DEFAULT_SEED = 20_261_122;
const seedText = process.env.RELIABILITY_SEED;
export const SEED = seedText === undefined || seedText === '' ? DEFAULT_SEED : Number(seedText);
if (!Number.isSafeInteger(SEED)) throw new Error(`RELIABILITY_SEED must be an integer, got "${seedText}"`);

/** Sizes per suite and profile (issue 9 gives the full ones). */
export const SIZES = {
  crash: FULL ? { events: 10_000, kills: 20 } : { events: 300, kills: 3 },
  outage: FULL ? { events: 4_000, downMs: 10_000 } : { events: 200, downMs: 1_000 },
  overload: FULL ? { events: 100_000 } : { events: 5_000 },
  /** Structured envelopes and byte-level mutations: their sum is the number of cases. */
  hostile: FULL
    ? { generated: 60_000, mutated: 60_000, batch: 200 }
    : { generated: 1_500, mutated: 1_500, batch: 100 },
} as const;

/** A per-test timeout: the small profile's, or the full profile's. */
export function timeout(smallMs: number, fullMs: number): number {
  return FULL ? fullMs : smallMs;
}

/** mulberry32, the simulator's seedable PRNG (uniform in [0, 1)): one implementation for both. */
export const rng = prng;

/** A seed derived from the run's seed and a label, so suites do not share one random stream. */
export function seedFor(label: string): number {
  let h = SEED >>> 0;
  for (let i = 0; i < label.length; i++) h = Math.imul(h ^ label.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

export function randomInt(random: () => number, min: number, max: number): number {
  return min + Math.floor(random() * (max - min + 1));
}

/**
 * Prints one compact JSON line of figures (`RELIABILITY {...}`), which docs/reliability.md cites;
 * with RELIABILITY_REPORT=FILE the line is also appended to FILE.
 */
export function report(scenario: string, figures: Record<string, unknown>): void {
  const line = JSON.stringify({ scenario, profile: PROFILE, seed: SEED, ...figures });
  console.log(`RELIABILITY ${line}`);
  const file = process.env.RELIABILITY_REPORT;
  if (file) appendFileSync(file, `${line}\n`);
}

/** Percentiles of a list (nearest rank); NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}

export function round(value: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}
