/**
 * Section (a): the verify step alone, ours beside Stripe's and svix's webhook verification on the
 * same body bytes. Each library does its whole job: timestamp tolerance, HMAC, constant-time
 * compare, JSON.parse of the body. Ours additionally parses the envelope the body travels in.
 * The floor does our work bare: parse the envelope, HMAC with a KeyObject, `timingSafeEqual`,
 * parse the body (no age check, no key lookup, no field checks).
 *
 * Ours ÷ floor is the median of many short paired rounds, printed with the interval that holds
 * the true median at 95 %, beside an A/A control: the floor timed twice, in the same slots
 * relative to each other as the floor and ours. On a shared machine one round of the same code
 * runs anywhere from 0.65 to 1.6 times as fast as the next (docs/performance-log.md), so eight
 * long rounds could not tell 0.95 from 0.90; the control shows what this run can tell. Each
 * process also compiles the verifiers its own way, and the control cannot see that (on Node 24
 * one process put ours at 0.93 of the floor, six others of the same tree at 0.97–1.01), so
 * `npm run bench` runs the rounds of a size in several processes (bench/verify-child.ts) and
 * pools them (`summariseVerify`).
 */
import { createSecretKey } from 'node:crypto';
import Stripe from 'stripe';
import { Webhook } from 'svix';
import { Keyring } from '../src/core/secrets.js';
import { verifyMessage } from '../src/core/verify.js';
import { makeVerifyInputs, OUR_SECRET, SIZES, STRIPE_SECRET, SVIX_SECRET } from './fixtures.js';
import { median, type RatioSummary, repetitionOrder, summariseRatios } from './stats.js';
import { bareVerify } from './verify-floor.js';

export interface VerifyTiming {
  readonly opsPerSec: number;
  readonly usPerOp: number;
  /** ops/s of every timed round, for the spread. */
  readonly rounds: readonly number[];
  /** CPU µs per op (user + system) of every timed round: steadier than ops/s on a shared machine. */
  readonly cpuRounds: readonly number[];
}

export interface VerifySizeResult {
  readonly size: string;
  readonly bodyBytes: number;
  readonly ours: VerifyTiming;
  readonly stripe: VerifyTiming;
  readonly svix: VerifyTiming;
  readonly floor: VerifyTiming;
  /** ops/s ratios: > 1 means ours is faster. */
  readonly oursOverStripe: number;
  readonly oursOverSvix: number;
  /** Ours ÷ floor by ops/s, over the rounds (each round runs both back to back). */
  readonly oursOverFloor: RatioSummary;
  /** The same by CPU time per op: floor CPU µs/op ÷ ours CPU µs/op, per round. */
  readonly oursOverFloorCpu: RatioSummary;
  /** The A/A control: the floor ÷ the floor timed again beside it, by ops/s. About 1 in a run that can be trusted. */
  readonly floorOverFloor: RatioSummary;
}

export interface VerifyBenchOptions {
  readonly warmupMs: number;
  readonly rounds: number;
  readonly roundMs: number;
  /** Distinct inputs cycled through (distinct event ids and signatures). */
  readonly pool: number;
  readonly sizes?: readonly string[];
}

type ImplName = 'floor again' | 'floor' | 'ours' | 'stripe' | 'svix';

/** The raw rounds of one size in one process: ops/s and CPU µs per op, per implementation. */
export interface VerifySamples {
  readonly size: string;
  readonly bodyBytes: number;
  readonly rounds: Readonly<Record<ImplName, readonly number[]>>;
  readonly cpuRounds: Readonly<Record<ImplName, readonly number[]>>;
}

type Op = (i: number) => unknown;

/** Sink that keeps results observable so nothing is optimised away. */
let sink = 0;

function runFor(op: Op, iterations: number, mask: number): number {
  const start = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) {
    const r = op(i & mask) as { length?: number } | undefined;
    if (r === undefined) sink++;
  }
  return Number(process.hrtime.bigint() - start) / 1e6;
}

/** Runs `op` for about `ms`; returns the measured ms per op. */
function warm(op: Op, ms: number, mask: number): number {
  let iterations = 16;
  let totalMs = 0;
  let totalOps = 0;
  while (totalMs < ms) {
    const t = runFor(op, iterations, mask);
    totalMs += t;
    totalOps += iterations;
    if (t < ms / 8) iterations *= 2;
  }
  return totalMs / totalOps;
}

