import { getEventListeners } from 'node:events';
import { expect } from 'vitest';

/** Node's set, on a signal, of the signals `AbortSignal.any` made from it (an internal symbol). */
function dependantsOf(signal: AbortSignal): Set<unknown> | undefined {
  const key = Object.getOwnPropertySymbols(signal).find((s) => s.description === 'kDependantSignals');
  return key === undefined ? undefined : (signal as unknown as Record<symbol, Set<unknown>>)[key];
}

/**
 * How many signals made by `AbortSignal.any([signal, ...])` still hang on `signal`. Checks first
 * that it can see one on this Node, so that a renamed internal fails the test instead of reading 0.
 */
export function dependentSignals(signal: AbortSignal): number {
  const probe = new AbortController();
  const made = AbortSignal.any([probe.signal]);
  expect(dependantsOf(probe.signal)?.size, 'this Node shows AbortSignal.any dependants').toBe(1);
  void made; // referenced until here, so that no collection can have removed it before the count
  return dependantsOf(signal)?.size ?? 0;
}

/**
 * A long-lived signal (a worker's receive signal, an adapter's closing signal) keeps whatever each
 * call leaves on it for as long as it lives, so anything left is a leak: checks that it has no
 * `abort` listener and no dependent signal left.
 */
export function expectNothingLeftOn(signal: AbortSignal): void {
  expect(getEventListeners(signal, 'abort')).toHaveLength(0);
  expect(dependentSignals(signal)).toBe(0);
}
