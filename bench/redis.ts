/**
 * Section (e) of `npm run bench`: the Redis path, against a redis-server of its own on loopback.
 *
 *   pipeline+redis = MemorySource → createConsumer(createRedisDedupe, no-op handler), concurrency 64
 *   redis floor    = bare loop: JSON.parse, HMAC (KeyObject) + timingSafeEqual, JSON.parse, zod parse,
 *                    then the store's own claim and complete scripts (EVALSHA, loaded before), 64 per
 *                    explicit ioredis pipeline: one round trip of claims, one of completes; the
 *                    next 64 events are parsed while those are in flight
 *   store pairs    = createRedisDedupe alone: claim + complete pairs, 64 in flight
 *   raw SET pairs  = the same client settings, 64 in flight, each pair `SET k v NX PX` then
 *                    `SET k v XX PX`: the cheapest two commands a lease could be
 *
 * Repetitions are interleaved (one of each row, then again); ratios are taken in each repetition
 * and summarised as median and min–max. Also: Redis commands per event of a pipeline run (from
 * INFO commandstats) and CPU µs per event of this process and of redis-server.
 *
 *   npm run bench -- --only redis [--quick]
 */
import { execFileSync } from 'node:child_process';
import { createHmac, createSecretKey, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { createMemorySource } from '../adapters/memory/index.js';
import { createConsumer } from '../src/consumer/consumer.js';
import { type EventType, eventSchemas } from '../src/core/events/schemas.js';
import { silentLogger } from '../src/core/logger.js';
import { createRedisDedupe, FAIL_FAST_OPTIONS, REDIS_SCRIPTS } from '../src/dedupe/redis.js';
import { ABANDONED_CLAIM_MEMORY_MS } from '../src/dedupe/types.js';
import { HAS_REDIS, RedisServer } from '../test/support/redis-server.js';
import { EVENT_TYPE, makeEnvelopes, OUR_SECRET } from './fixtures.js';
import { fmtFixed, fmtInt, median, repetitionOrder, sig, table } from './stats.js';

const CONCURRENCY = 64;
const LEASE_MS = 60_000;
const RETENTION_MS = 7 * 24 * 3600_000;
const PIPELINE_GOAL = 0.7; // pipeline+redis ÷ redis floor at 300 B
const PAIRS_GOAL = 0.5; // store pairs ÷ raw SET pairs

type RowName = 'pipeline+redis' | 'redis floor' | 'store pairs' | 'raw SET pairs';
const ROWS: readonly RowName[] = ['pipeline+redis', 'redis floor', 'store pairs', 'raw SET pairs'];

export interface RedisRow {
  readonly row: RowName;
  /** Events/s (pairs/s for the two pair rows): median, and each repetition. */
  readonly perSec: number;
  readonly runs: readonly number[];
  /** CPU µs per event of this process and of redis-server: medians. */
  readonly nodeCpuUs: number;
  readonly redisCpuUs: number;
}

export interface RedisSpread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
}

export interface RedisBenchResult {
  readonly n: number;
  readonly reps: number;
  readonly rows: readonly RedisRow[];
  readonly pipelineOverFloor: RedisSpread;
  readonly storeOverRaw: RedisSpread;
  /** The same ratios by CPU: the other row's CPU per event (this process + redis-server) ÷ this row's. */
  readonly pipelineOverFloorByCpu: RedisSpread;
  readonly storeOverRawByCpu: RedisSpread;
  /** Commands redis-server ran per event during a pipeline run, by command name. */
  readonly commandsPerEvent: Readonly<Record<string, number>>;
}

interface Timed {
  readonly ms: number;
  readonly nodeCpuUs: number;
  readonly redisCpuUs: number;
}

/** Runs the section and prints it; undefined (with a line saying why) without redis-server. */
export async function runRedisSection(options: { quick: boolean }): Promise<RedisBenchResult | undefined> {
  console.log(
    `\n(e) Redis path, 300 B bodies, concurrency ${CONCURRENCY}, redis-server ${redisVersion()} on loopback (no persistence)`,
  );
  if (!HAS_REDIS) {
    console.log('    (redis-server not installed: section skipped)');
    return undefined;
  }
  const result = await runRedisBench(options);
  printRedisBench(result);
  return result;
}

