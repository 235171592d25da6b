/**
 * Outage suite: while a consumer (in this process) works through a stream of events, one of its
 * dependencies goes away and comes back — the dedupe store (redis-server killed, restarted on the
 * same port, empty), the SQS endpoint (fauxqs taken off the network by a TCP proxy that resets
 * every connection, then restored) and the Storage Queue emulator (Azurite stopped with SIGTERM,
 * restarted from its on-disk state). The same consumer object runs throughout: it must notice,
 * ack nothing it has not handled, lose nothing, dead-letter nothing, and resume by itself.
 *
 * The outage length is what is waited for here (a fault is injected for that long); everything
 * else waits on conditions.
 */
import { join } from 'node:path';
import type { SQSClient } from '@aws-sdk/client-sqs';
import { QueueServiceClient } from '@azure/storage-queue';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqsAdapter } from '../../adapters/sqs/index.js';
import { StorageQueueAdapter } from '../../adapters/storage-queue/index.js';
import type { RawMessage, SourceAdapter } from '../../src/adapter.js';
import { RedisDedupeStore } from '../../src/dedupe/redis.js';
import { sqliteDedupe } from '../../src/dedupe/sqlite.js';
import type { DedupeStore } from '../../src/dedupe/types.js';
import { createLogger } from '../../src/logger.js';
import { createConsumer, type SettledReport } from '../../src/worker.js';
import { createQueue, type FauxqsServer, fauxqsClient, startFauxqs } from '../support/fauxqs.js';
import { tempDir } from '../support/harness.js';
import { HAS_REDIS, RedisServer } from '../support/redis-server.js';
import { AzuriteQueue } from './support/azurite.js';
import { ObservedSource } from './support/observed-source.js';
import { FULL, randomInt, report, rng, SIZES, seedFor, timeout } from './support/profile.js';
import {
  envelopeFor,
  eventIds,
  feed,
  sendToSqs,
  sendToStorageQueue,
  sqsEmpty,
  storageQueueCount,
  until,
} from './support/queues.js';
import { SecretScan, suiteSecret } from './support/secrets.js';
import { TcpProxy } from './support/tcp-proxy.js';

const { events: EVENTS, downMs: DOWN_MS } = SIZES.outage;
const CONCURRENCY = 8;
/**
 * Scaled-down backoff (the default starts at 2 s): the retry budget before a message is
 * dead-lettered (≥ 13.9 s of delays over 9 retries) outlasts the outage, as the default budget
 * (~17 min) outlasts a realistic one.
 */
const RETRY = { maxAttempts: 10, baseDelayMs: 250, maxDelayMs: 5000 };
/** An ack lost to the outage comes back after this; then the dedupe store answers "duplicate". */
const VISIBILITY_SECONDS = FULL ? 5 : 2;
/** Events are published over this span; the outage starts after a quarter of them. */
const SPAN_MS = DOWN_MS * 2.5;
/**
 * The outage window is counted from this long after the dependency is gone: an answer it sent
 * just before it died may still be in our socket buffers (a claim granted, an ack applied).
 */
const GRACE_MS = 100;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

let fauxqs: FauxqsServer;
let direct: SQSClient;
let dir: ReturnType<typeof tempDir>;

beforeAll(async () => {
  fauxqs = await startFauxqs();
  direct = fauxqsClient(fauxqs.endpoint);
  dir = tempDir('phe-outage-');
});
afterAll(async () => {
  direct?.destroy();
  await fauxqs?.close();
  dir?.cleanup();
});

/** What the handlers and the consumer did, with times. */
class Run {
  readonly starts: { id: string; t: number }[] = [];
  readonly runs = new Map<string, number>();
  readonly reports: { t: number; report: SettledReport<RawMessage> }[] = [];
  readonly logLines: string[] = [];
  readonly logger = createLogger(
    { level: 'debug' },
    { write: (line: string) => void this.logLines.push(line) },
  );
  readonly #random: () => number;

