/**
 * `npm run bench:sqs` — the SQS adapter beside sqs-consumer, on the same fauxqs, in one run.
 *
 *   ours         = SqsAdapter + createConsumer: parse, age, HMAC, parse, claim + complete in SQLite
 *                  (temp dir), zod, no-op handler, batched deletes; tried at several concurrencies
 *   sqs-consumer = Consumer.create({ batchSize: 10, handleMessage: async (m) => m }): no
 *                  verification, one DeleteMessage per message. (v14 deletes only what the handler
 *                  returns: `async () => {}` would acknowledge nothing.)
 *
 * Each run gets a fresh queue preloaded (untimed) with the same N signed envelopes; the clock
 * runs from start() until the last message is deleted. fauxqs runs in a child process by
 * default, as a real broker is remote: `--server in-process` puts it on this process's CPU.
 *
 *   npm run bench:sqs
 *   npm run bench:sqs -- --n 2000 --reps 1 --concurrency 32,64
 *   npm run bench:sqs -- --server in-process
 *   npm run bench:sqs -- --latency-ms 10    (each SQS call waits 10 ms first, as a remote SQS does)
 *
 * The last contender is ours at the highest concurrency with one ReceiveMessage at a time
 * (`maxConcurrentReceives: 1`, the behaviour before several pollers): the baseline for them.
 *
 * Prints a table, then one JSON line with every figure (the last line of output).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import type { SQSClient } from '@aws-sdk/client-sqs';
import { Consumer as SqsConsumer } from 'sqs-consumer';
import { createSqsAdapter, type SqsMessage } from '../adapters/sqs/index.js';
import { createConsumer } from '../src/consumer/consumer.js';
import { silentLogger } from '../src/core/logger.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { fauxqsClient, startFauxqs } from '../test/support/fauxqs.js';
import { preloadedQueue, startFauxqsChild } from './fauxqs.js';
import { EVENT_TYPE, makeEnvelopes, OUR_SECRET } from './fixtures.js';
import { fmtFixed, fmtInt, median, sig, table } from './stats.js';

/** Ours at its best concurrency ÷ sqs-consumer (issue 15, item 5). */
const SQS_GOAL = 2.5;

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '5000' },
    bytes: { type: 'string', default: '300' },
    reps: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '16,32,64,128' },
    server: { type: 'string', default: 'child' },
    'latency-ms': { type: 'string', default: '0' },
  },
});

await main();

interface RunResult {
  readonly eventsPerSec: number;
  /** CPU time of this process (user + system) per event, µs: what the consumer costs. */
  readonly cpuUsPerEvent: number;
  /** SQS requests per 1,000 events, by command. */
  readonly callsPer1000: Record<string, number>;
}

interface Contender {
  readonly label: string;
  readonly concurrency: number | null;
  readonly run: (queueUrl: string, n: number) => Promise<Omit<RunResult, 'callsPer1000' | 'cpuUsPerEvent'>>;
}

