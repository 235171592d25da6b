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
import { describe, expect, it } from 'vitest';
import { createSqsAdapter } from '../../adapters/sqs/index.js';
import { createStorageQueueAdapter } from '../../adapters/storage-queue/index.js';
import { createConsumer, type SettledReport } from '../../src/consumer/consumer.js';
import { createLogger } from '../../src/core/logger.js';
import type { RawMessage, SourceAdapter } from '../../src/core/source-adapter.js';
import { createRedisDedupe } from '../../src/dedupe/redis.js';
import { createSqliteDedupe } from '../../src/dedupe/sqlite.js';
import type { DedupeStore } from '../../src/dedupe/types.js';
import { Azurite } from '../support/azurite.js';
import { createQueue, fauxqsClient } from '../support/fauxqs.js';
import { HAS_REDIS, RedisServer } from '../support/redis-server.js';
import { fauxqsPerFile } from './support/fauxqs-per-file.js';
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

/** fauxqs for the SQS-fed scenarios; its `client` is the direct one (never behind a fault). */
const sqs = fauxqsPerFile('phe-outage-');

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

/** What a figure line says the outage was about. */
interface Labels {
  readonly dependency: string;
  readonly queue: string;
  readonly dedupe?: string;
}

/** One scenario's labels, secret, recorder and files, all named after it (its seed too). */
interface Scenario {
  readonly name: string;
  readonly labels: Labels;
  readonly secret: string;
  readonly run: Run;
  readonly deadLetterPath: string;
  readonly sqlitePath: string;
}

