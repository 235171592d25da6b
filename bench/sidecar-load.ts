/**
 * The sender of the ingress benches, in its own process: POSTs envelopes to an HTTP ingress over
 * `--connections` keep-alive connections (undici Pool, one request per connection at a time).
 *
 *   closed loop: every line of `--file` once, as fast as the answers come back
 *   open loop:   `--rate` new envelopes per second for `--warmup-seconds` (not counted), then
 *                for `--seconds`, signed as they go, whatever the answers; latency counts from
 *                the moment a request was due (a request that waits for a free connection waits
 *                on the clock), so a saturated ingress shows as latency, not as a lower rate
 *
 * Reports one JSON object over IPC (or stdout when run alone).
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { EVENT_TYPE, OUR_SECRET, rawDataFor } from './fixtures.js';

const { values } = parseArgs({
  options: {
    url: { type: 'string' },
    connections: { type: 'string', default: '64' },
    file: { type: 'string' },
    rate: { type: 'string' },
    seconds: { type: 'string', default: '30' },
    'warmup-seconds': { type: 'string', default: '0' },
    bytes: { type: 'string', default: '300' },
  },
});
if (!values.url) throw new Error('--url is required');
const url = new URL(values.url);
const connections = Number(values.connections);
const pool = new Pool(url.origin, { connections, pipelining: 1, headersTimeout: 120_000 });

export interface LoadReport {
  readonly sent: number;
  /** Answers by status (0: no answer, the connection failed). */
  readonly statuses: Readonly<Record<string, number>>;
  /** `code` of the 503 answers (BUSY, SHUTDOWN, a pipeline code). */
  readonly codes503: Readonly<Record<string, number>>;
  readonly elapsedMs: number;
  /** Open loop only: latency from due time to answer, ms. */
  readonly latencyMs?: { p50: number; p90: number; p99: number; max: number };
  /** Open loop only: most requests due but not yet answered at once. */
  readonly maxOutstanding?: number;
}

const statuses: Record<string, number> = {};
const codes503: Record<string, number> = {};

async function post(body: string, record = true): Promise<void> {
  let status = 0;
  try {
    const answer = await pool.request({
      path: `${url.pathname}${url.search}`,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    status = answer.statusCode;
    const text = await answer.body.text();
    if (status === 503 && record) {
      const code = (JSON.parse(text) as { code?: string }).code ?? '?';
      codes503[code] = (codes503[code] ?? 0) + 1;
    }
  } catch {
    status = 0;
  }
  if (record) statuses[status] = (statuses[status] ?? 0) + 1;
}

async function closedLoop(file: string): Promise<LoadReport> {
  const lines = readFileSync(file, 'utf8').split('\n').filter(Boolean);
  let next = 0;
  const started = performance.now();
  const worker = async () => {
    while (next < lines.length) await post(lines[next++] as string);
  };
  await Promise.all(Array.from({ length: connections }, worker));
  return { sent: lines.length, statuses, codes503, elapsedMs: performance.now() - started };
}

async function openLoop(
  rate: number,
  seconds: number,
  bytes: number,
  warmupSeconds: number,
): Promise<LoadReport> {
  const warmup = Math.round(rate * warmupSeconds);
  const total = warmup + Math.round(rate * seconds);
  const raw_data = rawDataFor(bytes);
  const sign = () => createTestEnvelope(EVENT_TYPE, { fields: { raw_data }, secret: OUR_SECRET }).raw;
  const latencies: number[] = [];
  let outstanding = 0;
  let maxOutstanding = 0;
  const inFlight: Promise<void>[] = [];
  const started = performance.now();
  const measuredFrom = started + warmupSeconds * 1000;
  let sent = 0;
  // Every millisecond or so, send what has come due; envelopes are signed as they go (fresh signed_at).
  while (sent < total) {
    const dueNow = Math.min(total, Math.floor(((performance.now() - started) / 1000) * rate));
    while (sent < dueNow) {
      const raw = sign();
      const due = started + (sent / rate) * 1000;
      const measured = sent >= warmup;
      // The parent reads the ingress's CPU time from here on.
      if (sent === warmup) process.send?.({ measuring: true });
      sent++;
      outstanding++;
      if (measured && outstanding > maxOutstanding) maxOutstanding = outstanding;
      inFlight.push(
        post(raw, measured).then(() => {
          outstanding--;
          if (measured) latencies.push(performance.now() - due);
        }),
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  await Promise.all(inFlight);
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
  return {
    sent: total - warmup,
    statuses,
    codes503,
    elapsedMs: performance.now() - measuredFrom,
    latencyMs: { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: latencies.at(-1) ?? 0 },
    maxOutstanding,
  };
}

const report = values.rate
  ? await openLoop(
      Number(values.rate),
      Number(values.seconds),
      Number(values.bytes),
      Number(values['warmup-seconds']),
    )
  : await closedLoop(values.file as string);
await pool.close();
if (process.send) process.send(report, () => process.exit(0));
else console.log(JSON.stringify(report));