export async function runRedisBench(options: { quick: boolean }): Promise<RedisBenchResult> {
  const n = options.quick ? 2000 : 20_000;
  // Even: each order of the rows runs as often (below).
  const reps = options.quick ? 1 : 6;
  const raws = makeEnvelopes(300, n);
  const server = await RedisServer.start();
  const admin = new Redis(server.url);
  try {
    const redisPid = Number(/process_id:(\d+)/.exec(await admin.info('server'))?.[1]);
    const redisCpuUs = () => processCpuUs(redisPid);
    const timed = async (run: () => Promise<void>): Promise<Timed> => {
      await admin.flushall();
      const cpu = process.cpuUsage();
      const redis0 = redisCpuUs();
      const started = performance.now();
      await run();
      const ms = performance.now() - started;
      const used = process.cpuUsage(cpu);
      return { ms, nodeCpuUs: used.user + used.system, redisCpuUs: redisCpuUs() - redis0 };
    };
    const runners: Record<RowName, (events: readonly string[]) => Promise<void>> = {
      'pipeline+redis': (events) => runPipeline(server.url, events),
      'redis floor': (events) => runFloor(server.url, events),
      'store pairs': (events) => runStorePairs(server.url, events.length),
      'raw SET pairs': (events) => runRawPairs(server.url, events.length),
    };
    const warm = raws.slice(0, Math.min(raws.length, 2000));
    for (const row of ROWS) await timed(() => runners[row](warm));

    const commandsPerEvent = await countCommands(admin, () => runners['pipeline+redis'](raws), n);
    const times = new Map<RowName, Timed[]>(ROWS.map((row) => [row, []]));
    for (let r = 0; r < reps; r++) {
      for (const row of repetitionOrder(ROWS, r)) {
        times.get(row)?.push(await timed(() => runners[row](raws)));
      }
    }
    return summarise(n, reps, times, commandsPerEvent);
  } finally {
    admin.disconnect();
    await server.stop();
  }
}

function summarise(
  n: number,
  reps: number,
  times: Map<RowName, Timed[]>,
  commandsPerEvent: Record<string, number>,
): RedisBenchResult {
  const perSec = (t: Timed) => (n / t.ms) * 1000;
  const rows = ROWS.map((row): RedisRow => {
    const ts = times.get(row) ?? [];
    const runs = ts.map(perSec);
    return {
      row,
      perSec: median(runs),
      runs,
      nodeCpuUs: median(ts.map((t) => t.nodeCpuUs / n)),
      redisCpuUs: median(ts.map((t) => t.redisCpuUs / n)),
    };
  });
  const cpu = (t: Timed) => t.nodeCpuUs + t.redisCpuUs;
  const ratio = (a: RowName, b: RowName, byCpu = false): RedisSpread => {
    const as = times.get(a) ?? [];
    const bs = times.get(b) ?? [];
    const each = as.map((t, i) => {
      const other = bs[i] as Timed;
      return byCpu ? cpu(other) / cpu(t) : perSec(t) / perSec(other);
    });
    return { median: median(each), min: Math.min(...each), max: Math.max(...each) };
  };
  return {
    n,
    reps,
    rows,
    pipelineOverFloor: ratio('pipeline+redis', 'redis floor'),
    storeOverRaw: ratio('store pairs', 'raw SET pairs'),
    pipelineOverFloorByCpu: ratio('pipeline+redis', 'redis floor', true),
    storeOverRawByCpu: ratio('store pairs', 'raw SET pairs', true),
    commandsPerEvent,
  };
}

async function runPipeline(url: string, raws: readonly string[]): Promise<void> {
  const source = createMemorySource({ endWhenEmpty: true });
  for (const raw of raws) source.send(raw);
  const consumer = createConsumer({
    source,
    secrets: [{ id: 'current', secret: OUR_SECRET }],
    dedupe: createRedisDedupe({ url, logger: silentLogger() }),
    logger: silentLogger(),
    deadLetter: '/dev/null',
    concurrency: CONCURRENCY,
  });
  consumer.on(EVENT_TYPE, () => {});
  await consumer.start();
  await consumer.stopped;
  const handled = source.settled.filter((s) => s.outcome.kind === 'ack' && s.outcome.result === 'handled');
  if (handled.length !== raws.length) {
    throw new Error(`pipeline+redis handled ${handled.length} of ${raws.length} events`);
  }
}

/** Resolves once the client is connected (without an offline queue nothing can be sent before). */
async function connected(redis: Redis): Promise<void> {
  if (redis.status !== 'ready') await new Promise((resolve) => redis.once('ready', resolve));
}

