/**
 * Peak memory of the sidecar's HTTP ingress under many slow uploads: `partner-events run` as a
 * child process (defaults: concurrency 16, 1 MiB bodies), N raw TCP senders that each declare a
 * 1 MiB body, send all of it but the last byte in paced 16 KiB chunks, and then stall. Reports the
 * child's peak RSS (VmHWM), what each sender was answered, and when the last socket closed.
 *
 *   npx tsx bench/slow-senders.ts                      500 senders
 *   npx tsx bench/slow-senders.ts --senders 100 --wait-s 20
 *
 * Prints one JSON line. Linux only (reads /proc/PID/status).
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    senders: { type: 'string', default: '500' },
    bytes: { type: 'string', default: String(1024 * 1024) },
    'chunk-ms': { type: 'string', default: '10' },
    /** How long to wait, after the last byte was sent, for the ingress to answer or close every sender. */
    'wait-s': { type: 'string', default: '30' },
  },
});
const SENDERS = Number(values.senders);
const BYTES = Number(values.bytes);
const CHUNK = 16 * 1024;
const CHUNK_MS = Number(values['chunk-ms']);
const WAIT_MS = Number(values['wait-s']) * 1000;
const MAIN = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));

function memoryOf(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
  return { rss: kb('VmRSS') * 1024, hwm: kb('VmHWM') * 1024 };
}

const mib = (bytes: number) => Math.round((bytes / 1024 / 1024) * 10) / 10;

// The app is never reached (no body completes); `run` needs somewhere to forward.
const app = createServer((req, res) => {
  req.resume();
  req.on('end', () => res.writeHead(204).end());
});
await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));

const child = spawn(
  process.execPath,
  [
    '--import',
    'tsx',
    MAIN,
    'run',
    '--source',
    'http://127.0.0.1:0/events',
    '--forward',
    `http://127.0.0.1:${(app.address() as AddressInfo).port}/events`,
    '--dedupe',
    'memory',
    '--no-ops',
  ],
  {
    env: { ...process.env, LOG_LEVEL: 'info', PARTNER_EVENTS_SIGNING_SECRET: 'bench-secret' },
    stdio: ['ignore', 'pipe', 'inherit'],
  },
);
const pid = child.pid as number;
const ingress = await new Promise<URL>((resolve, reject) => {
  let out = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    const match = /"ingress":"([^"]+)"/.exec(out);
    if (match?.[1]) resolve(new URL(match[1]));
  });
  child.once('exit', (code) => reject(new Error(`run exited ${code} before listening`)));
});
child.stdout?.resume();
const baseline = memoryOf(pid);

interface Sender {
  socket: Socket;
  sent: number;
  answer: string | undefined;
  closedAt: number | undefined;
}
const started = performance.now();
const filler = Buffer.alloc(CHUNK, 0x61);
const head = `POST ${ingress.pathname} HTTP/1.1\r\nhost: ${ingress.host}\r\ncontent-type: application/json\r\ncontent-length: ${BYTES}\r\n\r\n`;

function startSender(): Promise<Sender> {
  const sender: Sender = {
    socket: connect(Number(ingress.port), ingress.hostname),
    sent: 0,
    answer: undefined,
    closedAt: undefined,
  };
  const { socket } = sender;
  socket.on('data', (d: Buffer) => {
    sender.answer ??= /^HTTP\/1\.1 (\d+)/.exec(d.toString('latin1'))?.[1] ?? 'other';
  });
  socket.on('error', () => undefined); // a reset after the ingress answered and closed
  socket.on('close', () => {
    sender.closedAt = performance.now();
  });
  return new Promise((resolve) => {
    const step = () => {
      const left = BYTES - 1 - sender.sent; // the last byte is never sent: the body never ends
      if (left <= 0 || socket.destroyed || sender.closedAt !== undefined) return resolve(sender);
      const chunk = left < CHUNK ? filler.subarray(0, left) : filler;
      sender.sent += chunk.length;
      socket.write(chunk, () => setTimeout(step, CHUNK_MS));
    };
    socket.once('connect', () => socket.write(head, step));
    socket.once('close', () => resolve(sender));
  });
}

let peakDuringSend = 0;
const sampler = setInterval(() => {
  peakDuringSend = Math.max(peakDuringSend, memoryOf(pid).rss);
}, 50);
const senders = await Promise.all(Array.from({ length: SENDERS }, startSender));
const allSentAt = performance.now();
const afterSend = memoryOf(pid);

// Wait for every sender to be answered or closed by the ingress (polled; bounded by --wait-s).
const deadline = allSentAt + WAIT_MS;
while (senders.some((s) => s.closedAt === undefined) && performance.now() < deadline) {
  await new Promise((resolve) => setTimeout(resolve, 100));
}
clearInterval(sampler);
const end = memoryOf(pid);

const answers: Record<string, number> = {};
for (const s of senders) {
  const key = s.answer ?? (s.closedAt === undefined ? 'still open, no answer' : 'closed, no answer');
  answers[key] = (answers[key] ?? 0) + 1;
}
const closed = senders.filter((s) => s.closedAt !== undefined).map((s) => s.closedAt as number);
for (const s of senders) s.socket.destroy();
child.kill('SIGTERM');
await new Promise((resolve) => child.once('exit', resolve));
app.close();

console.log(
  JSON.stringify({
    senders: SENDERS,
    bytes_per_body: BYTES,
    bytes_sent_mib: mib(senders.reduce((n, s) => n + s.sent, 0)),
    baseline_rss_mib: mib(baseline.rss),
    rss_after_send_mib: mib(afterSend.rss),
    peak_rss_mib: mib(end.hwm),
    peak_rss_sampled_mib: mib(Math.max(peakDuringSend, end.rss)),
    answers,
    send_s: Math.round((allSentAt - started) / 100) / 10,
    last_close_after_send_s:
      closed.length === SENDERS ? Math.round((Math.max(...closed) - allSentAt) / 100) / 10 : null,
  }),
);
