import { getEventListeners, setMaxListeners } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import { CallDeadline } from '../src/core/call-deadline.js';

describe('CallDeadline: one call to a service, within a timeout or until the outer signal aborts', () => {
  it('aborts with a TimeoutError when the time is up (what adapterError reads as "no answer")', () => {
    vi.useFakeTimers();
    try {
      const deadline = new CallDeadline(1_000, new AbortController().signal);
      vi.advanceTimersByTime(999);
      expect(deadline.signal.aborted).toBe(false);
      vi.advanceTimersByTime(1);
      expect(deadline.signal.aborted).toBe(true);
      expect(deadline.signal.reason).toBeInstanceOf(DOMException);
      expect((deadline.signal.reason as DOMException).name).toBe('TimeoutError');
      deadline.end();
    } finally {
      vi.useRealTimers();
    }
  });

  it('aborts with the outer signal’s reason when it aborts first, or at once when it already has', () => {
    const outer = new AbortController();
    const deadline = new CallDeadline(60_000, outer.signal);
    const stopped = new Error('stopped');
    outer.abort(stopped);
    expect(deadline.signal.aborted).toBe(true);
    expect(deadline.signal.reason).toBe(stopped);
    deadline.end();

    const late = new CallDeadline(60_000, outer.signal);
    expect(late.signal.aborted).toBe(true);
    expect(late.signal.reason).toBe(stopped);
    late.end();
  });

  it('end() leaves nothing behind: no listener on the outer signal, no timer, no abort after', () => {
    vi.useFakeTimers();
    try {
      const outer = new AbortController();
      setMaxListeners(200, outer.signal); // 100 calls at once on one signal is this test's own doing
      const deadlines = Array.from({ length: 100 }, () => new CallDeadline(1_000, outer.signal));
      expect(getEventListeners(outer.signal, 'abort')).toHaveLength(100);
      expect(vi.getTimerCount()).toBe(100);
      for (const deadline of deadlines) deadline.end();
      expect(getEventListeners(outer.signal, 'abort')).toHaveLength(0);
      expect(vi.getTimerCount()).toBe(0);
      vi.advanceTimersByTime(2_000);
      outer.abort();
      expect(deadlines.some((d) => d.signal.aborted)).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });

  it('without an outer signal, only the timeout ends the call', () => {
    vi.useFakeTimers();
    try {
      const deadline = new CallDeadline(50);
      vi.advanceTimersByTime(50);
      expect((deadline.signal.reason as DOMException).name).toBe('TimeoutError');
      deadline.end();
    } finally {
      vi.useRealTimers();
    }
  });
});