function scenario(name: string, labels: Labels): Scenario {
  return {
    name,
    labels,
    secret: suiteSecret(`outage-${name}`),
    run: new Run(seedFor(`outage-${name}`)),
    deadLetterPath: join(sqs.dir, `${name}-dead.jsonl`),
    sqlitePath: join(sqs.dir, `${name}-dedupe.db`),
  };
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

/** When the dependency went, was noticed gone, came back, was first used again, and all was handled. */
interface OutageTimes {
  readonly downAt: number;
  readonly detectedAt: number | undefined;
  readonly upAt: number;
  readonly recoveredAt: number | undefined;
  readonly drainedAt: number;
}

/**
 * The figures every outage reports (labels first, then the accounting, the scenario's own, and
 * the times), so each scenario only states what is particular to it.
 */
function outageFigures<Own extends Record<string, unknown>>(
  s: Scenario,
  ids: readonly string[],
  times: OutageTimes,
  own: Own,
): OutageFigures & Own {
  const { run } = s;
  return {
    ...s.labels,
    events: EVENTS,
    outage_ms: times.upAt - times.downAt,
    handled: ids.filter((id) => run.runs.has(id)).length,
    lost: ids.filter((id) => !run.runs.has(id)).length,
    repeated_runs: run.repeats,
    dead_letters: run.dead(),
    ...own,
    detected_ms: times.detectedAt === undefined ? null : times.detectedAt - times.downAt,
    recovery_ms: times.recoveredAt === undefined ? null : times.recoveredAt - times.upAt,
    drain_ms: times.drainedAt - times.upAt,
  };
}

/** Scans what the scenario wrote for its secret and prints its figure line with the scan's. */
function reportOutage(s: Scenario, figures: OutageFigures): SecretScan {
  const scan = new SecretScan([s.secret]);
  scan.scan('consumer logs', s.run.logLines.join(''));
  for (const { report } of s.run.reports) {
    if (report.outcome.kind !== 'ack') scan.scan('outcome reasons', report.outcome.reason);
  }
  scan.scanFile('dead letters', s.deadLetterPath);
  report(`outage-${s.name}`, { ...figures, ...scan.figures });
  return scan;
}

/** What every outage must end with, whatever the dependency: nothing lost, dead-lettered, re-run or leaked. */
function expectNothingLost(figures: OutageFigures, scan: SecretScan): void {
  expect(figures.lost).toBe(0);
  expect(figures.dead_letters).toBe(0);
  expect(figures.repeated_runs).toBe(0);
  expect(scan.hits).toEqual([]);
}

/** The SQS adapter of the SQS-fed scenarios, through `client` (direct, or behind the proxy). */
function sqsSource(queueUrl: string, client: SQSClient, run: Run) {
  return new ObservedSource(
    createSqsAdapter({
      queueUrl,
      client,
      waitTimeSeconds: 1,
      visibilityTimeoutSeconds: VISIBILITY_SECONDS,
      logger: run.logger,
    }),
  );
}

/**
 * Publishes the scenario's events to SQS over SPAN_MS, directly (the publisher is never behind
 * the fault); resolves once a quarter of them are out, when the outage starts.
 */
async function publishToSqs(s: Scenario, queueUrl: string) {
  const ids = eventIds(`evt-outage-${s.name}`, EVENTS);
  const bodies = ids.map((id) => envelopeFor(id, s.secret));
  const production = producer((b) => sendToSqs(sqs.client, queueUrl, b), bodies, SPAN_MS);
  await until(() => production.sent >= EVENTS / 4, { timeoutMs: 30_000 });
  return { ids, production };
}

/**
 * Takes a dependency away for DOWN_MS (from `stop` returning to `restart` being called), waiting
 * meanwhile until the consumer shows it `detected` the fault (within `detectMs`).
 */
async function outage(fault: {
  readonly stop: () => Promise<void>;
  readonly detected: () => boolean;
  readonly detectMs: number;
  readonly restart: () => Promise<void>;
}): Promise<{ downAt: number; detectedAt: number; upAt: number }> {
  await fault.stop();
  const downAt = Date.now();
  await until(fault.detected, { timeoutMs: fault.detectMs });
  const detectedAt = Date.now();
  await sleep(downAt + DOWN_MS - Date.now());
  await fault.restart();
  return { downAt, detectedAt, upAt: Date.now() };
}

/**
 * Waits until every event was handled (`check` throws a publisher's failure), then until the
 * queue holds nothing (acks are batched); returns when the last event was handled.
 */
async function drain(
  run: Run,
  isEmpty: () => Promise<boolean>,
  timeoutMs: number,
  check?: () => void,
): Promise<number> {
  await until(
    () => {
      check?.();
      return run.handled === EVENTS;
    },
    { timeoutMs, describe: () => `${run.handled} of ${EVENTS} handled` },
  );
  const drainedAt = Date.now();
  await until(isEmpty, { timeoutMs: 30_000, intervalMs: 50 });
  return drainedAt;
}

describe('outages: a dependency goes away mid-stream and comes back', () => {
  it.skipIf(!HAS_REDIS)(
    `Redis dedupe store killed for ${DOWN_MS / 1000}s: no handler starts while it is down, nothing lost`,
    async () => {
      const redis = await RedisServer.start();
      const s = scenario('redis', {
        dependency: 'redis dedupe (SIGKILL, restarted empty)',
        queue: 'sqs (fauxqs)',
      });
      const { run } = s;
      const queue = await createQueue(sqs.client, 'outage-redis');
      const source = sqsSource(queue.url, fauxqsClient(sqs.endpoint), run);
      const store = createRedisDedupe({ url: redis.url, prefix: 'outage', logger: run.logger });
      const consumer = consumerFor(source, store, s);
      try {
        await consumer.start();
        const { ids, production } = await publishToSqs(s, queue.url);

        let statusWhileDown = consumer.status;
        const { downAt, detectedAt, upAt } = await outage({
          stop: () => redis.pause(),
          detected: () => !consumer.status.dedupeAvailable,
          detectMs: DOWN_MS,
          restart: async () => {
            statusWhileDown = consumer.status;
            await redis.resume();
          },
        });

        await production.done;
        const drainedAt = await drain(run, () => sqsEmpty(sqs.client, queue.url), timeout(30_000, 120_000));
        expect(consumer.status.dedupeAvailable).toBe(true);
        expect(consumer.status.state).toBe('running');

        const times = { downAt, detectedAt, upAt, recoveredAt: run.firstStartAfter(upAt), drainedAt };
        const figures = outageFigures(s, ids, times, {
          handler_starts_while_down: run.startsBetween(downAt + GRACE_MS, upAt),
          acks_while_down: source.between('settle-ok', downAt, upAt, 'ack').length,
          acks_while_down_without_handler_before_outage: run.acksWithoutHandlerBefore(
            downAt + GRACE_MS,
            upAt,
          ),
          retries_while_down: run.reports.filter(
            ({ t, report }) => t > downAt && t < upAt && report.outcome.kind === 'retry',
          ).length,
        });
        const scan = reportOutage(s, figures);

        expect(statusWhileDown.dedupeAvailable).toBe(false);
        expect(figures.handler_starts_while_down).toBe(0);
        expect(figures.acks_while_down_without_handler_before_outage).toBe(0);
        expect(figures.acks_while_down).toBeLessThanOrEqual(CONCURRENCY);
        expectNothingLost(figures, scan);
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
      const port = Number(new URL(sqs.endpoint).port);
      const proxy = await TcpProxy.start({ host: '127.0.0.1', port });
      const s = scenario('sqs', {
        dependency: 'sqs endpoint (TCP reset, then refused; fauxqs keeps its state)',
        queue: 'sqs (fauxqs)',
        dedupe: 'sqlite',
      });
      const { run } = s;
      const queue = await createQueue(sqs.client, 'outage-sqs');
      const viaProxy = fauxqsClient(proxy.url);
      const source = sqsSource(queue.url, viaProxy, run);
      const consumer = consumerFor(source, createSqliteDedupe({ path: s.sqlitePath }), s);
      try {
        await consumer.start();
        const { ids, production } = await publishToSqs(s, queue.url);

        const { downAt, detectedAt, upAt } = await outage({
          stop: () => proxy.cut(),
          detected: () => consumer.status.lastReceiveError !== undefined,
          detectMs: DOWN_MS * 2,
          restart: () => proxy.restore(),
        });

        await production.done;
        const drainedAt = await drain(run, () => sqsEmpty(sqs.client, queue.url), timeout(30_000, 120_000));
        expect(consumer.status.lastReceiveError).toBeUndefined();
        expect(consumer.status.state).toBe('running');

        const recoveredAt = source.firstAfter('receive-ok', upAt)?.t;
        const times = { downAt, detectedAt, upAt, recoveredAt, drainedAt };
        const figures = outageFigures(s, ids, times, {
          acks_applied_while_down: source.between('settle-ok', downAt + GRACE_MS, upAt - 1, 'ack').length,
          acks_failed_while_down: source.between('settle-error', downAt, upAt, 'ack').length,
          receive_errors_while_down: source.between('receive-error', downAt, upAt).length,
          duplicates_acked_after: run.reports.filter(
            ({ t, report }) =>
              t > upAt && report.outcome.kind === 'ack' && report.outcome.result === 'duplicate',
          ).length,
        });
        const scan = reportOutage(s, figures);

        expect(figures.acks_applied_while_down).toBe(0);
        expect(figures.receive_errors_while_down).toBeGreaterThan(0);
        expectNothingLost(figures, scan);
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
      const azurite = await Azurite.start('queue', { persistent: true, withoutSweep: true });
      const s = scenario('storage-queue', {
        dependency: 'storage queue emulator (Azurite SIGTERM, restarted from disk on the same port)',
        queue: 'storage-queue (azurite)',
        dedupe: 'sqlite',
      });
      const { run } = s;
      const service = QueueServiceClient.fromConnectionString(azurite.connectionString);
      const queue = service.getQueueClient('outage');
      await queue.create();
      const ids = eventIds('evt-outage-sq', EVENTS);
      // A stream with at most 200 waiting (Azurite slows down with depth); none sent while it is down.
      let down = false;
      const feeder = feed({
        bodies: ids.map((id) => envelopeFor(id, s.secret)),
        backlog: 200,
        send: (batch) => sendToStorageQueue(queue, batch),
        handled: () => run.handled,
        paused: () => down,
      });
      // Configured as `run --source azure-storage-queue:NAME` does: the SDK's own retry policy.
      const source = new ObservedSource(
        createStorageQueueAdapter({
          queueName: 'outage',
          connectionString: azurite.connectionString,
          visibilityTimeoutSeconds: VISIBILITY_SECONDS,
          pollIntervalMs: 20,
          maxPollIntervalMs: 500,
          deadLetterQueue: false,
          logger: run.logger,
        }),
      );
      const consumer = consumerFor(source, createSqliteDedupe({ path: s.sqlitePath }), s);
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

        const drainedAt = await drain(
          run,
          async () => (await storageQueueCount(queue)) === 0,
          timeout(60_000, 180_000),
          feeder.check,
        );
        expect(consumer.status.state).toBe('running');

        const recoveredAt = source.firstAfter('receive-ok', upAt)?.t;
        const times = { downAt, detectedAt: undefined, upAt, recoveredAt, drainedAt };
        const figures = outageFigures(s, ids, times, {
          handled_before_outage: handledAtDown,
          acks_applied_while_down: source.between('settle-ok', downAt + GRACE_MS, upAt - 1, 'ack').length,
          acks_failed: source.log.filter((o) => o.kind === 'settle-error').length,
          receive_errors_while_down: receiveErrorsWhileDown,
        });
        const scan = reportOutage(s, figures);

        expect(figures.acks_applied_while_down).toBe(0);
        expectNothingLost(figures, scan);
      } finally {
        await feeder.stop();
        await consumer.stop();
        await azurite.stop();
      }
    },
    timeout(60_000, 300_000),
  );
});

function consumerFor<M extends RawMessage>(source: SourceAdapter<M>, dedupe: DedupeStore, s: Scenario) {
  const consumer = createConsumer<M>({
    source,
    secrets: [{ id: 'current', secret: s.secret }],
    dedupe,
    deadLetter: s.deadLetterPath,
    logger: s.run.logger,
    concurrency: CONCURRENCY,
    retry: RETRY,
    onSettled: s.run.onSettled,
  });
  consumer.on('*', s.run.handler);
  return consumer;
}
