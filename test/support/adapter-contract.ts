/**
 * One contract for every transport (`adapterContract`), run on the adapter itself (receive,
 * settle, close), without a consumer: what the consumer relies on from any `SourceAdapter`.
 * A transport plugs in with one `AdapterHarness`: how to make a fresh source, publish exact bytes,
 * open an adapter on it, count what the source still holds, read the dead-letter side channel and
 * cause an outage, and what it declares where transports differ (see `TransportDeclarations`).
 *
 * Checks wait on events (a receive, a count), never on sleeps, and bound no elapsed time: a
 * delayed retry is shown by order, against a retry without delay settled just after it.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Outcome } from '../../src/core/outcome.js';
import type { RawMessage, SourceAdapter } from '../../src/core/source-adapter.js';
import { expectNothingLeftOn } from './signals.js';

/** Where transports differ; each check reads what it needs, and says so when it does not apply. */
export interface TransportDeclarations {
  /**
   * Who delivers a retried message again: the adapter (a broker, a file or memory queue), or the
   * sender (HTTP: the answer is 503 with Retry-After, the sender sends again).
   */
  readonly redelivery: 'adapter' | 'sender';
  /**
   * What becomes of a message an adapter received and had not settled when it closed (it is never
   * acked):
   * - `unsettled`: a new adapter instance on the same source receives it (and nothing settled);
   * - `everything`: a new instance receives every message again, settled ones too (a file is
   *   read again from its first line: dedupe drops what was handled);
   * - `sender`: its sender is told to send it again (HTTP 503, or its connection closed);
   * - `lost-with-instance`: the adapter is the queue (memory): it goes with it.
   */
  readonly unsettledAtClose: 'unsettled' | 'everything' | 'sender' | 'lost-with-instance';
  /** The side channel the harness configures for dead messages (a DLQ, a poison queue), if any. */
  readonly sideChannel?: string;
  /** The adapter allows several `receive` calls at once (`maxConcurrentReceives` > 1). */
  readonly concurrentReceives: boolean;
  /**
   * How the harness takes the broker away and brings it back, and whether the adapter reports
   * `connected` (else a receive during the outage rejects, which is what readiness reads).
   * `notApplicable`: the transport has no broker to lose (say why).
   */
  readonly outage: { readonly reportsConnected: boolean } | { readonly notApplicable: string };
}

/** One fresh source (queue, hub, file) for one check. */
export interface TransportFixture<M extends RawMessage = RawMessage> {
  /**
   * Publishes one message with exactly these bytes (the suite sends UTF-8 JSON text without line
   * breaks, which every transport carries unchanged). Allowed before `open` (a file is written
   * before it is read). `apart`: where it is not ordered behind earlier messages (another Event
   * Hubs partition); transports without ordering ignore it.
   */
  publish(body: Uint8Array, options?: { readonly apart?: boolean }): Promise<void>;
  /**
   * A new adapter instance on this source. `unsettledReturnSoon`: what it leaves unsettled is
   * redelivered soon after it closes, where the transport makes that a setting (SQS and Storage
   * Queue: a 1 s visibility timeout); otherwise the transport's settings for tests.
   */
  open(options?: { readonly unsettledReturnSoon?: boolean }): Promise<SourceAdapter<M>>;
  /**
   * Messages not yet settled for good: the source (or, for HTTP, the sender) still has them and
   * will deliver them again, now or later (visible, invisible, delayed, past the checkpoint).
   */
  holds(): Promise<number>;
  /**
   * For a transport whose settle answers someone who is not awaited (HTTP: the sender): resolves
   * once the answer for the message with this body has arrived. Brokers leave it out: `settle`
   * resolves once the broker has it.
   */
  answered?(body: Uint8Array): Promise<void>;
  /**
   * When the sender delivers again (`redelivery: 'sender'`): how long the answer for the message
   * with this body told its sender to wait before sending it again, in ms.
   */
  retryAfterMs?(body: Uint8Array): Promise<number>;
  /** The bodies on the side channel, when `sideChannel` is declared. */
  sideChannel?(): Promise<readonly Uint8Array[]>;
  /** Takes the broker away (every adapter on it loses it) and brings it back with its state. */
  readonly outage?: { begin(): Promise<void>; end(): Promise<void> };
  /** Closes what `open` made and removes the source. */
  cleanup(): Promise<void>;
}

