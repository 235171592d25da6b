/**
 * The crash scenario: a worker process consumes N signed events and 1 % forgeries from a real
 * queue (published as a stream: at most BACKLOG wait at any time) and is SIGKILLed K times at
 * random points (seeded), each time restarted at once; the last incarnation runs until every
 * event was handled and the queue is empty, then stops with SIGTERM.
 *
 * Kill points: K thresholds drawn uniformly from 2–98 % of N (sorted; two close thresholds kill a
 * worker that is still starting). Once the distinct handled count reaches a threshold, the kill
 * comes after a further random 0–20 ms, so it lands anywhere in receive → claim → handler →
 * complete → ack.
 *
 * A repeated handler run can only come from the crash window: an event whose handler had
 * written its line when the process died, before `complete` was committed (or before the ack,
 * with the dedupe record lost). So repeats ≤ kills × concurrency.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { QueueServiceClient } from '@azure/storage-queue';
import { createQueue, sqsCounts } from '../../support/fauxqs.js';
import { HandledLog, tail, WorkerProcess } from './processes.js';
import { FULL, percentile, randomInt, rng } from './profile.js';
import {
  envelopeFor,
  eventIds,
  feed,
  sendToSqs,
  sendToStorageQueue,
  storageQueueCount,
  until,
} from './queues.js';
import { SecretScan, suiteSecret } from './secrets.js';
import type { SidecarConfig } from './worker.js';

export interface CrashEnvironment {
  readonly sqs?: { readonly client: SQSClient; readonly endpoint: string };
  readonly azurite?: { readonly connectionString: string; readonly service: QueueServiceClient };
  readonly redisUrl?: string;
}

export interface CrashOptions {
  readonly queue: 'sqs' | 'storage-queue';
  readonly dedupe: 'sqlite' | 'redis';
  readonly events: number;
  readonly kills: number;
  readonly concurrency: number;
  readonly seed: number;
  /** How long the last incarnation may take to finish everything. */
  readonly finishTimeoutMs: number;
}

export interface CrashResult {
  readonly figures: {
    readonly queue: string;
    readonly dedupe: string;
    readonly events: number;
    readonly kills: number;
    readonly concurrency: number;
    readonly handler_runs: number;
    readonly handled_distinct: number;
    readonly lost: number;
    readonly unexpected_ids: number;
    readonly forged_sent: number;
    readonly forged_accepted: number;
    readonly forged_dead_lettered: number;
    readonly valid_dead_lettered: number;
    readonly repeated_runs: number;
    readonly repeat_bound: number;
    readonly max_runs_of_one_event: number;
    readonly dead_letter_records: number;
    readonly kills_before_first_handled: number;
    readonly restart_to_first_handled_ms: { readonly median: number; readonly max: number };
    readonly last_kill_to_done_ms: number;
    readonly duration_s: number;
    readonly final_exit_code: number | null;
  };
  readonly killedAt: readonly number[];
  readonly scan: SecretScan;
  readonly logTail: string;
}

/** Short, so a crashed worker's messages come back soon (1 s in the small profile: bounded time). */
const VISIBILITY_SECONDS = FULL ? 2 : 1;
const LEASE_MS = VISIBILITY_SECONDS * 1000;
/**
 * Events waiting in the queue at most: a stream, not one big backlog (that is the overload
 * suite). Azurite slows down with depth (~500 messages/s with 100 waiting, ~80/s with 3,000).
 */
const BACKLOG = 200;
/** No new handled line for this long: ask whether the broker still answers. */
const STALL_MS = 20_000;

