/**
 * The ops server's close(), which a stopping worker awaits before it exits: an open console page
 * (its live stream never ends by itself) and kept-alive connections must not hold it, or the
 * worker lives on until it is killed (SIGKILL at the end of a pod's grace period).
 */
import { Agent, get, type IncomingMessage } from 'node:http';
import { createConnection, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Gauge, Registry } from 'prom-client';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { Keyring } from '../src/core/secrets.js';
import { ConsoleServer } from '../src/sidecar/console/console-server.js';
import { LiveStats } from '../src/sidecar/console/live-stats.js';
import { CLOSE_GRACE_MS, type OpsServer, startOpsServer } from '../src/sidecar/ops-server.js';
import { tempDir } from './support/harness.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-ops-');
});
afterEach(() => dir.cleanup());

/** An ops server on 127.0.0.1 with its console, as `run` starts it. */
function startOps(registry = new Registry()): Promise<OpsServer> {
  const console = new ConsoleServer({
    stats: new LiveStats(),
    deadLetterPath: join(dir.path, 'dead.jsonl'),
    keyring: new Keyring([{ id: 'current', secret: TEST_SIGNING_SECRET }]),
    readiness: () => ({ source: { ok: true } }),
    status: () => ({ inFlight: 0, dedupeAvailable: true, keyIds: ['current'] }),
    source: 'memory',
    replay: undefined,
    replayUnavailable: 'not in this test',
    token: undefined,
    loopback: true,
  });
  return startOpsServer({
    host: '127.0.0.1',
    port: 0,
    readiness: () => ({}),
    alive: () => true,
    registry,
    console,
  });
}

/** GETs `url` over `agent`; resolves with the answer once its head has arrived. */
function open(url: string, agent: Agent): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => get(url, { agent }, resolve).on('error', reject));
}

/** How an answer's body ended: read to its `end`, or cut off with the connection (`aborted`). */
function ending(res: IncomingMessage): Promise<'end' | 'aborted'> {
  return new Promise((resolve) => {
    res.on('end', () => resolve('end'));
    res.on('error', () => resolve('aborted'));
    res.on('aborted', () => resolve('aborted'));
  });
}

describe('ops server close()', () => {
  it('resolves at once with a console page streaming and a kept-alive connection idle; the stream ends cleanly', async () => {
    const ops = await startOps();
    const idle = new Agent({ keepAlive: true });
    const streaming = new Agent({ keepAlive: true });
    try {
      // A connection kept alive after a scrape of /healthz, idle now.
      const health = await open(`${ops.url}/healthz`, idle);
      const idleSocket = health.socket as Socket;
      const idleClosed = new Promise((resolve) => idleSocket.once('close', resolve));
      health.resume();
      await new Promise((resolve) => health.on('end', resolve));

      // A console page's live stream, its first numbers received.
      const stream = await open(`${ops.url}/console/api/stream`, streaming);
      expect(stream.statusCode).toBe(200);
      expect(stream.headers['content-type']).toBe('text/event-stream');
      const ended = ending(stream);
      stream.setEncoding('utf8');
      // The first numbers at once, the next a second later: the stream stays open until the close.
      for (let i = 0; i < 2; i++) {
        const chunk = await new Promise<string>((resolve) => stream.once('data', resolve));
        expect(chunk).toMatch(/^data: \{"source":"memory"/);
      }
      stream.resume();

      // Before the grace that would close the connections under them: nothing held the close.
      const closing = ops.close().then(() => 'closed' as const);
      const outcome = await Promise.race([closing, sleep(CLOSE_GRACE_MS / 2).then(() => 'held' as const)]);
      expect(outcome).toBe('closed');
      expect(await ended).toBe('end');
      await idleClosed;
    } finally {
      idle.destroy();
      streaming.destroy();
      await ops.close();
    }
  });

  it('lets a request in flight finish: its answer arrives whole, then its kept-alive connection closes at once', async () => {
    // A /metrics scrape that is still collecting when the server closes.
    const registry = new Registry();
    let collecting: () => void = () => undefined;
    let release: () => void = () => undefined;
    const started = new Promise<void>((resolve) => {
      collecting = resolve;
    });
    new Gauge({
      name: 'slow_gauge',
      help: 'collects only when released',
      registers: [registry],
      collect: () => {
        collecting();
        return new Promise<void>((resolve) => {
          release = resolve;
        });
      },
    });
    const ops = await startOps(registry);
    const agent = new Agent({ keepAlive: true });
    try {
      const answer = open(`${ops.url}/metrics`, agent);
      await started;
      const closing = ops.close().then(() => 'closed' as const);
      release();
      const metrics = await answer;
      expect(metrics.statusCode).toBe(200);
      const socketClosed = new Promise((resolve) => (metrics.socket as Socket).once('close', resolve));
      let text = '';
      metrics.setEncoding('utf8').on('data', (d: string) => {
        text += d;
      });
      expect(await ending(metrics)).toBe('end');
      expect(text).toContain('slow_gauge');
      // Not kept alive for the server's 5 s, nor left to the grace.
      const outcome = await Promise.race([closing, sleep(CLOSE_GRACE_MS / 2).then(() => 'held' as const)]);
      expect(outcome).toBe('closed');
      await socketClosed;
    } finally {
      agent.destroy();
      await ops.close();
    }
  });

  it('closes a connection that never finishes its request after the grace, and then resolves', async () => {
    const ops = await startOps();
    // Half a request's head: never answered, never idle.
    const half = createConnection({ host: '127.0.0.1', port: Number(new URL(ops.url).port) });
    half.on('error', () => undefined);
    await new Promise((resolve) => half.once('connect', resolve));
    half.write('GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n');
    const halfClosed = new Promise((resolve) => half.once('close', resolve));
    try {
      const closing = ops.close().then(() => 'closed' as const);
      const outcome = await Promise.race([closing, sleep(3 * CLOSE_GRACE_MS).then(() => 'held' as const)]);
      expect(outcome).toBe('closed');
      await halfClosed;
    } finally {
      half.destroy();
    }
  });
});