export interface AdapterHarness<M extends RawMessage = RawMessage> {
  readonly declares: TransportDeclarations;
  /** A fresh source for one check; the test file starts the server once, in `beforeAll`. */
  setup(): Promise<TransportFixture<M>>;
}

/**
 * The delay of a delayed retry: whole seconds (SQS and Storage Queue count in seconds), and long
 * enough that a stalled test process does not see it run out before its control comes back.
 */
const RETRY_DELAY_MS = 2000;
/**
 * For waits on what settles in the background (an Event Hubs checkpoint, an HTTP answer): a
 * deadline to fail with the last value seen, just inside the test's own timeout, not a measure.
 */
const EVENTUALLY = { timeout: 25_000, interval: 20 };
/**
 * For the outage check: a client may take its time to notice and to reconnect (the Event Hubs
 * SDK may read a partition again only at its next load-balancing cycle, 10 s, later on a loaded
 * machine). Again deadlines to fail with a message, not measures.
 */
const OUTAGE_WAIT = { timeout: 80_000, interval: 20 };
const OUTAGE_TEST_TIMEOUT_MS = 90_000;

const ack: Outcome = { kind: 'ack', result: 'handled' };
const retryIn = (delayMs: number): Outcome => ({
  kind: 'retry',
  delayMs,
  code: 'HANDLER_FAILED',
  reason: 'adapter contract: retry',
});
const dead: Outcome = { kind: 'dead', code: 'HANDLER_FAILED', reason: 'adapter contract: dead' };

let bodySeq = 0;

/** A distinct UTF-8 JSON body with characters beyond ASCII (bytes, not code units, must match). */
function newBody(label: string): Uint8Array {
  const text = JSON.stringify({
    event_id: `contract-${process.pid}-${++bodySeq}`,
    label,
    note: 'Grüße ✓',
  });
  return new Uint8Array(Buffer.from(text, 'utf8'));
}

function bytesOf(body: string | Uint8Array): Buffer {
  return typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.from(body);
}

/** Bodies compare as bytes; their UTF-8 text keeps a failure readable. */
function textOf(body: string | Uint8Array): string {
  return bytesOf(body).toString('utf8');
}

function hasBody(body: Uint8Array): (m: RawMessage) => boolean {
  const wanted = Buffer.from(body);
  return (m) => bytesOf(m.body).equals(wanted);
}

/**
 * What one adapter instance handed out: every message in order with the number of the `receive`
 * call that brought it, and those the check has not taken yet.
 */
class Inbox<M extends RawMessage> {
  readonly log: { readonly message: M; readonly receive: number }[] = [];
  readonly #unclaimed: M[] = [];
  #receives = 0;

  constructor(
    readonly adapter: SourceAdapter<M>,
    readonly signal: AbortSignal,
  ) {}

