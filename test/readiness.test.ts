import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { ConsumerStatus } from '../src/consumer/consumer.js';
import type { HandlerContext } from '../src/consumer/router.js';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { Keyring } from '../src/core/secrets.js';
import { createForwarder, FORWARD_UNREACHABLE_AFTER } from '../src/sidecar/forward.js';
import { readiness } from '../src/sidecar/readiness.js';
import { postEnvelope, startApp, startRun } from './support/cli.js';

const NOW = 1_800_000_000_000;
const healthy: ConsumerStatus = {
  state: 'running',
  inFlight: 0,
  inFlightBytes: 0,
  lastReceiveAt: NOW - 1000,
  receivingSince: NOW - 5000,
  lastReceiveError: undefined,
  dedupeAvailable: true,
  keyIds: ['current'],
};
const keyring = new Keyring([{ id: 'current', secret: 'a-signing-secret-value' }]);
const consumer = (status: Partial<ConsumerStatus> = {}, ring = keyring) => ({
  status: { ...healthy, ...status },
  keyring: ring,
});

describe('readiness (/readyz)', () => {
  it('is ready when every check passes', () => {
    expect(readiness(consumer(), { maxReceiveWaitMs: 20_000 }, 60_000, NOW)).toMatchObject({ ready: true });
  });

  it('the watchdog flags a receive hung well past its source’s longest wait', () => {
    const hung = consumer({ receivingSince: NOW - 20_000 - 61_000 });
    const result = readiness(hung, { maxReceiveWaitMs: 20_000 }, 60_000, NOW);
    expect(result.ready).toBe(false);
    expect(result.checks.poller).toMatchObject({ ok: false, detail: expect.stringContaining('61s past') });
    // A push source (no declared wait) may wait forever: not a stall.
    expect(readiness(hung, {}, 60_000, NOW).checks.poller.ok).toBe(true);
  });

  it('is not ready when the loop is not running, the store or broker is down, or no key is active', () => {
    expect(readiness(consumer({ state: 'stopping' }), {}, 60_000, NOW).checks.poller).toEqual({
      ok: false,
      detail: 'stopping',
    });
    expect(readiness(consumer({ dedupeAvailable: false }), {}, 60_000, NOW).checks.dedupe.ok).toBe(false);
    const failed = readiness(consumer({ lastReceiveError: 'AccessDenied' }), {}, 60_000, NOW);
    expect(failed.checks.source).toEqual({ ok: false, detail: 'AccessDenied' });
    expect(readiness(consumer(), { connected: false }, 60_000, NOW).checks.source.ok).toBe(false);
    const expired = new Keyring([{ id: 'old', secret: 'a-signing-secret-value', notAfter: NOW - 1 }]);
    expect(readiness(consumer({}, expired), {}, 60_000, NOW).checks.secrets.ok).toBe(false);
  });
});

describe('readiness: the forward target', () => {
  /** A handler context for calling a forwarder directly. */
  const context = (): HandlerContext =>
    ({
      eventId: 'evt_1',
      eventType: 'daily.data.steps.created',
      attempt: 1,
      messageId: 'm1',
      enqueuedAt: undefined,
      rawBody: '{}',
      logger: pino({ level: 'silent' }),
      signal: new AbortController().signal,
    }) as HandlerContext;

  it('turns not ready after consecutive connection failures, with the reason, and ready after an answer', async () => {
    const app = await startApp(() => 500);
    const port = Number(new URL(app.origin).port);
    const forward = createForwarder({ url: app.url, connections: 1 });
    try {
      await app.close();
      for (let i = 1; i <= FORWARD_UNREACHABLE_AFTER; i++) {
        expect(readiness(consumer(), {}, 60_000, NOW, forward).checks.forward).toEqual({ ok: true });
        await expect(forward({}, context())).rejects.toThrow(/ECONNREFUSED/);
      }
      const down = readiness(consumer(), {}, 60_000, NOW, forward);
      expect(down.ready).toBe(false);
      expect(down.checks.forward).toEqual({
        ok: false,
        detail: `${FORWARD_UNREACHABLE_AFTER} forwards in a row got no answer; last: forward to ${app.url} failed: connection refused (ECONNREFUSED)`,
      });
      // Back on the same port: any answer (a 500 too) means the app is there again.
      await new Promise<void>((resolve) => app.server.listen(port, '127.0.0.1', resolve));
      await expect(forward({}, context())).rejects.toThrow(/HTTP 500/);
      expect(readiness(consumer(), {}, 60_000, NOW, forward)).toMatchObject({
        ready: true,
        checks: { forward: { ok: true } },
      });
    } finally {
      await forward.close();
      await app.close();
    }
  });

  it('/readyz of `run --forward` names a target that refuses connections', async () => {
    const app = await startApp();
    await app.close(); // nothing listens on its port now
    const worker = await startRun(
      [
        '--source',
        'http://127.0.0.1:0/events',
        '--forward',
        app.url,
        '--dedupe',
        'memory',
        '--ops-port',
        '0',
      ],
      { env: { PARTNER_EVENTS_OPS_PORT: '0' } },
    );
    try {
      expect((await fetch(`${worker.ops}/readyz`)).status).toBe(200);
      for (let i = 0; i < FORWARD_UNREACHABLE_AFTER; i++) {
        await postEnvelope(worker.ingress, createTestEnvelope('daily.data.steps.created').raw);
      }
      const answer = await fetch(`${worker.ops}/readyz`);
      const body = (await answer.json()) as {
        ready: boolean;
        checks: Record<string, { ok: boolean; detail?: string }>;
      };
      expect(answer.status).toBe(503);
      expect(body.ready).toBe(false);
      expect(body.checks.forward?.detail).toContain('connection refused (ECONNREFUSED)');
      expect(body.checks.source?.ok).toBe(true);
    } finally {
      await worker.stop();
    }
  });
});
