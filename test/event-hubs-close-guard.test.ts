/**
 * The Event Hubs close guard (adapters/event-hubs/close-guard.ts): an AMQP error the SDK leaves
 * unhandled while a client closes is logged, not fatal; anything else still ends the process.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CLOSE_GUARD_GRACE_MS, closeGuarded, isAmqpError } from '../adapters/event-hubs/close-guard.js';
import { silentLogger } from '../src/core/logger.js';

const CHILD = fileURLToPath(new URL('./support/close-guard-child.ts', import.meta.url));

function runChild(reason: string) {
  const result = spawnSync(process.execPath, ['--import', 'tsx', CHILD, reason], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('the Event Hubs close guard', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('an AMQP error left unhandled during a close (and just after) is a warning, not the end of the process', () => {
    for (const reason of ['amqp-undecoded', 'amqp-decoded']) {
      const result = runChild(reason);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toContain('closed');
      const warnings = result.stdout.split('\n').filter((l) => l.includes('left a failed link unhandled'));
      expect(warnings).toHaveLength(2);
      expect(warnings[0]).toContain('amqp:link:stolen: an owner-level receiver is active');
    }
  });

  it('any other unhandled rejection still ends the process, as without the guard', () => {
    const result = runChild('ours');
    expect(result.code).not.toBe(0);
    expect(result.stdout).not.toContain('closed');
    expect(result.stderr).toContain('a bug of the kit');
  });

  it('tells AMQP errors from others', () => {
    expect(isAmqpError({ condition: 'amqp:link:stolen' })).toBe(true);
    expect(isAmqpError({ condition: 'com.microsoft:argument-out-of-range' })).toBe(true);
    expect(isAmqpError(Object.assign(new Error('x'), { name: 'MessagingError' }))).toBe(true);
    expect(isAmqpError({ value: [{ value: 'amqp:internal-error' }, { value: 'x' }] })).toBe(true);
    expect(isAmqpError(new Error('amqp:link:stolen'))).toBe(false);
    expect(isAmqpError({ condition: 'ECONNRESET' })).toBe(false);
    expect(isAmqpError({ value: ['nothing'] })).toBe(false);
    expect(isAmqpError('amqp:link:stolen')).toBe(false);
    expect(isAmqpError(undefined)).toBe(false);
  });

  it('is on only while a close runs and for its grace after', async () => {
    vi.useFakeTimers();
    const before = process.listenerCount('unhandledRejection');
    await closeGuarded(silentLogger(), async () => {
      expect(process.listenerCount('unhandledRejection')).toBe(before + 1);
    });
    await closeGuarded(silentLogger(), async () => {});
    expect(process.listenerCount('unhandledRejection')).toBe(before + 1);
    vi.advanceTimersByTime(CLOSE_GUARD_GRACE_MS);
    expect(process.listenerCount('unhandledRejection')).toBe(before);
  });
});
