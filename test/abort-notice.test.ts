/**
 * AbortNotice, the kit's own abort signal (src/core/abort-notice.ts): it behaves as an
 * AbortSignal does for everything the kit and undici read of one, and a handler run's notice
 * aborts with its `signal`.
 */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { HandlerRun } from '../src/consumer/handler-run.js';
import { AbortNotice, type AbortSignalLike } from '../src/core/abort-notice.js';
import { createHttpHandoff, HttpHandoffFailure } from '../src/core/http-handoff.js';

afterEach(() => vi.restoreAllMocks());

describe('AbortNotice', () => {
  it('is not aborted until abort(reason); then aborted with that reason, and the first reason stays', () => {
    const notice = new AbortNotice();
    expect(notice.aborted).toBe(false);
    expect(notice.reason).toBeUndefined();
    notice.abort('visibility-lost');
    notice.abort('shutdown');
    expect(notice.aborted).toBe(true);
    expect(notice.reason).toBe('visibility-lost');
  });

  it('runs each listener once, in the order added; one added twice once; one removed, or added after the abort, never', () => {
    const notice = new AbortNotice();
    const calls: string[] = [];
    const first = () => calls.push('first');
    const second = () => calls.push('second');
    const removed = () => calls.push('removed');
    notice.addEventListener('abort', first);
    notice.addEventListener('abort', removed);
    notice.addEventListener('abort', second);
    notice.addEventListener('abort', first);
    notice.removeEventListener('abort', removed);
    notice.abort('shutdown');
    notice.abort('shutdown');
    notice.addEventListener('abort', () => calls.push('late'));
    expect(calls).toEqual(['first', 'second']);
  });

  it('a listener that throws does not stop the others, and its error is thrown on its own (as EventTarget reports it)', () => {
    const reported: (() => void)[] = [];
    vi.spyOn(process, 'nextTick').mockImplementation(((callback: () => void) => {
      reported.push(callback);
    }) as typeof process.nextTick);
    const notice = new AbortNotice();
    const after = vi.fn();
    notice.addEventListener('abort', () => {
      throw new Error('listener failed');
    });
    notice.addEventListener('abort', after);
    notice.abort('shutdown');
    vi.restoreAllMocks();
    expect(after).toHaveBeenCalledOnce();
    expect(reported).toHaveLength(1);
    expect(() => reported[0]?.()).toThrow('listener failed');
  });

  it('a real AbortSignal is an AbortSignalLike (Consumer.process takes either)', () => {
    const controller = new AbortController();
    const like: AbortSignalLike = controller.signal;
    controller.abort('why');
    expect(like.aborted).toBe(true);
    expect(like.reason).toBe('why');
  });

  it("aborts an undici request in flight (the forwarder's POST), and one asked for after the abort is never sent", async () => {
    const requests: IncomingMessage[] = [];
    const closed: IncomingMessage[] = [];
    const silent = createServer((req) => {
      requests.push(req);
      req.on('close', () => closed.push(req));
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const handoff = createHttpHandoff(`http://127.0.0.1:${(silent.address() as AddressInfo).port}/events`, {
      connections: 1,
      timeoutMs: 30_000,
    });
    try {
      const notice = new AbortNotice();
      const posting = handoff.post({ headers: {}, body: '{}', signal: notice });
      await vi.waitFor(() => expect(requests).toHaveLength(1));
      notice.abort(new Error('handler aborted: HANDLER_TIMEOUT'));
      const failure = await posting.then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(HttpHandoffFailure);
      expect((failure as HttpHandoffFailure).reason).toBe('aborted');
      await vi.waitFor(() => expect(closed).toHaveLength(1));

      await expect(handoff.post({ headers: {}, body: '{}', signal: notice })).rejects.toThrow(
        HttpHandoffFailure,
      );
      expect(requests).toHaveLength(1);
    } finally {
      await handoff.close();
      silent.closeAllConnections();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});

describe("a handler run's notice", () => {
  const timing = { handlerTimeoutMs: 1000, leaseMs: 60_000 };

  it('aborts with the run, with the same kind of reason as its signal', () => {
    const run = new HandlerRun('evt_1', 'token', Date.now(), timing);
    const notice = run.notice;
    const signal = run.signal;
    expect(notice.aborted).toBe(false);
    run.abort('handler-timeout');
    expect(notice.aborted).toBe(true);
    expect(signal.aborted).toBe(true);
    expect(String(notice.reason)).toBe(String(signal.reason));
    expect(String(notice.reason)).toContain('HANDLER_TIMEOUT');
  });

  it('is aborted at once when asked for after the run was aborted', () => {
    const run = new HandlerRun('evt_1', 'token', Date.now(), timing);
    run.abort('lease-lost');
    expect(run.notice.aborted).toBe(true);
    expect(String(run.notice.reason)).toContain('LEASE_LOST');
  });
});