export async function runCrash(options: CrashOptions, env: CrashEnvironment): Promise<CrashResult> {
  const dir = mkdtempSync(join(tmpdir(), 'phe-crash-'));
  const random = rng(options.seed);
  const label = `${options.queue}-${options.dedupe}`;
  const secret = suiteSecret(`crash-${label}`);
  const ids = eventIds(`evt-crash-${label}-${options.seed.toString(36)}`, options.events);
  const expected = new Set(ids);
  const bodies = ids.map((id) => envelopeFor(id, secret));
  // Forgeries in the stream (1 %, at random places): they must end in the dead letters, never
  // in a handler, crashes or not.
  const forgedIds = eventIds(`forged-crash-${label}`, Math.max(3, Math.round(options.events / 100)));
  for (const id of forgedIds) {
    bodies.splice(randomInt(random, 0, bodies.length), 0, envelopeFor(id, 'an-attacker-guess'));
  }
  const paths = {
    handled: join(dir, 'handled.log'),
    deadLetters: join(dir, 'dead.jsonl'),
    log: join(dir, 'worker.log'),
    sqlite: join(dir, 'dedupe.db'),
    stats: join(dir, 'stats.jsonl'),
  };

  let source: SidecarConfig['source'];
  let isEmpty: () => Promise<boolean>;
  /** The broker's view, for failure messages: answered within 5 s, or not. */
  let probe: () => Promise<string>;
  let send: (batch: string[]) => Promise<void>;
  if (options.queue === 'sqs') {
    const sqs = env.sqs;
    if (!sqs) throw new Error('the SQS crash scenario needs fauxqs');
    const queue = await createQueue(sqs.client, 'crash');
    send = (batch) => sendToSqs(sqs.client, queue.url, batch);
    source = {
      kind: 'sqs',
      queueUrl: queue.url,
      endpoint: sqs.endpoint,
      visibilitySeconds: VISIBILITY_SECONDS,
    };
    isEmpty = async () => {
      const c = await sqsCounts(sqs.client, queue.url);
      return c.visible + c.inFlight + c.delayed === 0;
    };
    probe = async () => JSON.stringify(await sqsCounts(sqs.client, queue.url));
  } else {
    const azurite = env.azurite;
    if (!azurite) throw new Error('the Storage Queue crash scenario needs Azurite');
    const queueName = `crash-${options.dedupe}-${options.seed.toString(36)}`.slice(0, 63);
    const queue = azurite.service.getQueueClient(queueName);
    await queue.create();
    send = (batch) => sendToStorageQueue(queue, batch);
    source = {
      kind: 'storage-queue',
      connectionString: azurite.connectionString,
      queueName,
      visibilitySeconds: VISIBILITY_SECONDS,
    };
    isEmpty = async () => (await storageQueueCount(queue)) === 0;
    probe = async () =>
      `${(await queue.getProperties({ abortSignal: AbortSignal.timeout(5000) })).approximateMessagesCount} messages`;
  }
  if (options.dedupe === 'redis' && !env.redisUrl)
    throw new Error('the Redis crash scenario needs redis-server');

  const baseConfig: Omit<SidecarConfig, 'seed'> = {
    source,
    dedupe: options.dedupe === 'redis' ? (env.redisUrl as string) : `sqlite:${paths.sqlite}`,
    redisPrefix: `crash-${label}-${options.seed}`,
    handledPath: paths.handled,
    deadLetterPath: paths.deadLetters,
    statsPath: paths.stats,
    statsIntervalMs: 1000,
    concurrency: options.concurrency,
    leaseMs: LEASE_MS,
    // Every kill abandons the claims in flight, on purpose; an event caught by three kills
    // would be dead-lettered as HANDLER_ABANDONED (tested in test/cli.test.ts), not handled.
    maxAbandonedClaims: 0,
    handlerDelayMs: [0, 4],
    // A forgery is retried twice (SIGNATURE_MISMATCH may be a rotation lag), then dead-lettered.
    // IN_PROGRESS retries, the only ones valid events see, never count towards it.
    retry: { maxAttempts: 3, baseDelayMs: 100, maxDelayMs: 1000 },
  };
  /** What a timeout reports: progress, the worker's last stats and log lines, the broker's answer. */
  const diagnose = async (what: string) => {
    const answer = await probe().then(
      (text) => `queue: ${text}`,
      (error: unknown) => `queue did not answer: ${(error as Error).message}`,
    );
    return `${what}; sent ${feeder.sent()}; ${answer}\nworker stats: ${tail(paths.stats, 3)}\n${tail(paths.log, 8)}`;
  };
  // Fail fast, and say why, when the broker itself stops answering (Azurite's extent sweep did,
  // for minutes: docs/reliability.md, "Emulator limits met on the way").
  let lastLines = 0;
  let lastProgressAt = Date.now();
  const stallCheck = async () => {
    if (log.lines !== lastLines) {
      lastLines = log.lines;
      lastProgressAt = Date.now();
      return;
    }
    if (Date.now() - lastProgressAt < STALL_MS) return;
    const answered = await probe().then(
      () => true,
      () => false,
    );
    if (!answered) {
      throw new Error(
        await diagnose(
          `no progress for ${STALL_MS / 1000} s and the ${options.queue} emulator does not answer`,
        ),
      );
    }
    lastProgressAt = Date.now() - STALL_MS / 2; // it answers: look again in a while
  };
  const thresholds = Array.from({ length: options.kills }, () =>
    randomInt(random, Math.floor(options.events * 0.02), Math.floor(options.events * 0.98)),
  ).sort((a, b) => a - b);

  const log = new HandledLog(paths.handled);
  // Forgeries are never handled: count them as consumed, or the feeder would wait for them forever.
  const feeder = feed({
    bodies,
    backlog: BACKLOG,
    send,
    handled: () => log.refresh().unique + forgedIds.length,
  });
  const started = Date.now();
  const restartToFirst: number[] = [];
  const killedAt: number[] = [];
  let killsBeforeFirstHandled = 0;
  let lastKillAt = started;
  let incarnation = 0;
  let current: WorkerProcess | undefined;
  /**
   * Starts the next incarnation and polls every `intervalMs` until `target` distinct events are
   * handled (the crash loop and the last run watch a worker alike); notes its restart-to-first time.
   */
  const runUntil = async (target: number, intervalMs: number) => {
    const worker = await WorkerProcess.start(
      { ...baseConfig, seed: options.seed + incarnation++ },
      { secret, logPath: paths.log },
    );
    current = worker;
    const linesAtStart = log.refresh().lines;
    let firstSeen = false;
    await until(
      async () => {
        log.refresh();
        await stallCheck();
        if (!firstSeen && log.lines > linesAtStart) {
          firstSeen = true;
          restartToFirst.push(Date.now() - worker.startedAt);
        }
        if (!worker.running) throw new Error(`worker ${worker.pid} exited by itself:\n${tail(paths.log)}`);
        feeder.check();
        return log.unique >= target;
      },
      {
        timeoutMs: options.finishTimeoutMs,
        intervalMs,
        describe: () => diagnose(`${log.unique} of ${target} handled`),
      },
    );
    return { worker, linesAtStart, firstSeen };
  };

  try {
    for (const threshold of thresholds) {
      const { worker, linesAtStart, firstSeen } = await runUntil(threshold, 5);
      const jitter = randomInt(random, 0, 20);
      if (jitter > 0) await new Promise((resolve) => setTimeout(resolve, jitter));
      await worker.kill();
      lastKillAt = Date.now();
      log.refresh();
      if (!firstSeen && log.lines === linesAtStart) killsBeforeFirstHandled++;
      killedAt.push(log.unique);
    }

    const { worker: last } = await runUntil(expected.size, 10);
    const doneAt = Date.now();
    // Acks are batched after the handler: wait until the broker holds nothing any more.
    await until(isEmpty, { timeoutMs: 30_000, intervalMs: 50, describe: () => diagnose('queue not empty') });
    const exit = await last.stop();
    log.refresh();

    const scan = new SecretScan([secret]);
    scan.scanFile('worker logs', paths.log);
    scan.scanFile('dead letters', paths.deadLetters);
    // Dead-letter records name the unsigned envelope copy of the id: enough to tell them apart here.
    let deadIds: string[] = [];
    try {
      deadIds = readFileSync(paths.deadLetters, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) =>
          String((JSON.parse((JSON.parse(line) as { raw: string }).raw) as { event_id: unknown }).event_id),
        );
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    const forged = new Set(forgedIds);
    const handledExpected = ids.filter((id) => log.counts.has(id)).length;
    return {
      figures: {
        queue: options.queue,
        dedupe: options.dedupe,
        events: options.events,
        kills: options.kills,
        concurrency: options.concurrency,
        handler_runs: log.lines,
        handled_distinct: log.unique,
        lost: options.events - handledExpected,
        unexpected_ids: [...log.counts.keys()].filter((id) => !expected.has(id) && !forged.has(id)).length,
        forged_sent: forgedIds.length,
        forged_accepted: forgedIds.filter((id) => log.counts.has(id)).length,
        forged_dead_lettered: new Set(deadIds.filter((id) => forged.has(id))).size,
        valid_dead_lettered: deadIds.filter((id) => !forged.has(id)).length,
        repeated_runs: log.repeats,
        repeat_bound: options.kills * options.concurrency,
        max_runs_of_one_event: Math.max(0, ...log.counts.values()),
        dead_letter_records: deadIds.length,
        kills_before_first_handled: killsBeforeFirstHandled,
        restart_to_first_handled_ms: {
          median: percentile(restartToFirst, 50),
          max: percentile(restartToFirst, 100),
        },
        last_kill_to_done_ms: doneAt - lastKillAt,
        duration_s: Math.round((Date.now() - started) / 100) / 10,
        final_exit_code: exit.code,
      },
      killedAt,
      scan,
      logTail: tail(paths.log),
    };
  } finally {
    await feeder.stop();
    await current?.kill(); // a failed run leaves no worker behind (a stopped one is left alone)
    rmSync(dir, { recursive: true, force: true });
  }
}
