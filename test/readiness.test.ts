import { describe, expect, it } from 'vitest';
import type { ConsumerStatus } from '../src/consumer/consumer.js';
import { Keyring } from '../src/core/secrets.js';
import { readiness } from '../src/sidecar/readiness.js';

const NOW = 1_800_000_000_000;
const healthy: ConsumerStatus = {
  state: 'running',
  inFlight: 0,
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