/** The floor: the pipeline's work with nothing around it, 64 events per pipelined round trip. */
async function runFloor(url: string, raws: readonly string[]): Promise<void> {
  const redis = new Redis(url, FAIL_FAST_OPTIONS);
  await connected(redis);
  const { claim, complete } = REDIS_SCRIPTS;
  await redis.script('LOAD', claim.lua);
  await redis.script('LOAD', complete.lua);
  const key = createSecretKey(Buffer.from(OUR_SECRET, 'utf8'));
  const tokenPrefix = `${process.pid}.floor.`;
  let seq = 0;
  const roundTrips = async (ids: string[], tokens: string[]) => {
    const claims = redis.pipeline();
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i] as string;
      claims.evalsha(
        claim.sha,
        claim.keys,
        `floor:dedupe:${id}`,
        `floor:claims:${id}`,
        `floor:owner:${id}`,
        tokens[i] as string,
        LEASE_MS,
        LEASE_MS + ABANDONED_CLAIM_MEMORY_MS,
      );
    }
    for (const [error, reply] of (await claims.exec()) ?? []) {
      if (error || (reply as number[])[0] !== 1) throw error ?? new Error('floor: claim not taken');
    }
    const completes = redis.pipeline();
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i] as string;
      completes.evalsha(
        complete.sha,
        complete.keys,
        `floor:dedupe:${id}`,
        `floor:claims:${id}`,
        `floor:owner:${id}`,
        tokens[i] as string,
        RETENTION_MS,
      );
    }
    for (const [error, reply] of (await completes.exec()) ?? []) {
      if (error || reply !== 1) throw error ?? new Error('floor: complete missed');
    }
  };
  let inFlight: Promise<void> | undefined;
  for (let b = 0; b < raws.length; b += CONCURRENCY) {
    const ids: string[] = [];
    const tokens: string[] = [];
    for (const raw of raws.slice(b, b + CONCURRENCY)) {
      const env = JSON.parse(raw) as {
        event_type: string;
        signed_at: number;
        signature: string;
        body: string;
      };
      const mac = createHmac('sha256', key).update(`${env.signed_at}.`).update(env.body).digest();
      if (!timingSafeEqual(mac, Buffer.from(env.signature, 'hex'))) throw new Error('floor: bad signature');
      const event = eventSchemas[env.event_type as EventType].parse(JSON.parse(env.body)) as {
        event_id: string;
      };
      ids.push(event.event_id);
      tokens.push(tokenPrefix + (++seq).toString(36));
    }
    await inFlight;
    inFlight = roundTrips(ids, tokens);
  }
  await inFlight;
  await redis.quit();
}

async function lanes(n: number, pair: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < n; i = next++) await pair(i);
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
}

async function runStorePairs(url: string, n: number): Promise<void> {
  const store = createRedisDedupe({ url, logger: silentLogger() });
  await store.peek('warm-up');
  const run = `${process.pid}-${performance.now()}`;
  await lanes(n, async (i) => {
    const id = `evt-${run}-${i}`;
    const claim = await store.claim(id, LEASE_MS);
    if (claim.status !== 'claimed') throw new Error(`store pairs: ${claim.status}`);
    if (!(await store.complete(id, claim.token, RETENTION_MS)))
      throw new Error('store pairs: complete missed');
  });
  await store.close();
}

async function runRawPairs(url: string, n: number): Promise<void> {
  const redis = new Redis(url, FAIL_FAST_OPTIONS);
  await connected(redis);
  const run = `${process.pid}-${performance.now()}`;
  await lanes(n, async (i) => {
    const key = `raw:${run}:${i}`;
    if ((await redis.set(key, 'c:token', 'PX', LEASE_MS, 'NX')) !== 'OK') throw new Error('raw: NX missed');
    if ((await redis.set(key, 'd:token', 'PX', RETENTION_MS, 'XX')) !== 'OK')
      throw new Error('raw: XX missed');
  });
  await redis.quit();
}

/** Commands per event by name (INFO commandstats before and after `run`). */
async function countCommands(
  admin: Redis,
  run: () => Promise<void>,
  n: number,
): Promise<Record<string, number>> {
  await admin.flushall();
  await admin.config('RESETSTAT');
  await run();
  const stats = await admin.info('commandstats');
  const out: Record<string, number> = {};
  for (const match of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    const name = match[1] as string;
    if (name === 'config' || name === 'info' || name === 'flushall') continue; // ours, around the run
    out[name] = Number(match[2]) / n;
  }
  return out;
}

