/**
 * The floor of the sidecar bench, in its own process: the operations `run --forward` does for an
 * event, with nothing around them. For each envelope: JSON.parse, HMAC-SHA256 (KeyObject) +
 * timingSafeEqual, JSON.parse of the body, zod parse, SQLite claim, POST of the body to the app
 * over a keep-alive undici Pool (body discarded), SQLite complete (claim and complete are the
 * store's own statements, SQLITE_STATEMENTS). The writes of the events in flight are committed together (one transaction per turn of the event loop), as
 * the SQLite store's group commit does, in a file the store created (same table, index, pragmas).
 *
 *   --mode file     reads `--file` (one envelope a line) with `--concurrency` events in flight;
 *                   times events from the `--warm`-th to the last itself (wall and CPU) and reports
 *   --mode ingress  a bare node:http server on `--port`: each POSTed envelope as above, then 200;
 *                   runs until its parent disconnects (the parent measures its CPU from outside)
 */
import { createHmac, createSecretKey, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { type EventType, eventSchemas } from '../src/core/events/schemas.js';

import { OUR_SECRET } from './fixtures.js';
import { openStoreFileBare } from './store-file.js';

const { values } = parseArgs({
  options: {
    mode: { type: 'string', default: 'file' },
    app: { type: 'string' },
    db: { type: 'string' },
    file: { type: 'string' },
    port: { type: 'string' },
    concurrency: { type: 'string', default: '64' },
    warm: { type: 'string', default: '0' },
  },
});
const concurrency = Number(values.concurrency);
const appUrl = new URL(values.app as string);
const pool = new Pool(appUrl.origin, { connections: concurrency, pipelining: 1 });
const key = createSecretKey(Buffer.from(OUR_SECRET, 'utf8'));

// The store's own statements, bare (src/dedupe/sqlite.ts).
const { db, claim, endLease, recordDone } = await openStoreFileBare(values.db as string);

/** Writes of one turn of the event loop, committed in one transaction. */
interface Write {
  readonly complete: boolean;
  readonly id: string;
  readonly token: string;
  readonly resolve: () => void;
}
let writes: Write[] = [];
const commit = db.transaction((batch: Write[]) => {
  const now = Date.now();
  for (const w of batch) {
    if (w.complete) {
      if (endLease.run(w.id, w.token).changes !== 1) throw new Error('complete missed');
      recordDone.run(w.id, now + 7 * 24 * 3600_000);
    } else if (claim.run(w.id, w.token, now + 60_000, w.id, now).changes !== 1) {
      throw new Error('claim missed');
    }
  }
});
function write(complete: boolean, id: string, token: string): Promise<void> {
  return new Promise((resolve) => {
    if (writes.length === 0) setImmediate(flush);
    writes.push({ complete, id, token, resolve });
  });
}
function flush(): void {
  const batch = writes;
  writes = [];
  commit.immediate(batch);
  for (const w of batch) w.resolve();
}

let seq = 0;
/** One event, start to end. */
async function handle(raw: string): Promise<void> {
  const env = JSON.parse(raw) as { event_type: string; signed_at: number; signature: string; body: string };
  const mac = createHmac('sha256', key).update(`${env.signed_at}.`).update(env.body).digest();
  if (!timingSafeEqual(mac, Buffer.from(env.signature, 'hex'))) throw new Error('floor: bad signature');
  const event = eventSchemas[env.event_type as EventType].parse(JSON.parse(env.body)) as { event_id: string };
  const token = `floor.${(++seq).toString(36)}`;
  await write(false, event.event_id, token);
  const answer = await pool.request({
    path: appUrl.pathname,
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'partner-event-id': encodeURIComponent(event.event_id),
      'partner-event-type': encodeURIComponent(env.event_type),
      'partner-event-attempt': '1',
    },
    body: env.body,
  });
  await answer.body.dump();
  if (answer.statusCode !== 200) throw new Error(`floor: app answered ${answer.statusCode}`);
  await write(true, event.event_id, token);
}

if (values.mode === 'file') {
  const lines = readFileSync(values.file as string, 'utf8')
    .split('\n')
    .filter(Boolean);
  const warm = Number(values.warm);
  let next = 0;
  let done = 0;
  let from = { at: performance.now(), cpu: process.cpuUsage() };
  const worker = async () => {
    while (next < lines.length) {
      await handle(lines[next++] as string);
      if (++done === warm) from = { at: performance.now(), cpu: process.cpuUsage() };
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const cpu = process.cpuUsage(from.cpu);
  const report = {
    events: lines.length - warm,
    ms: performance.now() - from.at,
    cpuUs: cpu.user + cpu.system,
  };
  await pool.close();
  db.close();
  if (process.send) process.send(report, () => process.exit(0));
  else console.log(JSON.stringify(report));
} else {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      handle(Buffer.concat(chunks).toString('utf8')).then(
        () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"outcome":"ack"}'),
        (error: unknown) => res.writeHead(500).end(String(error)),
      );
    });
  });
  server.listen(Number(values.port), '127.0.0.1', () => process.send?.({ listening: true }));
  process.on('disconnect', () => process.exit(0));
}
