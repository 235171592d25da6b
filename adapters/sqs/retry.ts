import { setTimeout as sleep } from 'node:timers/promises';
import { backoff } from '../../src/core/backoff.js';

/** 50 ms, 100 ms, 200 ms …, with equal jitter, capped at 1 s: settles are short and time-bounded. */
export function backoffMs(attempt: number): number {
  return backoff(attempt, { baseMs: 50, maxMs: 1000, jitter: 'equal' });
}

/** Runs `fn` up to `attempts` times while its error is retryable; throws the last error. */
export async function withAttempts<T>(
  attempts: number,
  retryable: (error: unknown) => boolean,
  fn: () => Promise<T>,
  onRetry?: (error: unknown, attempt: number) => void,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (attempt >= attempts || !retryable(error)) throw error;
      onRetry?.(error, attempt);
      await sleep(backoffMs(attempt));
    }
  }
}

export function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
