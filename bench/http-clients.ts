/**
 * Which HTTP client the forwarder uses, measured: 64 POSTs in flight of a 300 B body to an app in
 * its own process (bench/sidecar-app.ts, answers 200 "ok"), each answer's body read or
 * discarded; requests/s and the client process's CPU per request (process.cpuUsage).
 *
 *   fetch                     global fetch, redirect: 'manual', AbortSignal.timeout, arrayBuffer()
 *                             (what the forwarder used before)
 *   node:http agent           http.request on a keep-alive Agent (maxSockets 64), a signal and `timeout`
 *   undici Pool + any/timeout Pool.request with AbortSignal.any([signal, AbortSignal.timeout()])
 *   undici Pool (shipped)     Pool.request with the handler's signal; timeouts are the pool's own
 *                             timers (headersTimeout, bodyTimeout); body.dump()
 *
 *   npx tsx bench/http-clients.ts              3 rounds of 20,000 requests per client
 *   npx tsx bench/http-clients.ts --n 5000 --rounds 1
 */
import { fork } from 'node:child_process';
import http from 'node:http';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { fmtFixed, fmtInt, median, sig, table } from './stats.js';

const { values } = parseArgs({
  options: { n: { type: 'string', default: '20000' }, rounds: { type: 'string', default: '3' } },
});
const N = Number(values.n);
const ROUNDS = Number(values.rounds);
const IN_FLIGHT = 64;
const TIMEOUT_MS = 10_000;

const app = fork(fileURLToPath(new URL('./sidecar-app.ts', import.meta.url)), [], {
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
});
const port = await new Promise<number>((resolve) =>
  app.on('message', (m) => {
    const listening = (m as { listening?: number }).listening;
    if (listening) resolve(listening);
  }),
);
const url = new URL(`http://127.0.0.1:${port}/hook`);
const body = JSON.stringify({
  event_id: 'evt_bench',
  event_type: 'daily.data.steps.created',
  data: 'x'.repeat(230),
});
const headers = {
  'content-type': 'application/json',
  'partner-event-id': 'evt_bench',
  'partner-event-type': 'daily.data.steps.created',
  'partner-event-attempt': '1',
};
// A handler's own signal, as the consumer gives one per event (never aborted here).
const handlerSignal = () => new AbortController().signal;

const agent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT });
const poolAny = new Pool(url.origin, { connections: IN_FLIGHT, pipelining: 1 });
const pool = new Pool(url.origin, {
  connections: IN_FLIGHT,
  pipelining: 1,
  connect: { timeout: TIMEOUT_MS },
  headersTimeout: TIMEOUT_MS,
  bodyTimeout: TIMEOUT_MS,
});

const clients: Record<string, () => Promise<void>> = {
  fetch: async () => {
    const signal = AbortSignal.any([handlerSignal(), AbortSignal.timeout(TIMEOUT_MS)]);
    const response = await fetch(url, { method: 'POST', headers, body, redirect: 'manual', signal });
    await response.arrayBuffer();
  },
  'node:http agent': () =>
    new Promise<void>((resolve, reject) => {
      const request = http.request(
        url,
        {
          method: 'POST',
          agent,
          signal: handlerSignal(),
          timeout: TIMEOUT_MS,
          headers: { ...headers, 'content-length': Buffer.byteLength(body) },
        },
        (response) => {
          response.resume();
          response.on('end', resolve).on('error', reject);
        },
      );
      request.on('error', reject);
      request.end(body);
    }),
  'undici Pool + any/timeout': async () => {
    const signal = AbortSignal.any([handlerSignal(), AbortSignal.timeout(TIMEOUT_MS)]);
    const answer = await poolAny.request({ path: url.pathname, method: 'POST', headers, body, signal });
    await answer.body.dump();
  },
  'undici Pool (shipped)': async () => {
    const answer = await pool.request({
      path: url.pathname,
      method: 'POST',
      headers,
      body,
      signal: handlerSignal(),
    });
    await answer.body.dump();
  },
};

async function round(send: () => Promise<void>, n: number) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      await send();
    }
  };
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  const ms = performance.now() - started;
  const used = process.cpuUsage(cpu);
  return { perSec: (n / ms) * 1000, cpuUs: (used.user + used.system) / n };
}

console.log(
  `HTTP clients, ${IN_FLIGHT} POSTs in flight, app in its own process — node ${process.version}, ${availableParallelism()} cpu, ` +
    `${ROUNDS} × ${fmtInt(N)} requests each, rounds interleaved`,
);
const results: Record<string, { perSec: number; cpuUs: number }[]> = {};
for (const send of Object.values(clients)) await round(send, Math.min(N, 3000)); // warm-up
for (let r = 0; r < ROUNDS; r++) {
  for (const [name, send] of Object.entries(clients)) {
    const runs = results[name] ?? [];
    runs.push(await round(send, N));
    results[name] = runs;
  }
}
const rows = [['client', 'requests/s', 'CPU µs/request', 'rounds requests/s']];
for (const [name, runs] of Object.entries(results)) {
  rows.push([
    name,
    fmtInt(median(runs.map((x) => x.perSec))),
    fmtFixed(median(runs.map((x) => x.cpuUs)), 1),
    runs.map((x) => fmtInt(x.perSec)).join(' / '),
  ]);
}
console.log(table(rows));
console.log(
  JSON.stringify({
    bench: 'http-clients',
    node: process.version,
    date: new Date().toISOString(),
    clients: Object.fromEntries(
      Object.entries(results).map(([name, runs]) => [
        name,
        {
          perSec: sig(median(runs.map((x) => x.perSec))),
          cpuUsPerRequest: sig(median(runs.map((x) => x.cpuUs))),
        },
      ]),
    ),
  }),
);
agent.destroy();
await Promise.all([pool.close(), poolAny.close()]);
app.disconnect();