async function main(): Promise<void> {
  const n = Number(values.n);
  const bytes = Number(values.bytes);
  const reps = Number(values.reps);
  const levels = values.concurrency.split(',').map((c) => Number(c.trim()));
  const inProcess = values.server === 'in-process';
  const latencyMs = Number(values['latency-ms']);
  const cpu = cpus()[0]?.model ?? 'unknown cpu';
  console.log(
    `partner-health-events bench:sqs — node ${process.version}, ${availableParallelism()} cpu (${cpu}), ` +
      `fauxqs ${inProcess ? 'in this process' : 'in a child process'}` +
      (latencyMs > 0 ? `, ${latencyMs} ms added to every SQS call` : ''),
  );
  console.log(
    `${fmtInt(n)} signed events of ${bytes} B bodies per run, ${reps} rep(s), fresh queue per run\n`,
  );

  const server = inProcess ? await startFauxqs() : await startFauxqsChild();
  const calls = new Map<string, number>();
  const client = (): SQSClient => {
    const c = fauxqsClient(server.endpoint);
    c.middlewareStack.add(
      (next, context) => async (args) => {
        const name = (context.commandName ?? 'unknown').replace(/Command$/, '');
        calls.set(name, (calls.get(name) ?? 0) + 1);
        if (latencyMs > 0) await sleep(latencyMs);
        return next(args);
      },
      { step: 'initialize', name: 'countCalls' },
    );
    return c;
  };
  const loader = fauxqsClient(server.endpoint);

  const contenders: Contender[] = [
    { label: 'sqs-consumer', concurrency: null, run: (url, count) => runSqsConsumer(client(), url, count) },
    ...levels.map((c) => ({
      label: `ours c=${c}`,
      concurrency: c,
      run: (url: string, count: number) => runOurs(client(), url, count, c),
    })),
    {
      label: `ours c=${Math.max(...levels)} 1 poll`,
      concurrency: Math.max(...levels),
      run: (url: string, count: number) => runOurs(client(), url, count, Math.max(...levels), 1),
    },
  ];

  /** One measured run of `contender` over the first `count` envelopes. */
  const measure = async (contender: Contender, count: number): Promise<RunResult> => {
    // Signed now, not once at the start: a long run on a loaded machine would age them past the
    // 300 s limit (every event dead as TIMESTAMP_TOO_OLD).
    const queue = await preloadedQueue(loader, 'bench', makeEnvelopes(bytes, count));
    calls.clear();
    const cpuBefore = process.cpuUsage();
    const { eventsPerSec } = await contender.run(queue.url, count);
    const cpuUsed = process.cpuUsage(cpuBefore);
    const callsPer1000: Record<string, number> = {};
    for (const [name, k] of calls) callsPer1000[name] = sig((k * 1000) / count, 3);
    return { eventsPerSec, cpuUsPerEvent: (cpuUsed.user + cpuUsed.system) / count, callsPer1000 };
  };

  // Warm-up (JIT, connections, SQLite), untimed.
  for (const c of contenders) await measure(c, Math.min(n, 1000));

  const results = new Map<string, RunResult[]>(contenders.map((c) => [c.label, []]));
  for (let rep = 0; rep < reps; rep++) {
    // Rotate the order each rep so no contender always runs first or last.
    const order = contenders.map((_, i) => contenders[(i + rep) % contenders.length] as Contender);
    for (const c of order) {
      const r = await measure(c, n);
      results.get(c.label)?.push(r);
      console.log(`  rep ${rep + 1}  ${c.label.padEnd(13)} ${fmtInt(r.eventsPerSec).padStart(7)} ev/s`);
    }
  }
  loader.destroy();
  await server.close();

  // Ratios are paired per rep (ours ÷ the sqs-consumer run of the same rep), then the median is
  // taken: a shared machine's load drifts between reps more than within one.
  const baselineRuns = results.get('sqs-consumer') ?? [];
  const summary = contenders.map((c) => {
    const runs = results.get(c.label) ?? [];
    const last = runs[runs.length - 1];
    return {
      label: c.label,
      concurrency: c.concurrency,
      eventsPerSec: median(runs.map((r) => r.eventsPerSec)),
      runs: runs.map((r) => Math.round(r.eventsPerSec)),
      ratio: median(runs.map((r, i) => r.eventsPerSec / (baselineRuns[i]?.eventsPerSec ?? Number.NaN))),
      cpuUsPerEvent: median(runs.map((r) => r.cpuUsPerEvent)),
      callsPer1000: last?.callsPer1000 ?? {},
    };
  });
  const onePoll = summary.at(-1) as (typeof summary)[0];
  const ours = summary.slice(1, -1);
  const atMax = ours.find((o) => o.concurrency === onePoll.concurrency) ?? onePoll;
  const pollersGain = atMax.eventsPerSec / onePoll.eventsPerSec;
  const best = ours.reduce((a, b) => (b.ratio > a.ratio ? b : a), ours[0] as (typeof ours)[0]);
  const atDefault = ours.find((o) => o.concurrency === 16) ?? best;

  console.log('');
  const rows: string[][] = [
    ['consumer', 'ev/s (median)', 'runs', 'CPU µs/ev', 'SQS calls / 1000 ev', '÷ sqs-consumer'],
  ];
  for (const s of summary) {
    rows.push([
      s.label,
      fmtInt(s.eventsPerSec),
      s.runs.map(fmtInt).join(' / '),
      fmtFixed(s.cpuUsPerEvent, 0),
      Object.entries(s.callsPer1000)
        .map(([k, v]) => `${k} ${v}`)
        .join(', '),
      `${fmtFixed(s.ratio, 2)}×`,
    ]);
  }
  console.log(table(rows));
  const load = loadavg().map((l) => sig(l, 3));
  console.log(
    `\nratio ours ÷ sqs-consumer (median of per-rep ratios): ${fmtFixed(atDefault.ratio, 2)}× at the ` +
      `default concurrency (16), ${fmtFixed(best.ratio, 2)}× at the best (${best.label}); ` +
      `goal ≥ ${SQS_GOAL} at the best: ${best.ratio >= SQS_GOAL ? 'met' : 'BELOW GOAL'}\n` +
      `several ReceiveMessage at once: ${fmtFixed(pollersGain, 2)}× the throughput of one at a time ` +
      `(${atMax.label} ÷ ${onePoll.label})\n` +
      `load average at the end: ${load.join(' ')} on ${availableParallelism()} cpus`,
  );
  console.log(
    JSON.stringify({
      bench: 'sqs',
      node: process.version,
      cpus: availableParallelism(),
      server: inProcess ? 'in-process' : 'child-process',
      n,
      body_bytes: bytes,
      reps,
      results: summary.map((s) => ({
        consumer: s.label,
        concurrency: s.concurrency,
        events_per_sec: sig(s.eventsPerSec),
        runs: s.runs,
        ratio: sig(s.ratio, 3),
        cpu_us_per_event: sig(s.cpuUsPerEvent, 3),
        calls_per_1000: s.callsPer1000,
      })),
      ratio_default: sig(atDefault.ratio, 3),
      ratio_best: sig(best.ratio, 3),
      best: best.label,
      latency_ms: latencyMs,
      pollers_gain: sig(pollersGain, 3),
      load_average: load,
    }),
  );
}

