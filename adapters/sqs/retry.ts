import { setTimeout as sleep } from 'node:timers/promises';

/** 50 ms, 100 ms, 200 ms …, with equal jitter, capped at 1 s: settles are short and time-bounded. */
export function backoffMs(attempt: number): number {
  const base = Math.min(1000, 50 * 2 ** (attempt - 1));
  return Math.round(base / 2 + Math.random() * (base / 2));
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
