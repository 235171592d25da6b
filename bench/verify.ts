/**
 * Section (a): the verify step alone, ours beside Stripe's and svix's webhook verification on the
 * same body bytes. Each library does its whole job: timestamp tolerance, HMAC, constant-time
 * compare, JSON.parse of the body. Ours additionally parses the envelope the body travels in.
 * The floor does our work bare: parse the envelope, HMAC with a KeyObject, `timingSafeEqual`,
 * parse the body (no age check, no key lookup, no field checks).
 */
import { createSecretKey } from 'node:crypto';
import Stripe from 'stripe';
import { Webhook } from 'svix';
import { Keyring } from '../src/core/secrets.js';
import { verifyMessage } from '../src/core/verify.js';
import { makeVerifyInputs, OUR_SECRET, SIZES, STRIPE_SECRET, SVIX_SECRET } from './fixtures.js';
import { median, repetitionOrder } from './stats.js';
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
  /** Median of the rounds' ours ÷ floor (each round runs both back to back), with min and max. */
  readonly oursOverFloor: { readonly median: number; readonly min: number; readonly max: number };
  /** The same by CPU time per op: floor CPU µs/op ÷ ours CPU µs/op, per round. */
  readonly oursOverFloorCpu: { readonly median: number; readonly min: number; readonly max: number };
}

export interface VerifyBenchOptions {
  readonly warmupMs: number;
  readonly rounds: number;
  readonly roundMs: number;
  /** Distinct inputs cycled through (distinct event ids and signatures). */
  readonly pool: number;
  readonly sizes?: readonly string[];
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

export function runVerifyBench(options: VerifyBenchOptions): VerifySizeResult[] {
  const keyring = new Keyring([{ id: 'current', secret: OUR_SECRET }]);
  const stripe = new Stripe('sk_test_bench_offline');
  const svix = new Webhook(SVIX_SECRET);
  const pool = 1 << Math.ceil(Math.log2(options.pool));
  const mask = pool - 1;
  const results: VerifySizeResult[] = [];

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
    const impls: { name: 'ours' | 'stripe' | 'svix' | 'floor'; op: Op }[] = [
      { name: 'floor', op: (i) => bareVerify(get(i).ourRaw, key) },
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

    // Warm every implementation, then size each round to ~roundMs from the warm-up speed.
    const iterations = new Map<string, number>();
    for (const impl of impls) {
      const msPerOp = warm(impl.op, options.warmupMs, mask);
      iterations.set(impl.name, Math.max(8, Math.round(options.roundMs / msPerOp)));
    }
    // Rounds interleave the implementations so drift (thermal, GC, neighbours) hits all alike, in
    // `repetitionOrder`: an implementation pays the garbage of the one before it, so a fixed order
    // would always charge svix's to the floor. No full collection between rounds: each one drops
    // the verifiers' optimised code (`--trace-deopt`: "weak objects", code whose embedded objects
    // died), so every round would measure re-optimisation (docs/performance-log.md).
    const samples = new Map<string, number[]>(impls.map((impl) => [impl.name, []]));
    const cpuSamples = new Map<string, number[]>(impls.map((impl) => [impl.name, []]));
    for (let r = 0; r < options.rounds; r++) {
      for (const impl of repetitionOrder(impls, r)) {
        const n = iterations.get(impl.name) as number;
        const cpu = process.cpuUsage();
        const ms = runFor(impl.op, n, mask);
        const used = process.cpuUsage(cpu);
        samples.get(impl.name)?.push((n / ms) * 1000);
        cpuSamples.get(impl.name)?.push((used.user + used.system) / n);
      }
    }
    const timing = (name: string): VerifyTiming => {
      const rounds = samples.get(name) ?? [];
      const opsPerSec = median(rounds);
      return { opsPerSec, usPerOp: 1e6 / opsPerSec, rounds, cpuRounds: cpuSamples.get(name) ?? [] };
    };
    const ours = timing('ours');
    const stripeT = timing('stripe');
    const svixT = timing('svix');
    const floor = timing('floor');
    const perRound = ours.rounds.map((x, r) => x / (floor.rounds[r] as number));
    const perRoundCpu = ours.cpuRounds.map((x, r) => (floor.cpuRounds[r] as number) / x);
    results.push({
      size: size.label,
      bodyBytes: size.bytes,
      ours,
      stripe: stripeT,
      svix: svixT,
      floor,
      oursOverStripe: ours.opsPerSec / stripeT.opsPerSec,
      oursOverSvix: ours.opsPerSec / svixT.opsPerSec,
      oursOverFloor: { median: median(perRound), min: Math.min(...perRound), max: Math.max(...perRound) },
      oursOverFloorCpu: {
        median: median(perRoundCpu),
        min: Math.min(...perRoundCpu),
        max: Math.max(...perRoundCpu),
      },
    });
  }
  if (sink < 0) console.log(sink);
  return results;
}
