/**
 * Regression tests for defects found while writing the suites (both fixed): each would fail
 * again if its fix were reverted.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PartitionContext, ReceivedEventData } from '@azure/event-hubs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { PartitionLane } from '../adapters/event-hubs/partition-lane.js';
import { VerificationError } from '../src/core/errors.js';
import { silentLogger } from '../src/core/logger.js';
import { Keyring } from '../src/core/secrets.js';
import { sign } from '../src/core/signature.js';
import { verifyMessage } from '../src/core/verify.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';

describe('regression — src/core/signature.ts + src/core/verify.ts: the HMAC covers a lossy UTF-8 encoding of the body', () => {
  // `sign` / `matchSignature` feed the body *string* to `Hmac.update`, which encodes it as UTF-8
  // and turns every lone surrogate (U+D800–U+DFFF) into EF BF BD, the bytes of U+FFFD. The body
  // string that `verifyMessage` then parses and trusts is not what was signed: an envelope whose
  // `body` spells a lone surrogate with a JSON escape ("\ud800") verifies with the signature of a
  // body holding U+FFFD. So the "only the signed part is trusted" rule is broken for these strings.
  const signedAt = 1_780_000_000;
  const keyring = new Keyring([{ id: 'k', secret: 'secret' }]);
  const signedBody = '{"event_id":"e","event_type":"t","note":"\uFFFD"}';
  const signature = sign(signedBody, 'secret', signedAt);

  it('the signed message itself verifies (control)', () => {
    const raw = JSON.stringify({
      event_id: 'e',
      event_type: 't',
      signed_at: signedAt,
      signature,
      body: signedBody,
    });
    expect(verifyMessage(raw, { keyring, now: signedAt * 1000 }).payload.note).toBe('\uFFFD');
  });

  it('a body with U+FFFD replaced by a lone surrogate must not verify with the same signature', () => {
    const altered = signedBody.replace('\uFFFD', '\uD800');
    expect(altered).not.toBe(signedBody);
    const raw = JSON.stringify({
      event_id: 'e',
      event_type: 't',
      signed_at: signedAt,
      signature,
      body: altered,
    });
    expect(raw).toContain('\\ud800'); // plain ASCII JSON, valid UTF-8: any broker delivers it
    let error: unknown;
    try {
      verifyMessage(raw, { keyring, now: signedAt * 1000 });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(VerificationError);
    expect(['MALFORMED_ENVELOPE', 'SIGNATURE_MISMATCH']).toContain((error as VerificationError).code);
  });
});

describe('regression — src/dedupe/sqlite.ts: peek() bypasses the write queue', () => {
  // `claim`/`extend`/`complete`/`release` are queued and group-committed on the next
  // `setImmediate`; `peek` reads the table at once. So a peek issued after a claim in the same
  // tick does not see that claim, while the memory store (and the contract's "operations take
  // effect in call order") says it should.
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('MemoryDedupeStore: a peek after a claim in the same tick sees the claim (control)', async () => {
    const store = createMemoryDedupe();
    const claimed = store.claim('evt-1', 60_000);
    expect(await store.peek('evt-1')).toBe('in_progress');
    expect((await claimed).status).toBe('claimed');
  });

  it('SqliteDedupeStore: a peek after a claim in the same tick sees the claim', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'phe-bug-'));
    dirs.push(dir);
    const store = createSqliteDedupe({ path: join(dir, 'dedupe.db') });
    try {
      const claimed = store.claim('evt-1', 60_000);
      const state = store.peek('evt-1');
      expect((await claimed).status).toBe('claimed');
      expect(await state).toBe('in_progress');
    } finally {
      await store.close();
    }
  });
});

describe('regression — adapters/event-hubs/partition-lane.ts: a retry timer that fires early stalls the partition', () => {
  // Found by a CI failure: `retry` woke the receiver from a setTimeout, but `take` compared
  // Date.now() with the due time. Timers run on a monotonic clock and may fire a millisecond
  // before Date.now() reaches it; `take` then refused the head, the receiver slept again, and
  // nothing ever woke it: the partition stopped for good after a retried event.
  afterEach(() => {
    vi.useRealTimers();
  });

  it('the head is takeable when the retry wakes the receiver, even if the wall clock lags', () => {
    vi.useFakeTimers();
    const context = { partitionId: '0', updateCheckpoint: async () => {} } as unknown as PartitionContext;
    const lane = new PartitionLane<{ seq: number; attempt: number }>(context, silentLogger());
    lane.push([{ sequenceNumber: 7 } as ReceivedEventData]);
    const toMessage = (event: ReceivedEventData, attempt: number) => ({ seq: event.sequenceNumber, attempt });
    const first = lane.take(toMessage);
    expect(first).toEqual({ seq: 7, attempt: 1 });

    let takenOnWake: { seq: number; attempt: number } | undefined;
    lane.retry(first as { seq: number; attempt: number }, 40, () => {
      vi.setSystemTime(Date.now() - 1); // the wall clock one millisecond behind the timer
      takenOnWake = lane.take(toMessage);
    });
    expect(lane.take(toMessage)).toBeUndefined(); // not before its delay
    vi.advanceTimersByTime(40);
    expect(takenOnWake).toEqual({ seq: 7, attempt: 2 });
  });
});
