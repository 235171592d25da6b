/**
 * The partner's app of the sidecar bench, in its own process: answers every POST with 200 over
 * keep-alive connections, and tells its parent (IPC) when the requests it was told to count
 * arrive, so the parent can read the sender's CPU time at those moments.
 *
 * Parent → app: `{ marks: [n1, n2, …], delayMs? }` (resets the count and sets how long each
 * answer waits, default 0; answered `{ ready: true }`).
 * App → parent: `{ listening: port }`, then `{ mark: n }` as the n-th request since the reset ends.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

let count = 0;
let marks: number[] = [];
let delayMs = 0;

const server = createServer((req, res) => {
  req.on('data', () => {});
  req.on('end', () => {
    const answer = () =>
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' }).end('ok');
    if (delayMs > 0) setTimeout(answer, delayMs);
    else answer();
    count++;
    if (count === marks[0]) {
      marks.shift();
      process.send?.({ mark: count });
    }
  });
});
// Longer than any bench run: connections end when their client closes them.
server.keepAliveTimeout = 120_000;
server.headersTimeout = 121_000;

process.on('message', (message: { marks?: number[]; delayMs?: number }) => {
  if (message.marks) {
    count = 0;
    marks = [...message.marks];
    delayMs = message.delayMs ?? 0;
    process.send?.({ ready: true });
  }
});
process.on('disconnect', () => process.exit(0));

server.listen(0, '127.0.0.1', () => {
  process.send?.({ listening: (server.address() as AddressInfo).port });
});
