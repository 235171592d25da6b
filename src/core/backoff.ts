export interface BackoffOptions {
  /** The delay after the first failure (attempt 1); it doubles with each attempt. */
  readonly baseMs: number;
  /** The longest delay. */
  readonly maxMs: number;
  /**
   * `equal`: half of the delay fixed, half random, so the retries of many clients spread out
   * (https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/); `none`: exact.
   */
  readonly jitter: 'equal' | 'none';
}

/** Past 2^52 a double stops counting; and 0 × 2^1024 would be NaN. */
const MAX_EXPONENT = 52;

/**
 * The delay before retrying after failed attempt `attempt` (1-based), in whole ms:
 * `min(maxMs, baseMs × 2^(attempt − 1))`, with the jitter applied to that. Every retry loop of
 * the kit uses it, each with its own numbers.
 */
export function backoff(
  attempt: number,
  options: BackoffOptions,
  random: () => number = Math.random,
): number {
  const exponent = attempt > 1 ? Math.min(attempt - 1, MAX_EXPONENT) : 0;
  const capped = Math.min(options.maxMs, options.baseMs * 2 ** exponent);
  if (options.jitter === 'none') return Math.round(capped);
  return Math.round(capped / 2 + random() * (capped / 2));
}
