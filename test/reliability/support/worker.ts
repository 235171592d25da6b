/**
 * A worker process for the crash and overload suites: the kit's consumer on a real queue (SQS on
 * fauxqs, or Storage Queue on Azurite) with SQLite or Redis dedupe, configured by the JSON in
 * RELIABILITY_WORKER (see `SidecarConfig`); signing secret from PARTNER_EVENTS_SIGNING_SECRET as
 * in production. Its handler waits a random few ms, then appends `<event_id>\n` to a file opened
 * with O_APPEND (one write(2) per line: a SIGKILL never leaves half a line). Logs (pino, LOG_LEVEL)
 * go to stdout, which the parent sends to a file it later searches for the secret.
 *
 * SIGTERM stops it gracefully (drain, close) and it exits 0 after writing its final stats line.
 * Started with --expose-gc, it also writes what it really holds (memory after a full GC): a
 * `baseline` line before the consumer starts, and a `live` line on each SIGUSR2.
 */
import { appendFileSync, openSync, writeSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { createConsumer } from '../../../src/consumer/consumer.js';
import { createLogger } from '../../../src/core/logger.js';
import type { RawMessage, SourceAdapter } from '../../../src/core/source-adapter.js';
import type { DedupeStore } from '../../../src/dedupe/types.js';

export interface SidecarConfig {
  readonly source:
    | {
        readonly kind: 'sqs';
        readonly queueUrl: string;
        readonly endpoint: string;
        readonly visibilitySeconds: number;
      }
    | {
        readonly kind: 'storage-queue';
        readonly connectionString: string;
        readonly queueName: string;
        readonly visibilitySeconds: number;
      };
  /** `sqlite:PATH` or `redis://HOST:PORT`. */
  readonly dedupe: string;
  readonly redisPrefix?: string;
  readonly handledPath: string;
  readonly deadLetterPath: string;
  readonly concurrency: number;
  readonly leaseMs: number;
  /** The consumer's setting; unset: its default. */
  readonly maxAbandonedClaims?: number;
  /** Handler time, uniform in [min, max] ms. */
  readonly handlerDelayMs: readonly [number, number];
  /** Added to the consumer's clock (overload: the worker starts 10 minutes after the backlog). */
  readonly clockOffsetMs?: number;
  readonly retry: { readonly maxAttempts: number; readonly baseDelayMs: number; readonly maxDelayMs: number };
  /**
   * JSONL of `{t, handled, rss, heap}` every `statsIntervalMs`, and a final line with `max_rss`;
   * with --expose-gc, `{mark: 'baseline' | 'live', live_heap, live_external, rss}` lines too.
   */
  readonly statsPath?: string;
  readonly statsIntervalMs?: number;
  readonly seed: number;
}

const config = JSON.parse(process.env.RELIABILITY_WORKER ?? '') as SidecarConfig;
const logger = createLogger();

let seed = config.seed >>> 0;
const random = () => {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
};

async function openSource(): Promise<SourceAdapter<RawMessage>> {
  const s = config.source;
  if (s.kind === 'sqs') {
    const { SQSClient } = await import('@aws-sdk/client-sqs');
    const { createSqsAdapter } = await import('../../../adapters/sqs/index.js');
    return createSqsAdapter({
      queueUrl: s.queueUrl,
      client: new SQSClient({
        endpoint: s.endpoint,
        region: 'us-east-1',
        credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      }),
      waitTimeSeconds: 1,
      visibilityTimeoutSeconds: s.visibilitySeconds,
      logger,
    });
  }
  const { createStorageQueueAdapter } = await import('../../../adapters/storage-queue/index.js');
  return createStorageQueueAdapter({
    queueName: s.queueName,
    connectionString: s.connectionString,
    visibilityTimeoutSeconds: s.visibilitySeconds,
    pollIntervalMs: 20,
    maxPollIntervalMs: 200,
    deadLetterQueue: false,
    logger,
  });
}

async function openDedupe(): Promise<DedupeStore> {
  if (config.dedupe.startsWith('redis://')) {
    const { createRedisDedupe } = await import('../../../src/dedupe/redis.js');
    return createRedisDedupe({ url: config.dedupe, prefix: config.redisPrefix ?? 'reliability', logger });
  }
  const { createSqliteDedupe } = await import('../../../src/dedupe/sqlite.js');
  return createSqliteDedupe({ path: config.dedupe.slice('sqlite:'.length) });
}

const handled = openSync(config.handledPath, 'a');
let count = 0;
const offset = config.clockOffsetMs ?? 0;
const consumer = createConsumer({
  source: await openSource(),
  dedupe: await openDedupe(),
  deadLetter: config.deadLetterPath,
  logger,
  concurrency: config.concurrency,
  leaseMs: config.leaseMs,
  ...(config.maxAbandonedClaims === undefined ? {} : { maxAbandonedClaims: config.maxAbandonedClaims }),
  retry: config.retry,
  ...(offset ? { now: () => Date.now() + offset } : {}),
});
const [minDelay, maxDelay] = config.handlerDelayMs;
consumer.on('*', async (event) => {
  const ms = minDelay + Math.floor(random() * (maxDelay - minDelay + 1));
  if (ms > 0) await sleep(ms);
  writeSync(handled, `${event.event_id}\n`);
  count++;
});

const stats = config.statsPath;
const sample = (extra: Record<string, number | string> = {}) => {
  if (!stats) return;
  const m = process.memoryUsage();
  const s = consumer.status;
  const now = Date.now();
  const line = {
    t: now,
    pid: process.pid,
    handled: count,
    rss: m.rss,
    heap: m.heapUsed,
    in_flight: s.inFlight,
    // A receive pending for long means the broker is not answering.
    receiving_for_ms: s.receivingSince === undefined ? null : now - s.receivingSince,
    last_receive_ago_ms: s.lastReceiveAt === undefined ? null : now - s.lastReceiveAt,
    last_receive_error: s.lastReceiveError ?? null,
    ...extra,
  };
  appendFileSync(stats, `${JSON.stringify(line)}\n`);
};
const timer = stats ? setInterval(sample, config.statsIntervalMs ?? 1000) : undefined;
timer?.unref();

/**
 * Memory after full GCs: what the process holds, without garbage not yet collected. Twice: V8
 * frees ArrayBuffer memory (Buffers) concurrently after a GC, and the next GC completes that.
 */
const gc = (globalThis as { gc?: () => void }).gc;
const sampleLive = async (mark: 'baseline' | 'live') => {
  if (!gc) return;
  gc();
  await new Promise((resolve) => setImmediate(resolve)); // finalizers and weak callbacks run
  gc();
  const m = process.memoryUsage();
  sample({ mark, live_heap: m.heapUsed, live_external: m.external });
};
process.on('SIGUSR2', () => void sampleLive('live'));

process.once('SIGTERM', () => void consumer.stop());
await sampleLive('baseline'); // modules loaded, source and store open, nothing received yet
await consumer.start();
sample();
await consumer.stopped;
if (timer) clearInterval(timer);
sample({ max_rss: process.resourceUsage().maxRSS * 1024, final: 1 });
process.exit(0);
