import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { errorMessage } from '../core/errors.js';
import { sampleEvent } from '../core/events/samples.js';
import type { EventType } from '../core/events/schemas.js';
import type { Delivery, Target } from '../core/target.js';
import { signEvent } from './publish.js';

/** The spec's retry schedule (Events → Delivery), in seconds: 1 min, 5 min, 30 min, 2 h, 12 h, 24 h. */
export const RETRY_SCHEDULE_SECONDS = [60, 300, 1800, 7200, 43_200, 86_400] as const;

/** How far back a stale (replayed capture) envelope is signed: past the 5-minute limit. */
const STALE_MIN_AGE_SECONDS = 600;

export type DeliveryKind = 'first' | 'duplicate' | 'retry' | 'forged' | 'stale';

export interface SimulationOptions {
  readonly target: Target;
  readonly secret: string;
  readonly types: readonly EventType[];
  /** New events per second. */
  readonly rate: number;
  /** Seconds during which new events are published. */
  readonly durationSeconds: number;
  /** Seconds after that in which due retries are still sent; later ones are abandoned. */
  readonly drainSeconds: number;
  /** Shares in [0, 1]. */
  readonly duplicates: number;
  readonly retries: number;
  readonly forged: number;
  readonly stale: number;
  /** The retry schedule is divided by this (3600: one hour of schedule per second). */
  readonly timeScale: number;
  readonly seed: number;
  readonly concurrency: number;
  readonly signal?: AbortSignal;
  /** Called after each send. */
  readonly onDelivery?: (record: DeliveryRecord) => void;
}

export interface DeliveryRecord {
  /** When the envelope was handed to the target, in ms since the start. */
  readonly t_ms: number;
  /**
   * When the plan meant it to go, in ms since the start (`t_ms` is later when the simulator's
   * process is busy: the gap is its own lateness, not the schedule's).
   */
  readonly due_ms: number;
  readonly kind: DeliveryKind;
  /** 1 for the first delivery; the publisher's attempt number for retries. */
  readonly attempt: number;
  readonly event_id: string;
  readonly event_type: string;
  readonly signed_at: number;
  readonly accepted: boolean;
  readonly detail: string;
}

export interface SimulationResult {
  readonly sent: number;
  readonly accepted: number;
  /** Sends that failed at the transport (network, queue missing, auth). */
  readonly errors: number;
  readonly byKind: Record<DeliveryKind, number>;
  /** Genuine events at least one of whose deliveries the target accepted: each must be handled exactly once. */
  readonly expected: string[];
  /** Forged and stale events: must never be handled. */
  readonly mustNotHandle: string[];
  /** Genuine events none of whose deliveries was accepted. */
  readonly undelivered: string[];
  /** Deliveries (retries, duplicates) still scheduled when the time ran out: not sent. */
  readonly abandoned: number;
  readonly durationMs: number;
  readonly interrupted: boolean;
}

/** mulberry32: a small, fast, seedable PRNG; enough for choosing what to break. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

interface PlannedEvent {
  readonly event: Record<string, unknown>;
  readonly eventId: string;
  readonly eventType: string;
  readonly genuine: boolean;
  /** The exact envelope of the first delivery, for its duplicate. */
  firstRaw: string | undefined;
  accepted: boolean;
}

interface Pending {
  /** ms since the start. */
  readonly at: number;
  readonly kind: DeliveryKind;
  readonly attempt: number;
  readonly planned: PlannedEvent;
}

/**
 * Publishes like the service does, bounded in count (rate × duration) and time (duration +
 * drain): at-least-once, so some envelopes are delivered twice as they are; some events are
 * re-sent later, re-signed with the same event_id, on the spec's retry schedule compressed by
 * `timeScale` (as when the publisher missed the acknowledgment; with an HTTP ingress, also after
 * every answer that is not 2xx); and some traffic that is not the publisher's: envelopes signed
 * with another secret, and old captures signed long ago. Event ids are always random, so a run
 * never collides with an earlier one; `seed` fixes every choice besides.
 */