  /** One `receive`; its messages join the log. Only the test's timeout bounds the wait. */
  async receiveOnce(max = this.adapter.maxBatchSize): Promise<readonly M[]> {
    const batch = await this.adapter.receive(max, this.signal);
    if (batch === null)
      throw new Error(`${this.adapter.name}: source exhausted while a message was expected`);
    this.#receives++;
    for (const message of batch) {
      this.log.push({ message, receive: this.#receives });
      this.#unclaimed.push(message);
    }
    return batch;
  }

  /** The next delivery of this body: one received already and not taken, or the next to come. */
  async take(body: Uint8Array): Promise<M> {
    for (;;) {
      const i = this.#unclaimed.findIndex(hasBody(body));
      if (i >= 0) return this.#unclaimed.splice(i, 1)[0] as M;
      await this.receiveOnce();
    }
  }

  /** The log entry of this delivery. */
  entryOf(message: M): { readonly message: M; readonly receive: number } {
    const entry = this.log.find((e) => e.message === message);
    if (!entry) throw new Error('not received by this inbox');
    return entry;
  }
}

/**
 * The contract, as `describe` blocks named `SourceAdapter contract: <transport>`. A check that does
 * not apply to the transport (by its declarations) is listed as skipped, with the reason.
 */
export function adapterContract<M extends RawMessage>(transport: string, harness: AdapterHarness<M>): void {
  const { declares } = harness;
  const outage = 'reportsConnected' in declares.outage ? declares.outage : undefined;
  const byAdapter = declares.redelivery === 'adapter';

  describe(`SourceAdapter contract: ${transport}`, { timeout: 30_000 }, () => {
    let fixture: TransportFixture<M>;
    /** Ends every receive a check left waiting, before the adapters close. */
    let receives: AbortController;

    beforeEach(async () => {
      receives = new AbortController();
      fixture = await harness.setup();
    });
    afterEach(async () => {
      receives.abort();
      await fixture.cleanup();
    });

    async function open(options?: { unsettledReturnSoon?: boolean }): Promise<Inbox<M>> {
      return new Inbox(await fixture.open(options), receives.signal);
    }

    async function publish(label: string, options?: { apart?: boolean }): Promise<Uint8Array> {
      const body = newBody(label);
      await fixture.publish(body, options);
      return body;
    }

    /** Settles, then waits until the outcome reached whoever must see it (HTTP: the sender). */
    async function settle(inbox: Inbox<M>, message: M, outcome: Outcome): Promise<void> {
      await inbox.adapter.settle(message, outcome);
      await fixture.answered?.(bytesOf(message.body));
    }

    async function holdsEventually(count: number): Promise<void> {
      await vi.waitFor(async () => expect(await fixture.holds()).toBe(count), EVENTUALLY);
    }

    it('receive: each published message once, its bytes unchanged, attempt 1, a distinct id', async () => {
      const bodies = [await publish('one'), await publish('two'), await publish('three')];
      const inbox = await open();
      expect(inbox.adapter.maxBatchSize).toBeGreaterThanOrEqual(1);
      expect((inbox.adapter.maxConcurrentReceives ?? 1) > 1).toBe(declares.concurrentReceives);
      // Acked as they come: a partitioned log hands out a partition's next event only then.
      const seen = new Set<string>();
      while (seen.size < bodies.length) {
        for (const message of await inbox.receiveOnce()) {
          seen.add(textOf(message.body));
          await settle(inbox, message, ack);
        }
      }
      const received = inbox.log.map((e) => e.message);
      expect(received.map((m) => textOf(m.body)).sort()).toEqual(bodies.map(textOf).sort());
      for (const body of bodies) {
        const message = received.find(hasBody(body));
        expect(bytesOf(message?.body ?? '').equals(Buffer.from(body))).toBe(true);
      }
      expect(received.map((m) => m.attempt)).toEqual([1, 1, 1]);
      expect(received.every((m) => typeof m.id === 'string' && m.id.length > 0)).toBe(true);
      expect(new Set(received.map((m) => m.id)).size).toBe(bodies.length);
      await holdsEventually(0);
    });

    it('the receive signal keeps nothing: no listener, no dependent signal once receives return', async () => {
      // A worker's receive signal lives as long as the worker: whatever one receive leaves on
      // it stays (Storage Queue's AbortSignal.any per call left one dependent signal a receive).
      const bodies: Uint8Array[] = [];
      for (let i = 0; i < 12; i++) bodies.push(await publish(`signal-${i}`));
      const inbox = await open();
      let received = 0;
      while (received < bodies.length) {
        for (const message of await inbox.receiveOnce(1)) {
          received++;
          await settle(inbox, message, ack);
        }
      }
      expectNothingLeftOn(receives.signal);
      await holdsEventually(0);
    });

    it('ack: the source no longer holds the message; others stay', async () => {
      const [first, second] = [await publish('first'), await publish('second')];
      const inbox = await open();
      expect(await fixture.holds()).toBe(2);
      await settle(inbox, await inbox.take(first), ack);
      await holdsEventually(1);
      await settle(inbox, await inbox.take(second), ack);
      await holdsEventually(0);
    });

    it(`retry: the message stays held${byAdapter ? ' and comes again, attempt 2, same id and bytes' : ' (its sender is told to send it again)'}`, async () => {
      const body = await publish('retried');
      const inbox = await open();
      const first = await inbox.take(body);
      expect(first.attempt).toBe(1);
      await settle(inbox, first, retryIn(0));
      expect(await fixture.holds()).toBe(1);
      if (!byAdapter) return;
      const again = await inbox.take(body);
      expect(again.attempt).toBe(2);
      expect(again.id).toBe(first.id);
      expect(bytesOf(again.body).equals(Buffer.from(body))).toBe(true);
      await settle(inbox, again, ack);
      await holdsEventually(0);
    });

    it(`dead: the message is gone from the source${declares.sideChannel ? `, its copy on the ${declares.sideChannel} byte for byte` : ''}`, async () => {
      const [doomed, fine] = [await publish('dead'), await publish('fine')];
      const inbox = await open();
      await settle(inbox, await inbox.take(doomed), dead);
      await settle(inbox, await inbox.take(fine), ack);
      await holdsEventually(0);
      if (!declares.sideChannel) return;
      const sideChannel = fixture.sideChannel;
      if (!sideChannel)
        throw new Error(`${transport} declares a side channel but its fixture cannot read it`);
      await vi.waitFor(async () => expect((await sideChannel()).length).toBeGreaterThan(0), EVENTUALLY);
      const copies = await sideChannel();
      expect(copies.map(textOf)).toEqual([textOf(doomed)]);
      expect(Buffer.from(copies[0] as Uint8Array).equals(Buffer.from(doomed))).toBe(true);
    });

    // Who waits out the delay: the adapter, or the sender it tells how long to wait.
    if (byAdapter) {
      it('delayed retry: not delivered again before a retry without delay (the control), then delivered', async () => {
        const delayed = await publish('delayed');
        const control = await publish('control', { apart: true });
        const inbox = await open();
        const [d, c] = [await inbox.take(delayed), await inbox.take(control)];
        await settle(inbox, d, retryIn(RETRY_DELAY_MS));
        await settle(inbox, c, retryIn(0));
        const from = inbox.log.length;
        const controlAgain = await inbox.take(control);
        expect(controlAgain.attempt).toBe(2);
        // Nothing of the delayed message up to and including the receive that brought the control.
        const upTo = inbox.entryOf(controlAgain).receive;
        const early = inbox.log
          .slice(from)
          .filter((e) => e.receive <= upTo && hasBody(delayed)(e.message))
          .map((e) => `${e.message.id} (attempt ${e.message.attempt}) in receive ${e.receive}`);
        expect(early, `the control came back in receive ${upTo}`).toEqual([]);
        const delayedAgain = await inbox.take(delayed);
        expect(delayedAgain.attempt).toBe(2);
        expect(inbox.entryOf(delayedAgain).receive).toBeGreaterThan(upTo);
        await settle(inbox, controlAgain, ack);
        await settle(inbox, delayedAgain, ack);
        await holdsEventually(0);
      });
    } else {
      it('delayed retry: the sender is told to wait at least the delay', async () => {
        const body = await publish('delayed');
        const inbox = await open();
        await settle(inbox, await inbox.take(body), retryIn(RETRY_DELAY_MS));
        const told = fixture.retryAfterMs;
        if (!told)
          throw new Error(`${transport} leaves redelivery to the sender but cannot read what it was told`);
        expect(await told(body)).toBeGreaterThanOrEqual(RETRY_DELAY_MS);
        expect(await fixture.holds()).toBe(1);
      });
    }

    it(`close with a message received and not settled: close ends, the message is not acked${UNSETTLED[declares.unsettledAtClose]}`, async () => {
      const [settled, unsettled] = [await publish('settled'), await publish('unsettled')];
      const one = await open({ unsettledReturnSoon: true });
      await settle(one, await one.take(settled), ack);
      await one.take(unsettled);
      await one.adapter.close();
      await fixture.answered?.(unsettled);
      expect(await fixture.holds()).toBe(1);
      if (declares.unsettledAtClose !== 'unsettled' && declares.unsettledAtClose !== 'everything') return;
      const two = await open();
      const again = await two.take(unsettled);
      expect(bytesOf(again.body).equals(Buffer.from(unsettled))).toBe(true);
      if (declares.unsettledAtClose === 'everything') {
        await settle(two, await two.take(settled), ack);
      } else {
        // The settled one is not among what came up to and including the unsettled one's receive.
        const upTo = two.entryOf(again).receive;
        expect(two.log.filter((e) => e.receive <= upTo && hasBody(settled)(e.message))).toEqual([]);
      }
      await settle(two, again, ack);
      await holdsEventually(0);
    });

    it.skipIf(!declares.concurrentReceives)(
      `concurrent receives: never the same message twice${declares.concurrentReceives ? '' : ' — not applicable: maxConcurrentReceives is 1'}`,
      async () => {
        const bodies: Uint8Array[] = [];
        for (let i = 0; i < 20; i++) bodies.push(await publish(`concurrent-${i}`));
        const inbox = await open();
        const pollers = inbox.adapter.maxConcurrentReceives ?? 1;
        expect(pollers).toBeGreaterThan(1);
        // Small batches, so that many receives overlap; nothing is settled until all came.
        await Promise.all(
          Array.from({ length: pollers }, async () => {
            while (inbox.log.length < bodies.length) await inbox.receiveOnce(2);
          }),
        );
        const ids = inbox.log.map((e) => e.message.id);
        expect(ids.length - new Set(ids).size).toBe(0);
        expect(inbox.log.map((e) => textOf(e.message.body)).sort()).toEqual(bodies.map(textOf).sort());
        for (const { message } of inbox.log) await settle(inbox, message, ack);
        await holdsEventually(0);
      },
    );

    it.skipIf(!outage)(
      outage
        ? `outage: ${outage.reportsConnected ? '`connected` turns false, and true again once the broker is back' : 'a receive rejects (what readiness reads)'}; the same adapter receives again after`
        : `outage — not applicable: ${(declares.outage as { notApplicable: string }).notApplicable}`,
      async () => {
        const control = fixture.outage;
        if (!outage || !control)
          throw new Error(`${transport} declares an outage but its fixture cannot cause one`);
        const before = await publish('before');
        const inbox = await open();
        await settle(inbox, await inbox.take(before), ack);
        if (outage.reportsConnected) expect(inbox.adapter.connected).toBe(true);

        await control.begin();
        if (outage.reportsConnected) {
          await vi.waitFor(() => expect(inbox.adapter.connected).toBe(false), OUTAGE_WAIT);
        } else {
          // A receive under way as the broker went may still end empty; the next one rejects.
          await vi.waitFor(
            async () =>
              expect(
                await inbox.adapter.receive(1, receives.signal).then(
                  () => 'answered',
                  () => 'rejected',
                ),
              ).toBe('rejected'),
            OUTAGE_WAIT,
          );
        }

        await control.end();
        const after = await publish('after');
        // Until the adapter has reconnected, a receive may still reject: try again.
        const back = await vi.waitFor(async () => inbox.take(after), OUTAGE_WAIT);
        await settle(inbox, back, ack);
        if (outage.reportsConnected) {
          await vi.waitFor(() => expect(inbox.adapter.connected).toBe(true), OUTAGE_WAIT);
        }
      },
      OUTAGE_TEST_TIMEOUT_MS,
    );
  });
}

/** What the close check adds to its title, per declaration. */
const UNSETTLED: Record<TransportDeclarations['unsettledAtClose'], string> = {
  unsettled: '; a new adapter instance receives it, and not what was settled',
  everything: '; a new adapter instance receives it (and, from the start again, what was settled)',
  sender: '; its sender is told to send it again',
  'lost-with-instance': ' (the adapter is the queue: it goes with the instance)',
};