  constructor(seed: number) {
    this.#random = rng(seed);
  }

  readonly handler = async (event: { event_id: string }) => {
    this.starts.push({ id: event.event_id, t: Date.now() });
    await sleep(randomInt(this.#random, 1, 3));
    this.runs.set(event.event_id, (this.runs.get(event.event_id) ?? 0) + 1);
  };

  readonly onSettled = (report: SettledReport<RawMessage>) => {
    this.reports.push({ t: Date.now(), report });
  };

  get handled(): number {
    return this.runs.size;
  }

  get repeats(): number {
    let n = 0;
    for (const c of this.runs.values()) n += c - 1;
    return n;
  }

  startsBetween(from: number, to: number): number {
    return this.starts.filter((s) => s.t > from && s.t < to).length;
  }

  firstStartAfter(t: number): number | undefined {
    return this.starts.find((s) => s.t >= t)?.t;
  }

  /** Acks decided in (from, to) for events whose handler started only after `from`. */
  acksWithoutHandlerBefore(from: number, to: number): number {
    return this.reports.filter(({ t, report }) => {
      if (t <= from || t >= to || report.outcome.kind !== 'ack' || report.outcome.result !== 'handled')
        return false;
      const started = this.starts.filter((s) => s.id === report.eventId && s.t <= t).at(-1)?.t;
      return started === undefined || started > from;
    }).length;
  }

  dead(): number {
    return this.reports.filter(({ report }) => report.outcome.kind === 'dead').length;
  }
}

/** Sends `bodies` at a steady rate (10 per call) over `spanMs`; `sent` counts what went out. */
function producer(send: (batch: string[]) => Promise<void>, bodies: readonly string[], spanMs: number) {
  const state = { sent: 0, done: Promise.resolve() };
  const started = Date.now();
  state.done = (async () => {
    for (let i = 0; i < bodies.length; i += 10) {
      await sleep(started + (i / bodies.length) * spanMs - Date.now());
      const batch = bodies.slice(i, i + 10);
      await send(batch);
      state.sent += batch.length;
    }
  })();
  return state;
}

interface OutageFigures {
  readonly events: number;
  readonly outage_ms: number;
  readonly handled: number;
  readonly lost: number;
  readonly repeated_runs: number;
  readonly dead_letters: number;
  readonly detected_ms: number | null;
  readonly recovery_ms: number | null;
  readonly drain_ms: number;
}

function scanOutputs(secret: string, run: Run, deadLetterPath: string): SecretScan {
  const scan = new SecretScan([secret]);
  scan.scan('consumer logs', run.logLines.join(''));
  for (const { report } of run.reports) {
    if (report.outcome.kind !== 'ack') scan.scan('outcome reasons', report.outcome.reason);
  }
  scan.scanFile('dead letters', deadLetterPath);
  return scan;
}

describe('outages: a dependency goes away mid-stream and comes back', () => {
  it.skipIf(!HAS_REDIS)(
    `Redis dedupe store killed for ${DOWN_MS / 1000}s: no handler starts while it is down, nothing lost`,
    async () => {
      const redis = await RedisServer.start();
      const secret = suiteSecret('outage-redis');
      const run = new Run(seedFor('outage-redis'));
      const queue = await createQueue(direct, 'outage-redis');
      const source = new ObservedSource(
        createSqsAdapter({
          queueUrl: queue.url,
          client: fauxqsClient(fauxqs.endpoint),
          waitTimeSeconds: 1,
          visibilityTimeoutSeconds: VISIBILITY_SECONDS,
          logger: run.logger,
        }),
      );
      const store = new RedisDedupeStore({ url: redis.url, prefix: 'outage', logger: run.logger });
      const deadLetterPath = join(dir.path, 'redis-dead.jsonl');
      const consumer = consumerFor(source, store, secret, run, deadLetterPath);
      try {
        await consumer.start();
        const ids = eventIds('evt-outage-redis', EVENTS);
        const bodies = ids.map((id) => envelopeFor(id, secret));
        const production = producer((b) => sendToSqs(direct, queue.url, b), bodies, SPAN_MS);
        await until(() => production.sent >= EVENTS / 4, { timeoutMs: 30_000 });

        await redis.pause();
        const downAt = Date.now();
        await until(() => !consumer.status.dedupeAvailable, { timeoutMs: DOWN_MS });
        const detectedAt = Date.now();
        await sleep(downAt + DOWN_MS - Date.now());
        const statusWhileDown = consumer.status;
        await redis.resume();
        const upAt = Date.now();

        await production.done;
        await until(() => run.handled === EVENTS, {
          timeoutMs: timeout(30_000, 120_000),
          describe: () => `${run.handled} of ${EVENTS} handled`,
        });
        const drainedAt = Date.now();
        await until(() => sqsEmpty(direct, queue.url), { timeoutMs: 30_000, intervalMs: 50 });
        expect(consumer.status.dedupeAvailable).toBe(true);
        expect(consumer.status.state).toBe('running');

        const firstStart = run.firstStartAfter(upAt);
        const acksInWindow = source.between('settle-ok', downAt, upAt, 'ack').length;
        const figures: OutageFigures & Record<string, unknown> = {
          dependency: 'redis dedupe (SIGKILL, restarted empty)',
          queue: 'sqs (fauxqs)',
          events: EVENTS,
          outage_ms: upAt - downAt,
          handled: ids.filter((id) => run.runs.has(id)).length,
          lost: ids.filter((id) => !run.runs.has(id)).length,
          repeated_runs: run.repeats,
          dead_letters: run.dead(),
          handler_starts_while_down: run.startsBetween(downAt + GRACE_MS, upAt),
          acks_while_down: acksInWindow,
          acks_while_down_without_handler_before_outage: run.acksWithoutHandlerBefore(
            downAt + GRACE_MS,
            upAt,
          ),
          retries_while_down: run.reports.filter(
            ({ t, report }) => t > downAt && t < upAt && report.outcome.kind === 'retry',
          ).length,
          detected_ms: detectedAt - downAt,
          recovery_ms: firstStart === undefined ? null : firstStart - upAt,
          drain_ms: drainedAt - upAt,
        };
        const scan = scanOutputs(secret, run, deadLetterPath);
        report('outage-redis', { ...figures, ...scan.figures });

        expect(statusWhileDown.dedupeAvailable).toBe(false);
        expect(figures.handler_starts_while_down).toBe(0);
        expect(figures.acks_while_down_without_handler_before_outage).toBe(0);
        expect(figures.acks_while_down).toBeLessThanOrEqual(CONCURRENCY);
        expect(figures.lost).toBe(0);
        expect(figures.dead_letters).toBe(0);
        expect(figures.repeated_runs).toBe(0);
        expect(scan.hits).toEqual([]);
      } finally {
        await consumer.stop();
        await redis.stop();
      }
    },
    timeout(45_000, 240_000),
  );

  it(
    `SQS endpoint unreachable for ${DOWN_MS / 1000}s: nothing acked while down, nothing lost, no handler re-run`,
    async () => {
      const port = Number(new URL(fauxqs.endpoint).port);
      const proxy = await TcpProxy.start({ host: '127.0.0.1', port });
      const secret = suiteSecret('outage-sqs');
      const run = new Run(seedFor('outage-sqs'));
      const queue = await createQueue(direct, 'outage-sqs');
      const viaProxy = fauxqsClient(proxy.url);
      const source = new ObservedSource(
        createSqsAdapter({
          queueUrl: queue.url,
          client: viaProxy,
          waitTimeSeconds: 1,
          visibilityTimeoutSeconds: VISIBILITY_SECONDS,
          logger: run.logger,
        }),
      );
      const deadLetterPath = join(dir.path, 'sqs-dead.jsonl');
      const store = sqliteDedupe({ path: join(dir.path, 'sqs-dedupe.db') });
      const consumer = consumerFor(source, store, secret, run, deadLetterPath);
      try {
        await consumer.start();
        const ids = eventIds('evt-outage-sqs', EVENTS);
        const bodies = ids.map((id) => envelopeFor(id, secret));
        // The publisher is not behind the partition: it keeps sending throughout.
        const production = producer((b) => sendToSqs(direct, queue.url, b), bodies, SPAN_MS);
        await until(() => production.sent >= EVENTS / 4, { timeoutMs: 30_000 });

        await proxy.cut();
        const downAt = Date.now();
        await until(() => consumer.status.lastReceiveError !== undefined, { timeoutMs: DOWN_MS * 2 });
        const detectedAt = Date.now();
        await sleep(downAt + DOWN_MS - Date.now());
        await proxy.restore();
        const upAt = Date.now();

        await production.done;
        await until(() => run.handled === EVENTS, {
          timeoutMs: timeout(30_000, 120_000),
          describe: () => `${run.handled} of ${EVENTS} handled`,
        });
        const drainedAt = Date.now();
        await until(() => sqsEmpty(direct, queue.url), { timeoutMs: 30_000, intervalMs: 50 });
        expect(consumer.status.lastReceiveError).toBeUndefined();
        expect(consumer.status.state).toBe('running');

        const recovered = source.firstAfter('receive-ok', upAt);
        const figures: OutageFigures & Record<string, unknown> = {
          dependency: 'sqs endpoint (TCP reset, then refused; fauxqs keeps its state)',
          queue: 'sqs (fauxqs)',
          dedupe: 'sqlite',
          events: EVENTS,
          outage_ms: upAt - downAt,
          handled: ids.filter((id) => run.runs.has(id)).length,
          lost: ids.filter((id) => !run.runs.has(id)).length,
          repeated_runs: run.repeats,
          dead_letters: run.dead(),
          acks_applied_while_down: source.between('settle-ok', downAt + GRACE_MS, upAt - 1, 'ack').length,
          acks_failed_while_down: source.between('settle-error', downAt, upAt, 'ack').length,
          receive_errors_while_down: source.between('receive-error', downAt, upAt).length,
          duplicates_acked_after: run.reports.filter(
            ({ t, report }) =>
              t > upAt && report.outcome.kind === 'ack' && report.outcome.result === 'duplicate',
          ).length,
          detected_ms: detectedAt - downAt,
          recovery_ms: recovered ? recovered.t - upAt : null,
          drain_ms: drainedAt - upAt,
        };
        const scan = scanOutputs(secret, run, deadLetterPath);
        report('outage-sqs', { ...figures, ...scan.figures });

        expect(figures.acks_applied_while_down).toBe(0);
        expect(figures.receive_errors_while_down).toBeGreaterThan(0);
        expect(figures.lost).toBe(0);
        expect(figures.dead_letters).toBe(0);
        expect(figures.repeated_runs).toBe(0);
        expect(scan.hits).toEqual([]);
      } finally {
        await consumer.stop();
        viaProxy.destroy();
        await proxy.stop();
      }
    },
    timeout(45_000, 240_000),
  );

  it(
    `Storage Queue emulator stopped for ${DOWN_MS / 1000}s and restarted: nothing acked while down, nothing lost`,
    async () => {
      const azurite = await AzuriteQueue.start({ persistent: true });
      const secret = suiteSecret('outage-storage-queue');
      const run = new Run(seedFor('outage-storage-queue'));
      const service = QueueServiceClient.fromConnectionString(azurite.connectionString);
      const queue = service.getQueueClient('outage');
      await queue.create();
      const ids = eventIds('evt-outage-sq', EVENTS);
      // A stream with at most 200 waiting (Azurite slows down with depth); none sent while it is down.
      let down = false;
      const feeder = feed({
        bodies: ids.map((id) => envelopeFor(id, secret)),
        backlog: 200,
        send: (batch) => sendToStorageQueue(queue, batch),
        handled: () => run.handled,
        paused: () => down,
      });
      // Configured as `run --source azure-storage-queue:NAME` does: the SDK's own retry policy.
      const source = new ObservedSource(
        new StorageQueueAdapter({
          queueName: 'outage',
          connectionString: azurite.connectionString,
          visibilityTimeoutSeconds: VISIBILITY_SECONDS,
          pollIntervalMs: 20,
          maxPollIntervalMs: 500,
          poisonQueue: false,
          logger: run.logger,
        }),
      );
      const deadLetterPath = join(dir.path, 'sq-dead.jsonl');
      const store = sqliteDedupe({ path: join(dir.path, 'sq-dedupe.db') });
      const consumer = consumerFor(source, store, secret, run, deadLetterPath);
      try {
        await consumer.start();
        await until(
          () => {
            feeder.check();
            return run.handled >= EVENTS * 0.3;
          },
          { timeoutMs: timeout(30_000, 120_000) },
        );

        down = true;
        await azurite.pause();
        const downAt = Date.now();
        const handledAtDown = run.handled;
        await sleep(downAt + DOWN_MS - Date.now());
        const receiveErrorsWhileDown = source.between('receive-error', downAt, Date.now()).length;
        await azurite.resume();
        const upAt = Date.now();
        down = false;

        await until(
          () => {
            feeder.check();
            return run.handled === EVENTS;
          },
          {
            timeoutMs: timeout(60_000, 180_000),
            describe: () => `${run.handled} of ${EVENTS} handled`,
          },
        );
        const drainedAt = Date.now();
        await until(async () => (await storageQueueCount(queue)) === 0, {
          timeoutMs: 30_000,
          intervalMs: 50,
        });
        expect(consumer.status.state).toBe('running');

        const recovered = source.firstAfter('receive-ok', upAt);
        const figures: OutageFigures & Record<string, unknown> = {
          dependency: 'storage queue emulator (Azurite SIGTERM, restarted from disk on the same port)',
          queue: 'storage-queue (azurite)',
          dedupe: 'sqlite',
          events: EVENTS,
          outage_ms: upAt - downAt,
          handled_before_outage: handledAtDown,
          handled: ids.filter((id) => run.runs.has(id)).length,
          lost: ids.filter((id) => !run.runs.has(id)).length,
          repeated_runs: run.repeats,
          dead_letters: run.dead(),
          acks_applied_while_down: source.between('settle-ok', downAt + GRACE_MS, upAt - 1, 'ack').length,
          acks_failed: source.log.filter((o) => o.kind === 'settle-error').length,
          receive_errors_while_down: receiveErrorsWhileDown,
          detected_ms: null,
          recovery_ms: recovered ? recovered.t - upAt : null,
          drain_ms: drainedAt - upAt,
        };
        const scan = scanOutputs(secret, run, deadLetterPath);
        report('outage-storage-queue', { ...figures, ...scan.figures });

        expect(figures.acks_applied_while_down).toBe(0);
        expect(figures.lost).toBe(0);
        expect(figures.dead_letters).toBe(0);
        expect(figures.repeated_runs).toBe(0);
        expect(scan.hits).toEqual([]);
      } finally {
        await feeder.stop();
        await consumer.stop();
        await azurite.stop();
      }
    },
    timeout(60_000, 300_000),
  );
});

function consumerFor<M extends RawMessage>(
  source: SourceAdapter<M>,
  dedupe: DedupeStore,
  secret: string,
  run: Run,
  deadLetterPath: string,
) {
  const consumer = createConsumer<M>({
    source,
    secrets: [{ id: 'current', secret }],
    dedupe,
    deadLetter: deadLetterPath,
    logger: run.logger,
    concurrency: CONCURRENCY,
    retry: RETRY,
    onSettled: run.onSettled,
  });
  consumer.on('*', run.handler);
  return consumer;
}
