import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDedupe, UsageError } from '../src/cli/common.js';
import { HAS_REDIS, RedisServer } from './support/redis-server.js';

// The --dedupe SPEC of run and replay (openDedupe). URL schemes are case-insensitive (RFC 3986,
// 3.1): `Redis://…` was an unknown store, and its error echoed the URL with its password.

describe('--dedupe SPEC', () => {
  it('an unknown spec is a usage error that names it without its credentials', async () => {
    const error = await openDedupe('mongodb://default:Hunt3r2pw@127.0.0.1:9/0?token=S3cr3tSig').catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(UsageError);
    expect((error as Error).message).toContain('unknown --dedupe "mongodb://127.0.0.1:9/0"');
    expect((error as Error).message).not.toMatch(/Hunt3r2pw|S3cr3tSig/);
  });
});

describe.skipIf(!HAS_REDIS)('a Redis URL in any case of its scheme', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('REDIS://, Redis:// and redis:// open the same store', async () => {
    const upper = await openDedupe(`REDIS://127.0.0.1:${server.port}/0`, { tenant: 'scheme-case' });
    const mixed = await openDedupe(`Redis://127.0.0.1:${server.port}/0`, { tenant: 'scheme-case' });
    const lower = await openDedupe(`redis://127.0.0.1:${server.port}/0`, { tenant: 'scheme-case' });
    try {
      const claim = await upper.claim('evt_scheme_case', 60_000);
      expect(claim.status).toBe('claimed');
      expect(await mixed.peek('evt_scheme_case')).toBe('in_progress');
      expect(await lower.peek('evt_scheme_case')).toBe('in_progress');
    } finally {
      await Promise.all([upper.close(), mixed.close(), lower.close()]);
    }
  });
});