/** Runs the rounds of each size in this process; `summariseVerify` turns them into figures. */
export function runVerifyBench(options: VerifyBenchOptions): VerifySamples[] {
  const keyring = new Keyring([{ id: 'current', secret: OUR_SECRET }]);
  const stripe = new Stripe('sk_test_bench_offline');
  const svix = new Webhook(SVIX_SECRET);
  const pool = 1 << Math.ceil(Math.log2(options.pool));
  const mask = pool - 1;
  const results: VerifySamples[] = [];

  for (const size of SIZES) {
    if (options.sizes && !options.sizes.includes(size.label)) continue;
    const inputs = makeVerifyInputs(size.bytes, pool);
    const get = (i: number) => inputs[i] as (typeof inputs)[number];

    // Sanity: every implementation accepts every input and yields the same event id.
    for (const input of inputs) {
      const ours = verifyMessage(input.ourRaw, { keyring });
      const s = stripe.webhooks.constructEvent(input.body, input.stripeHeader, STRIPE_SECRET) as unknown as {
        event_id: string;
      };
      const v = svix.verify(input.body, input.svixHeaders) as { event_id: string };
      if (ours.eventId !== s.event_id || ours.eventId !== v.event_id) throw new Error('verifiers disagree');
    }

    const key = createSecretKey(Buffer.from(OUR_SECRET, 'utf8'));
    const floorOp: Op = (i) => bareVerify(get(i).ourRaw, key);
    // 'floor again' before 'floor' and 'floor' before 'ours': the control's pair sits in the same
    // slots relative to each other as the measured pair, in both directions of `repetitionOrder`.
    const impls: { name: ImplName; op: Op }[] = [
      { name: 'floor again', op: floorOp },
      { name: 'floor', op: floorOp },
      { name: 'ours', op: (i) => verifyMessage(get(i).ourRaw, { keyring }).payload },
      {
        name: 'stripe',
        op: (i) => {
          const input = get(i);
          return stripe.webhooks.constructEvent(input.body, input.stripeHeader, STRIPE_SECRET);
        },
      },
      {
        name: 'svix',
        op: (i) => {
          const input = get(i);
          return svix.verify(input.body, input.svixHeaders);
        },
      },
    ];

    // Warm every implementation, then size each round to ~roundMs from the warm-up speed. The
    // control runs as many operations as the floor: the same code, the same round.
    const iterations = new Map<string, number>();
    for (const impl of impls) {
      if (impl.name === 'floor again') continue;
      const msPerOp = warm(impl.op, options.warmupMs, mask);
      iterations.set(impl.name, Math.max(8, Math.round(options.roundMs / msPerOp)));
    }
    iterations.set('floor again', iterations.get('floor') as number);
    // Rounds interleave the implementations so drift (thermal, GC, neighbours) hits all alike, in
    // `repetitionOrder`: an implementation pays the garbage of the one before it, so a fixed order
    // would always charge svix's to the first side. No full collection between rounds: each one drops
    // the verifiers' optimised code (`--trace-deopt`: "weak objects", code whose embedded objects
    // died), so every round would measure re-optimisation (docs/performance-log.md).
    const rounds = byImpl(() => [] as number[]);
    const cpuRounds = byImpl(() => [] as number[]);
    for (let r = 0; r < options.rounds; r++) {
      for (const impl of repetitionOrder(impls, r)) {
        const n = iterations.get(impl.name) as number;
        const cpu = process.cpuUsage();
        const ms = runFor(impl.op, n, mask);
        const used = process.cpuUsage(cpu);
        rounds[impl.name].push((n / ms) * 1000);
        cpuRounds[impl.name].push((used.user + used.system) / n);
      }
    }
    results.push({ size: size.label, bodyBytes: size.bytes, rounds, cpuRounds });
  }
  if (sink < 0) console.log(sink);
  return results;
}

function byImpl<T>(make: () => T): Record<ImplName, T> {
  return { 'floor again': make(), floor: make(), ours: make(), stripe: make(), svix: make() };
}

/**
 * The figures of one size from the rounds of one or more processes, pooled: each ratio is taken
 * within a round (the implementations of a round ran back to back in one process), then the
 * medians and intervals over all the rounds.
 */
export function summariseVerify(parts: readonly VerifySamples[]): VerifySizeResult {
  const first = parts[0];
  if (!first || parts.some((p) => p.size !== first.size))
    throw new Error('summariseVerify: one size, at least one part');
  const timing = (name: ImplName): VerifyTiming => {
    const rounds = parts.flatMap((p) => p.rounds[name]);
    const opsPerSec = median(rounds);
    return {
      opsPerSec,
      usPerOp: 1e6 / opsPerSec,
      rounds,
      cpuRounds: parts.flatMap((p) => p.cpuRounds[name]),
    };
  };
  const ours = timing('ours');
  const stripe = timing('stripe');
  const svix = timing('svix');
  const floor = timing('floor');
  const again = timing('floor again');
  const perRound = ours.rounds.map((x, r) => x / (floor.rounds[r] as number));
  const perRoundCpu = ours.cpuRounds.map((x, r) => (floor.cpuRounds[r] as number) / x);
  const control = floor.rounds.map((x, r) => x / (again.rounds[r] as number));
  return {
    size: first.size,
    bodyBytes: first.bodyBytes,
    ours,
    stripe,
    svix,
    floor,
    oursOverStripe: ours.opsPerSec / stripe.opsPerSec,
    oursOverSvix: ours.opsPerSec / svix.opsPerSec,
    oursOverFloor: summariseRatios(perRound),
    oursOverFloorCpu: summariseRatios(perRoundCpu),
    floorOverFloor: summariseRatios(control),
  };
}