function processCpuUs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10_000; // clock ticks of 10 ms
}

function redisVersion(): string {
  try {
    return /v=([\d.]+)/.exec(execFileSync('redis-server', ['--version']).toString())?.[1] ?? '?';
  } catch {
    return '?';
  }
}

export function printRedisBench(r: RedisBenchResult): void {
  const rows: string[][] = [['row', 'per s', 'µs each', 'runs per s', 'node CPU µs', 'redis CPU µs']];
  for (const row of r.rows) {
    rows.push([
      row.row,
      fmtInt(row.perSec),
      fmtFixed(1e6 / row.perSec, 1),
      row.runs.map(fmtInt).join(' / '),
      fmtFixed(row.nodeCpuUs, 1),
      fmtFixed(row.redisCpuUs, 1),
    ]);
  }
  console.log(`    ${fmtInt(r.n)} events × ${r.reps}, interleaved; pairs rows count claim + complete pairs`);
  console.log(table(rows));
  const line = (name: string, s: RedisSpread, goal: number) =>
    `    ${name}: ${fmtFixed(s.median, 2)} (runs ${fmtFixed(s.min, 2)}–${fmtFixed(s.max, 2)}) — ${s.median >= goal ? 'goal met' : 'BELOW GOAL'} (≥ ${goal})`;
  console.log(line('pipeline+redis ÷ redis floor', r.pipelineOverFloor, PIPELINE_GOAL));
  console.log(line('store pairs ÷ raw SET pairs ', r.storeOverRaw, PAIRS_GOAL));
  const byCpu = (name: string, s: RedisSpread) =>
    `    ${name}: ${fmtFixed(s.median, 2)} (runs ${fmtFixed(s.min, 2)}–${fmtFixed(s.max, 2)})`;
  console.log(
    "    by CPU (the other row's node + redis-server CPU µs per event ÷ this row's; steadier on a busy machine):",
  );
  console.log(byCpu('  pipeline+redis ÷ redis floor', r.pipelineOverFloorByCpu));
  console.log(byCpu('  store pairs ÷ raw SET pairs ', r.storeOverRawByCpu));
  const sent = new Set(['evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'fcall', 'get', 'set']);
  const connection = /^(hello|quit|ping|select|info|client\||config\||script\|)/;
  const list = (keep: (name: string) => boolean) =>
    Object.entries(r.commandsPerEvent)
      .filter(([name, perEvent]) => keep(name) && perEvent >= 0.0005)
      .map(([name, perEvent]) => `${name} ${fmtFixed(perEvent, perEvent < 0.1 ? 3 : 2)}`)
      .join(', ') || 'none';
  const scripted = r.commandsPerEvent.evalsha !== undefined;
  console.log(
    `    Redis commands per event in a pipeline run (INFO commandstats): sent ${list((n) => (scripted ? n.startsWith('eval') : sent.has(n)))}` +
      (scripted
        ? `; run inside the scripts ${list((n) => !n.startsWith('eval') && !connection.test(n))}`
        : ''),
  );
  console.log('    (eval = a script sent whole: once per script and connection, or after NOSCRIPT)');
}

/** The section's figures for the JSON line. */
export function redisJson(r: RedisBenchResult | undefined): unknown {
  if (!r) return null;
  const spread = (s: RedisSpread) => ({ median: sig(s.median, 3), min: sig(s.min, 3), max: sig(s.max, 3) });
  return {
    n: r.n,
    reps: r.reps,
    goals: { pipelineOverFloor: PIPELINE_GOAL, storeOverRaw: PAIRS_GOAL },
    rows: r.rows.map((row) => ({
      row: row.row,
      perSec: sig(row.perSec),
      runs: row.runs.map((x) => sig(x)),
      nodeCpuUs: sig(row.nodeCpuUs, 3),
      redisCpuUs: sig(row.redisCpuUs, 3),
    })),
    pipelineOverFloor: spread(r.pipelineOverFloor),
    storeOverRaw: spread(r.storeOverRaw),
    pipelineOverFloorByCpu: spread(r.pipelineOverFloorByCpu),
    storeOverRawByCpu: spread(r.storeOverRawByCpu),
    commandsPerEvent: Object.fromEntries(Object.entries(r.commandsPerEvent).map(([k, v]) => [k, sig(v, 3)])),
  };
}