export async function simulate(options: SimulationOptions): Promise<SimulationResult> {
  const random = prng(options.seed);
  const schedule = new Schedule();
  const events = planEvents(options, random, schedule);
  const sender = new Sender(options, schedule, random);
  const interrupted = await sender.run();
  return {
    ...sender.counts,
    expected: events.filter((e) => e.genuine && e.accepted).map((e) => e.eventId),
    mustNotHandle: events.filter((e) => !e.genuine).map((e) => e.eventId),
    undelivered: events.filter((e) => e.genuine && !e.accepted).map((e) => e.eventId),
    abandoned: schedule.length,
    durationMs: Math.round(sender.elapsedMs()),
    interrupted,
  };
}

/** The deliveries still to send, in time order. */
class Schedule {
  readonly #queue: Pending[] = [];
  /** `<event_id>#<attempt>` of every retry scheduled, so a failure never schedules one twice. */
  readonly #retries = new Set<string>();

  get length(): number {
    return this.#queue.length;
  }

  /** The next delivery due, left in place. */
  peek(): Pending | undefined {
    return this.#queue[0];
  }

  shift(): Pending | undefined {
    return this.#queue.shift();
  }

  add(item: Pending): void {
    let i = this.#queue.length;
    while (i > 0 && (this.#queue[i - 1] as Pending).at > item.at) i--;
    this.#queue.splice(i, 0, item);
  }

  /** Schedules delivery `attempt` of a genuine event as a retry, unless it already is. */
  addRetry(planned: PlannedEvent, attempt: number, at: number): void {
    const key = `${planned.eventId}#${attempt}`;
    if (this.#retries.has(key)) return;
    this.#retries.add(key);
    this.add({ at, kind: 'retry', attempt, planned });
  }
}

/**
 * Draws rate × duration events and schedules their deliveries: each event is genuine, forged or
 * stale; a genuine one may get a duplicate within a second and a retry on the spec's schedule.
 */
function planEvents(options: SimulationOptions, random: () => number, schedule: Schedule): PlannedEvent[] {
  const count = Math.max(1, Math.round(options.rate * options.durationSeconds));
  const events: PlannedEvent[] = [];
  for (let i = 0; i < count; i++) {
    const type = options.types[Math.floor(random() * options.types.length)] as EventType;
    const event: Record<string, unknown> = { ...sampleEvent(type) };
    const roll = random();
    const kind: DeliveryKind =
      roll < options.forged ? 'forged' : roll < options.forged + options.stale ? 'stale' : 'first';
    const planned: PlannedEvent = {
      event,
      eventId: String(event.event_id),
      eventType: type,
      genuine: kind === 'first',
      firstRaw: undefined,
      accepted: false,
    };
    events.push(planned);
    const at = (i * 1000) / options.rate;
    schedule.add({ at, kind, attempt: 1, planned });
    if (kind !== 'first') continue;
    if (random() < options.duplicates)
      schedule.add({ at: at + random() * 1000, kind: 'duplicate', attempt: 1, planned });
    if (random() < options.retries) schedule.addRetry(planned, 2, at + retryDelayMs(1, options.timeScale));
  }
  return events;
}

/**
 * Sends the scheduled deliveries when due, at most `concurrency` at once, until the schedule is
 * empty, the deadline (duration + drain) passes or the signal aborts; counts what happened.
 */
class Sender {
  readonly counts: Pick<SimulationResult, 'byKind'> & { sent: number; accepted: number; errors: number } = {
    sent: 0,
    accepted: 0,
    errors: 0,
    byKind: { first: 0, duplicate: 0, retry: 0, forged: 0, stale: 0 },
  };
  readonly #options: SimulationOptions;
  readonly #schedule: Schedule;
  readonly #random: () => number;
  readonly #forgedSecret = `forged-${randomUUID()}`;
  #started = performance.now();
  #inFlight = 0;
  /** Resolves the loop's wait when a send ends or schedules something. */
  #changed: (() => void) | undefined;

  constructor(options: SimulationOptions, schedule: Schedule, random: () => number) {
    this.#options = options;
    this.#schedule = schedule;
    this.#random = random;
  }

  elapsedMs(): number {
    return performance.now() - this.#started;
  }

  /** Resolves once nothing is in flight; true when the signal stopped it. */
  async run(): Promise<boolean> {
    const { signal, concurrency } = this.#options;
    const deadline = (this.#options.durationSeconds + this.#options.drainSeconds) * 1000;
    this.#started = performance.now();
    let interrupted = false;
    while (this.#schedule.length > 0 || this.#inFlight > 0) {
      if (signal?.aborted) {
        interrupted = true;
        break;
      }
      const next = this.#schedule.peek();
      if (!next || this.#inFlight >= concurrency) {
        await this.#change();
        continue;
      }
      if (next.at > deadline) break;
      const wait = next.at - this.elapsedMs();
      if (wait > 0) {
        // Wake early when an in-flight send schedules something sooner.
        await Promise.race([
          sleep(wait, undefined, signal ? { signal } : {}).catch(() => undefined),
          this.#change(),
        ]);
        continue;
      }
      this.#schedule.shift();
      this.#start(next);
    }
    while (this.#inFlight > 0) await this.#change();
    return interrupted;
  }

  #change(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.#changed = resolve;
    });
  }

  #notify(): void {
    const wake = this.#changed;
    this.#changed = undefined;
    wake?.();
  }

  #start(item: Pending): void {
    const { raw, signedAt } = envelopeFor(item, this.#options.secret, this.#forgedSecret, this.#random);
    this.#inFlight++;
    void this.#deliver(item, raw, signedAt).finally(() => {
      this.#inFlight--;
      this.#notify();
    });
  }

  async #deliver(item: Pending, raw: string, signedAt: number): Promise<void> {
    const { planned } = item;
    // When the envelope was handed to the target: a slow answer must not make the delivery look
    // later than it was (a retry would then seem to follow its first delivery too soon).
    const sentAt = this.elapsedMs();
    let delivery: Delivery;
    try {
      delivery = await this.#options.target.send({
        body: raw,
        eventId: planned.eventId,
        eventType: planned.eventType,
      });
    } catch (error) {
      this.counts.errors++;
      delivery = { accepted: false, detail: `error: ${errorMessage(error)}` };
    }
    this.counts.sent++;
    this.counts.byKind[item.kind]++;
    if (delivery.accepted) {
      this.counts.accepted++;
      planned.accepted = true;
    } else if (
      planned.genuine &&
      delivery.status !== undefined &&
      item.attempt <= RETRY_SCHEDULE_SECONDS.length
    ) {
      // The publisher saw a failure: the next retry of the schedule, unless one is already due.
      const at = this.elapsedMs() + retryDelayMs(item.attempt, this.#options.timeScale);
      this.#schedule.addRetry(planned, item.attempt + 1, at);
    }
    this.#options.onDelivery?.({
      t_ms: Math.round(sentAt),
      due_ms: Math.round(item.at),
      kind: item.kind,
      attempt: item.attempt,
      event_id: planned.eventId,
      event_type: planned.eventType,
      signed_at: signedAt,
      accepted: delivery.accepted,
      detail: delivery.detail,
    });
  }
}

/** The delay before retry number `attempt` (1 = the first retry), compressed by `timeScale`. */
export function retryDelayMs(attempt: number, timeScale: number): number {
  const seconds = RETRY_SCHEDULE_SECONDS[Math.min(attempt, RETRY_SCHEDULE_SECONDS.length) - 1] ?? 60;
  return (seconds * 1000) / timeScale;
}

function envelopeFor(
  item: Pending,
  secret: string,
  forgedSecret: string,
  random: () => number,
): { raw: string; signedAt: number } {
  const { planned } = item;
  const now = Math.floor(Date.now() / 1000);
  if (item.kind === 'duplicate' && planned.firstRaw !== undefined) {
    return { raw: planned.firstRaw, signedAt: JSON.parse(planned.firstRaw).signed_at as number };
  }
  const signedAt = item.kind === 'stale' ? now - STALE_MIN_AGE_SECONDS - Math.floor(random() * 3000) : now;
  const signed = signEvent(planned.event, item.kind === 'forged' ? forgedSecret : secret, signedAt);
  if (item.kind === 'first') planned.firstRaw = signed.raw;
  return { raw: signed.raw, signedAt };
}