async function runOurs(
  client: SQSClient,
  queueUrl: string,
  n: number,
  concurrency: number,
  maxConcurrentReceives?: number,
) {
  const dir = mkdtempSync(join(tmpdir(), 'phe-bench-sqs-'));
  let handled = 0;
  let firstOther: string | undefined;
  let done!: () => void;
  const finished = new Promise<void>((resolve) => {
    done = resolve;
  });
  let settled = 0;
  const consumer = createConsumer<SqsMessage>({
    source: createSqsAdapter({
      queueUrl,
      client,
      ...(maxConcurrentReceives ? { maxConcurrentReceives } : {}),
    }),
    secrets: [{ id: 'current', secret: OUR_SECRET }],
    dedupe: createSqliteDedupe({ path: join(dir, 'dedupe.sqlite') }),
    deadLetter: join(dir, 'dead-letters.jsonl'),
    logger: silentLogger(),
    concurrency,
    onSettled: (r) => {
      if (r.outcome.kind === 'ack' && r.outcome.result === 'handled') handled++;
      else firstOther ??= JSON.stringify(r.outcome);
      if (++settled === n) done();
    },
  });
  consumer.on(EVENT_TYPE, () => {});
  const started = performance.now();
  await consumer.start();
  await finished;
  const elapsed = performance.now() - started;
  await consumer.stop();
  client.destroy();
  rmSync(dir, { recursive: true, force: true });
  if (handled !== n) throw new Error(`ours handled ${handled} of ${n}; e.g. ${firstOther}`);
  return { eventsPerSec: (n * 1000) / elapsed };
}

async function runSqsConsumer(client: SQSClient, queueUrl: string, n: number) {
  let processed = 0;
  let errors = 0;
  let done!: () => void;
  const finished = new Promise<void>((resolve) => {
    done = resolve;
  });
  const consumer = SqsConsumer.create({
    queueUrl,
    sqs: client,
    batchSize: 10,
    handleMessage: async (message) => message,
  });
  consumer.on('message_processed', () => {
    if (++processed === n) done();
  });
  consumer.on('error', () => errors++);
  consumer.on('processing_error', () => errors++);
  const started = performance.now();
  consumer.start();
  await finished;
  const elapsed = performance.now() - started;
  consumer.stop({ abort: true });
  client.destroy();
  if (errors > 0) throw new Error(`sqs-consumer reported ${errors} errors`);
  return { eventsPerSec: (n * 1000) / elapsed };
}
