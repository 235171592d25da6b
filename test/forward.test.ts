/**
 * The forwarder and the `--to http(s)` target hand an event to an app over HTTP: success is a
 * 2xx from the URL asked for, nothing else. Real servers on 127.0.0.1, the library through a
 * consumer, the CLI as a child process.
 */
import type { IncomingMessage } from 'node:http';
import { type AddressInfo, createServer as createNetServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { httpTarget } from '../adapters/http/sender.js';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { ConfigError } from '../src/core/errors.js';
import { createHttpHandoff, type HttpHandoffFailure } from '../src/core/http-handoff.js';
import { createForwarder } from '../src/sidecar/forward.js';
import { runCli, runReplay, runWithConfig, startServer } from './support/cli.js';
import { type Harness, harness, tempDir } from './support/harness.js';
import { jsonLines, readJsonl, writeJsonl } from './support/records.js';
import { thrownBy } from './support/thrown.js';

/** An app whose /events answers `302 Location: /login?next=…` and whose login page answers 200. */
function startLoginRedirectApp() {
  return startServer((s, res) => {
    if (s.path === '/events') res.writeHead(302, { location: '/login?next=%2Fevents&session=abc' }).end();
    else res.writeHead(200, { 'content-type': 'text/html' }).end('<form>login</form>');
  });
}

/** Runs `test` with a login-redirecting app (see above), closed after it. */
async function withLoginRedirectApp(test: (app: Awaited<ReturnType<typeof startServer>>) => Promise<void>) {
  const app = await startLoginRedirectApp();
  try {
    await test(app);
  } finally {
    await app.close();
  }
}

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-forward-');
});
afterEach(() => dir.cleanup());

/** A signed event, alone in the file `name` of the test's directory. */
function oneEventFile(name: string) {
  const event = createTestEnvelope('daily.data.steps.created');
  return { event, file: writeJsonl(dir.path, name, [event.raw]) };
}

describe('a forward answered with a redirect', () => {
  it('302 to a login page: not followed, not done, not acked; retried, then dead-lettered as FORWARD_REDIRECTED', async () => {
    const app = await startLoginRedirectApp();
    const h = harness();
    try {
      h.consumer.on('*', createForwarder({ url: app.url }));
      await h.consumer.start();
      const event = createTestEnvelope('daily.data.steps.created');
      h.source.send(event.raw);
      const dead = await h.waitFor((r) => r.outcome.kind === 'dead');

      // Every delivery failed with its own code; none was acked, and the login page was never asked.
      const outcomes = h.reports.map((r) => r.outcome);
      expect(outcomes.map((o) => o.kind)).toEqual(['retry', 'retry', 'dead']);
      expect(outcomes.every((o) => o.kind !== 'ack' && o.code === 'FORWARD_REDIRECTED')).toBe(true);
      expect(app.received.map((s) => `${s.method} ${s.path}`)).toEqual([
        'POST /events',
        'POST /events',
        'POST /events',
      ]);
      expect(await h.dedupe.peek(event.eventId)).not.toBe('done');
      // The Location is named (resolved, without its query), so the operator can fix forward.url.
      const reason = dead.outcome.kind === 'dead' ? dead.outcome.reason : '';
      expect(reason).toContain(`redirect to ${app.origin}/login`);
      expect(reason).toContain('HTTP 302');
      expect(reason).not.toContain('session=abc');
      expect(readJsonl(h.deadLetterPath)).toMatchObject([
        { code: 'FORWARD_REDIRECTED', event_id: event.eventId },
      ]);
    } finally {
      await h.cleanup();
      await app.close();
    }
  });

  it('307 to another origin: the body and the forward headers never reach it', async () => {
    const other = await startServer((_s, res) => res.writeHead(200).end());
    const app = await startServer((_s, res) =>
      res
        .writeHead(307, { location: `http://user:pw@${other.origin.slice('http://'.length)}/steal?k=v` })
        .end(),
    );
    const h = harness({ retry: { maxAttempts: 2, baseDelayMs: 5, maxDelayMs: 20 } });
    try {
      h.consumer.on('*', createForwarder({ url: app.url, headers: { 'x-internal-token': 'tok-123' } }));
      await h.consumer.start();
      h.source.send(createTestEnvelope('coach.nudge.created').raw);
      const dead = await h.waitFor((r) => r.outcome.kind === 'dead');
      expect(dead.outcome).toMatchObject({ code: 'FORWARD_REDIRECTED' });
      expect(app.received).toHaveLength(2);
      expect(app.received[0]?.headers['x-internal-token']).toBe('tok-123');
      expect(other.received).toEqual([]);
      const reason = dead.outcome.kind === 'dead' ? dead.outcome.reason : '';
      expect(reason).toContain(`HTTP 307, redirect to ${other.origin}/steal`);
      expect(reason).not.toMatch(/user|pw@|k=v/);
    } finally {
      await h.cleanup();
      await app.close();
      await other.close();
    }
  });

  it('run --forward: the redirected event ends in the dead letters, never acked as handled', async () => {
    await withLoginRedirectApp(async (app) => {
      const { event, file: events } = oneEventFile('events.jsonl');
      const deadLetters = join(dir.path, 'dead.jsonl');
      const result = await runCli(
        ['run', '--source', `file:${events}`, '--forward', app.url, '--dedupe', 'memory'],
        {
          env: {
            LOG_LEVEL: 'info',
            PARTNER_EVENTS_DEAD_LETTER: deadLetters,
            PARTNER_EVENTS_RETRY_MAX_ATTEMPTS: '2',
            PARTNER_EVENTS_RETRY_BASE_DELAY_MS: '10',
          },
        },
      );
      expect(result.code).toBe(1); // a file run with a dead-lettered event
      expect(result.stdout).not.toContain('"outcome":"handled"');
      const retried = jsonLines(result.stdout).find((l) => l.msg === 'event will be retried');
      expect(retried).toMatchObject({ code: 'FORWARD_REDIRECTED' });
      expect(readJsonl(deadLetters)).toMatchObject([{ code: 'FORWARD_REDIRECTED', event_id: event.eventId }]);
      expect(app.received.every((s) => s.path === '/events')).toBe(true);
    });
  });

  it('replay --forward: reported as failed with FORWARD_REDIRECTED, and kept for the next replay', async () => {
    await withLoginRedirectApp(async (app) => {
      const { event, file } = oneEventFile('dead.jsonl');
      const failed = join(dir.path, 'still-failing.jsonl');
      const flags = ['--forward', app.url, '--attempts', '2', '--dead-letter', failed];
      const result = await runReplay(file, flags);
      expect(result.code).toBe(1);
      const lines = result.lines;
      expect(lines[0]).toMatchObject({
        event_id: event.eventId,
        outcome: 'dead',
        code: 'FORWARD_REDIRECTED',
      });
      expect(lines.at(-1)).toMatchObject({
        forwarded: 0,
        failed: 1,
        failure_codes: { FORWARD_REDIRECTED: 1 },
      });
      expect(readJsonl(failed)).toMatchObject([{ code: 'FORWARD_REDIRECTED' }]);
      expect(app.received.every((s) => s.path === '/events')).toBe(true);
    });
  });

  it('replay --to http: an ingress that answers 302 has not taken the envelope', async () => {
    await withLoginRedirectApp(async (app) => {
      const { file } = oneEventFile('dead.jsonl');
      const failed = join(dir.path, 'failed.jsonl');
      const result = await runReplay(file, ['--to', app.url, '--attempts', '1', '--dead-letter', failed]);
      expect(result.code).toBe(1);
      const lines = result.lines;
      expect(lines[0]).toMatchObject({ outcome: 'dead', code: 'FORWARD_REDIRECTED' });
      expect(String(lines[0]?.reason)).toContain(`redirect to ${app.origin}/login`);
      expect(lines.at(-1)).toMatchObject({ injected: 0, failed: 1 });
      expect(app.received.map((s) => `${s.method} ${s.path}`)).toEqual(['POST /events']);
    });
  });

  it('trigger --to http: a 302 is not "sent"', async () => {
    await withLoginRedirectApp(async (app) => {
      const result = await runCli(['trigger', 'daily.data.steps.created', '--to', app.url]);
      expect(result.code).toBe(1);
      expect(app.received.map((s) => `${s.method} ${s.path}`)).toEqual(['POST /events']);
    });
  });
});

describe('a forward URL with user:password@', () => {
  // fetch refuses such a URL on every request; it used to be accepted and fail each forward.
  const url = 'http://admin:s3cret-pw@127.0.0.1:9/events';
  const refused = (stderr: string) => {
    expect(stderr).toContain('Authorization header');
    expect(stderr).toContain('forward.headers');
    expect(stderr).not.toContain('s3cret-pw');
    expect(stderr).not.toContain('admin');
  };

  it('createForwarder throws a ConfigError that names the fix, not the credentials', () => {
    for (const bad of [url, 'https://token@app.internal/events']) {
      const error = thrownBy(() => createForwarder({ url: bad }));
      expect(error).toBeInstanceOf(ConfigError);
      const message = (error as Error).message;
      expect(message).toContain('forward.headers');
      expect(message).not.toMatch(/s3cret-pw|admin|token/);
    }
  });

  it('run exits 2 before anything starts, from the flag, the config file or the environment', async () => {
    const events = oneEventFile('events.jsonl').file;
    const fromFlag = await runCli([
      'run',
      '--source',
      `file:${events}`,
      '--forward',
      url,
      '--dedupe',
      'memory',
    ]);
    expect(fromFlag.code).toBe(2);
    expect(fromFlag.stderr).toContain('  - --forward: '); // the flag as typed, not its environment variable
    refused(fromFlag.stderr);

    const config = `source: file:${events}\ndedupe: memory\nforward:\n  url: ${url}\n`;
    const fromFile = await runWithConfig(join(dir.path, 'worker.yaml'), config);
    expect(fromFile.code).toBe(2);
    refused(fromFile.stderr);

    const fromEnv = await runCli(['run', '--source', `file:${events}`, '--dedupe', 'memory'], {
      env: { PARTNER_EVENTS_FORWARD_URL: url },
    });
    expect(fromEnv.code).toBe(2);
    refused(fromEnv.stderr);
  });

  it('--to http(s) with user:password@ exits 2 too, instead of printing the error of fetch, password included', async () => {
    const trigger = await runCli(['trigger', 'daily.data.steps.created', '--to', url]);
    expect(trigger.code).toBe(2);
    expect(trigger.stderr).toContain('user:password@');
    expect(trigger.stderr).not.toMatch(/s3cret-pw|admin/);
    const { file } = oneEventFile('dead.jsonl');
    const replay = await runCli(['replay', file, '--to', url, '--dedupe', 'memory']);
    expect(replay.code).toBe(2);
    expect(replay.stderr).not.toMatch(/s3cret-pw|admin/);
  });

  it('replay --forward exits 2 before reading a record', async () => {
    const { file } = oneEventFile('dead.jsonl');
    const result = await runCli(['replay', file, '--forward', url, '--dedupe', 'memory']);
    expect(result.code).toBe(2);
    refused(result.stderr);
    expect(result.stdout).toBe('');
  });
});

describe('forward headers of ids outside Latin-1', () => {
  it('percent-encodes partner-event-id and partner-event-type, so the event is delivered and the headers decode back', async () => {
    const app = await startServer((_s, res) => res.writeHead(204).end());
    const h = harness();
    try {
      const forward = createForwarder({ url: app.url });
      h.consumer.on('*', forward).onUnknown(forward);
      await h.consumer.start();
      const plain = createTestEnvelope('daily.data.steps.created');
      const wide = createTestEnvelope('daily.data.steps.created', {
        fields: { event_id: 'evt_Łódź 😀 100%25 ü' },
      });
      const unknownType = createTestEnvelope('vendor.événement.çalışma.✓');
      const loneSurrogate = createTestEnvelope('daily.data.steps.created', {
        fields: { event_id: 'evt_\ud800x' },
      });
      for (const e of [plain, wide, unknownType, loneSurrogate]) h.source.send(e.raw);
      await h.waitFor((r) => r.eventId === loneSurrogate.eventId && r.outcome.kind !== 'retry');
      await Promise.all(
        [plain, wide, unknownType].map((e) =>
          h.waitFor((r) => r.eventId === e.eventId && r.outcome.kind !== 'retry'),
        ),
      );
      expect(h.reports.map((r) => r.outcome)).toEqual(Array(4).fill({ kind: 'ack', result: 'handled' }));

      const byBody = (id: string) => {
        const seen = app.received.find((s) => (JSON.parse(s.body) as { event_id: string }).event_id === id);
        if (!seen) throw new Error(`${id} was not forwarded`);
        return seen.headers;
      };
      const header = (id: string, name: string) => String(byBody(id)[name]);
      // The ids the service issues are unchanged by the encoding.
      expect(header(plain.eventId, 'partner-event-id')).toBe(plain.eventId);
      expect(header(plain.eventId, 'partner-event-type')).toBe('daily.data.steps.created');
      // Anything else arrives as ASCII and decodes back with decodeURIComponent, `%` included.
      expect(header(wide.eventId, 'partner-event-id')).toMatch(/^[\x21-\x7e]+$/);
      expect(decodeURIComponent(header(wide.eventId, 'partner-event-id'))).toBe(wide.eventId);
      expect(decodeURIComponent(header(unknownType.eventId, 'partner-event-type'))).toBe(
        'vendor.événement.çalışma.✓',
      );
      // A lone surrogate (possible through a JSON escape in the signed body) has no UTF-8 form: U+FFFD.
      expect(decodeURIComponent(header(loneSurrogate.eventId, 'partner-event-id'))).toBe('evt_\ufffdx');
    } finally {
      await h.cleanup();
      await app.close();
    }
  });
});

/**
 * A raw HTTP/1.1 server that answers the first request of each connection with 200 (keep-alive)
 * and closes the connection, unanswered, when a second request arrives on it: what an app does
 * when it closes an idle kept-alive connection just as the client reuses it.
 */
async function startIdleClosingApp() {
  const requests: { connection: number; eventId: string }[] = [];
  let connections = 0;
  const server = createNetServer((socket) => {
    const connection = ++connections;
    let served = 0;
    let buffered = '';
    socket.setEncoding('latin1').on('data', (data: string) => {
      buffered += data;
      for (;;) {
        const end = buffered.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buffered.slice(0, end);
        const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        if (buffered.length < end + 4 + length) return;
        buffered = buffered.slice(end + 4 + length);
        const eventId = /\r\npartner-event-id: *([^\r]*)/i.exec(head)?.[1] ?? '';
        requests.push({ connection, eventId });
        if (++served > 1) {
          socket.destroy();
          return;
        }
        socket.write('HTTP/1.1 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok');
      }
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/events`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Starts the harness's consumer forwarding every type, sends it `count` events; resolves once each settled. */
async function forwardEvents(h: Harness, forward: ReturnType<typeof createForwarder>, count: number) {
  h.consumer.on('*', forward);
  await h.consumer.start();
  const events = Array.from({ length: count }, () => createTestEnvelope('daily.data.steps.created'));
  for (const e of events) h.source.send(e.raw);
  await Promise.all(events.map((e) => h.waitFor((r) => r.eventId === e.eventId)));
  return events;
}

describe('forwarding over a keep-alive pool', () => {
  it('reuses connections: 200 events over at most `connections` connections, bodies of the answers read', async () => {
    const sockets = new Set<Socket>();
    let accepted = 0;
    const app = await startServer((_s, res) => res.writeHead(200).end('x'.repeat(20_000)));
    app.server.on('connection', (socket: Socket) => {
      accepted++;
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    const h = harness({ concurrency: 8 });
    const forward = createForwarder({ url: app.url, connections: 8 });
    try {
      await forwardEvents(h, forward, 200);
      expect(h.reports.every((r) => r.outcome.kind === 'ack')).toBe(true);
      expect(app.received).toHaveLength(200);
      expect(accepted).toBeGreaterThan(0);
      expect(accepted).toBeLessThanOrEqual(8);

      // close() ends every connection to the app.
      const closed = [...sockets].map((s) => new Promise((resolve) => s.once('close', resolve)));
      await h.consumer.stop();
      await forward.close();
      await Promise.all(closed);
      expect(sockets.size).toBe(0);
    } finally {
      await h.cleanup();
      await app.close();
    }
  });

  it('an app that closes kept-alive connections loses no event and burns no attempt: the request is sent again on a fresh connection', async () => {
    const app = await startIdleClosingApp();
    const h = harness({ concurrency: 1 });
    const forward = createForwarder({ url: app.url, connections: 1 });
    try {
      const events = await forwardEvents(h, forward, 5);
      // Each event after the first met a reused connection that the app closed, and went again.
      expect(h.reports.map((r) => r.outcome)).toEqual(Array(5).fill({ kind: 'ack', result: 'handled' }));
      const answered = new Map<number, string>();
      for (const r of app.requests) if (!answered.has(r.connection)) answered.set(r.connection, r.eventId);
      expect([...answered.values()]).toEqual(events.map((e) => e.eventId));
      expect(app.requests.length).toBeGreaterThan(5);
    } finally {
      await h.cleanup();
      await forward.close();
      await app.close();
    }
  });

  it('names what failed: a refused connection, and a timeout, with the app address redacted', async () => {
    const closed = await startServer(() => {});
    await closed.close(); // nothing listens on its port any more
    const silent = await startServer(() => {}); // accepts, never answers
    const h = harness({ retry: { maxAttempts: 1, baseDelayMs: 5, maxDelayMs: 20 } });
    const refused = createForwarder({ url: `${closed.url}?code=S3cr3t` });
    const slow = createForwarder({ url: silent.url, timeoutMs: 200 });
    try {
      h.consumer.on('daily.data.steps.created', refused).on('coach.nudge.created', slow);
      await h.consumer.start();
      const a = createTestEnvelope('daily.data.steps.created');
      const b = createTestEnvelope('coach.nudge.created');
      h.source.send(a.raw);
      h.source.send(b.raw);
      const deadA = await h.waitFor((r) => r.eventId === a.eventId);
      const deadB = await h.waitFor((r) => r.eventId === b.eventId);
      const reason = (r: typeof deadA) => (r.outcome.kind === 'dead' ? r.outcome.reason : '');
      expect(reason(deadA)).toContain(`forward to ${closed.url} failed: connection refused (ECONNREFUSED)`);
      expect(reason(deadA)).not.toContain('S3cr3t');
      expect(reason(deadB)).toContain(`forward to ${silent.url} timed out after 200ms waiting for an answer`);
    } finally {
      await h.cleanup();
      await refused.close();
      await slow.close();
      await silent.close();
    }
  });
});

describe("the handler's deadline", () => {
  it('aborts the POST in flight: the app sees the request closed, and the event is retried as HANDLER_TIMEOUT', async () => {
    const closed: string[] = [];
    const silent = await startServer(() => {}); // reads the request, never answers
    silent.server.on('request', (req: IncomingMessage) =>
      req.on('close', () => closed.push(String(req.headers['partner-event-id']))),
    );
    // The forwarder's own timeout is far away: only the handler's deadline can end the POST.
    const forward = createForwarder({ url: silent.url, timeoutMs: 60_000 });
    const h = harness({
      handlerTimeoutMs: 300,
      retry: { maxAttempts: 2, baseDelayMs: 60_000, maxDelayMs: 60_000 },
    });
    try {
      h.consumer.on('*', forward);
      await h.consumer.start();
      const event = createTestEnvelope('daily.data.steps.created');
      h.source.send(event.raw);
      const settled = await h.waitFor((r) => r.eventId === event.eventId);
      expect(settled.outcome).toMatchObject({ kind: 'retry', code: 'HANDLER_TIMEOUT' });
      await vi.waitFor(() => expect(closed).toEqual([event.eventId]), { timeout: 5000 });
    } finally {
      await h.cleanup();
      await forward.close();
      silent.server.closeAllConnections();
      await silent.close();
    }
  });
});

describe('--to http(s) over a keep-alive pool', () => {
  it('replay --to: 40 envelopes over at most --concurrency connections', async () => {
    let accepted = 0;
    const app = await startServer((_s, res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"outcome":"ack","result":"handled"}'),
    );
    app.server.on('connection', () => accepted++);
    try {
      const events = Array.from({ length: 40 }, () => createTestEnvelope('daily.data.steps.created').raw);
      const file = writeJsonl(dir.path, 'dead.jsonl', events);
      const result = await runReplay(file, ['--to', app.url, '--concurrency', '4']);
      expect(result.code).toBe(0);
      expect(result.summary).toMatchObject({ injected: 40, failed: 0 });
      expect(app.received).toHaveLength(40);
      expect(accepted).toBeGreaterThan(0);
      expect(accepted).toBeLessThanOrEqual(4);
    } finally {
      await app.close();
    }
  });

  it('replay --to: an ingress that closes kept-alive connections takes every envelope at the first attempt', async () => {
    const app = await startIdleClosingApp();
    try {
      const events = Array.from({ length: 4 }, () => createTestEnvelope('daily.data.steps.created'));
      const file = writeJsonl(
        dir.path,
        'dead.jsonl',
        events.map((e) => e.raw),
      );
      const failed = join(dir.path, 'failed.jsonl');
      const flags = ['--to', app.url, '--concurrency', '1', '--attempts', '1', '--dead-letter', failed];
      const result = await runReplay(file, flags);
      expect(result.summary).toMatchObject({ injected: 4, failed: 0 });
      expect(result.code).toBe(0);
      expect(app.requests.length).toBeGreaterThan(4);
    } finally {
      await app.close();
    }
  });

  it('trigger --to a port nobody listens on: the failure is named, exit 1', async () => {
    const closed = await startServer(() => {});
    await closed.close();
    const result = await runCli(['trigger', 'daily.data.steps.created', '--to', `${closed.url}?sig=S3cr3t`]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`POST ${closed.url} failed: connection refused (ECONNREFUSED)`);
    expect(result.stderr).not.toContain('S3cr3t');
  });
});

/**
 * A raw HTTP/1.1 app that reads each request whole and answers with `head` (the status line and
 * headers) and `body`, then stalls (sends nothing more, the connection open) or closes the
 * connection: an app or a proxy that falls over in the middle of its answer.
 */
async function startCutOffApp(answer: { head: string; body: string; after: 'stall' | 'close' }) {
  const sockets = new Set<Socket>();
  let requests = 0;
  const server = createNetServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket)).on('error', () => {});
    let buffered = '';
    socket.setEncoding('latin1').on('data', (data: string) => {
      buffered += data;
      const end = buffered.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(buffered.slice(0, end))?.[1] ?? 0);
      if (buffered.length < end + 4 + length) return;
      buffered = buffered.slice(end + 4 + length);
      requests++;
      socket.write(`${answer.head}\r\n\r\n${answer.body}`, () => {
        if (answer.after === 'close') socket.end();
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/events`,
    requests: () => requests,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** 200 with `content-length: 1000`, and only the first 7 bytes of the body. */
const CUT_OFF_200 = { head: 'HTTP/1.1 200 OK\r\ncontent-length: 1000', body: 'partial' };

describe('a 2xx whose body does not arrive whole', () => {
  const cases = [
    { after: 'stall', reason: 'timed out after 200ms waiting for the rest of its body (7 of 1000 bytes)' },
    { after: 'close', reason: 'the connection closed before the end of its body (7 of 1000 bytes)' },
  ] as const;
  for (const { after, reason } of cases) {
    it(`its body ${after === 'stall' ? 'stalls' : 'is cut off by a close'} after 7 of 1000 bytes: not delivered; retried, then dead-lettered as FORWARD_ANSWER_INCOMPLETE`, async () => {
      const app = await startCutOffApp({ ...CUT_OFF_200, after });
      // undici checks a body's timeout on a coarse clock (about 1 s): two attempts are enough.
      const h = harness({ retry: { maxAttempts: 2, baseDelayMs: 5, maxDelayMs: 20 } });
      const statuses: number[] = [];
      const forward = createForwarder({
        url: app.url,
        timeoutMs: 200,
        onAnswer: (_id, s) => statuses.push(s),
      });
      try {
        h.consumer.on('*', forward);
        await h.consumer.start();
        const event = createTestEnvelope('daily.data.steps.created');
        h.source.send(event.raw);
        // Settled for good: dead-lettered, or (wrongly) acked.
        const dead = await h.waitFor((r) => r.outcome.kind !== 'retry');

        const outcomes = h.reports.map((r) => r.outcome);
        expect(outcomes.map((o) => o.kind)).toEqual(['retry', 'dead']);
        expect(outcomes.every((o) => o.kind !== 'ack' && o.code === 'FORWARD_ANSWER_INCOMPLETE')).toBe(true);
        expect(await h.dedupe.peek(event.eventId)).not.toBe('done');
        expect(dead.outcome.kind === 'dead' ? dead.outcome.reason : '').toContain(
          `forward to ${app.url} answered HTTP 200, then ${reason}`,
        );
        expect(readJsonl(h.deadLetterPath)).toMatchObject([
          { code: 'FORWARD_ANSWER_INCOMPLETE', event_id: event.eventId },
        ]);
        // The app answered each time: it is reachable, and run's terminal lines show its status.
        expect(app.requests()).toBe(2);
        expect(statuses).toEqual([200, 200]);
        expect(forward.reachability()).toEqual({ ok: true });
      } finally {
        await h.cleanup();
        await forward.close();
        await app.close();
      }
    });
  }

  it('a body over 64 KiB is let go, not awaited: the 2xx delivers, whether its content-length says so or it is chunked past the limit', async () => {
    const long = await startCutOffApp({
      head: 'HTTP/1.1 200 OK\r\ncontent-length: 100000',
      body: 'partial',
      after: 'stall',
    });
    const size = 70_000;
    const chunked = await startCutOffApp({
      head: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked',
      body: `${size.toString(16)}\r\n${'x'.repeat(size)}\r\n`,
      after: 'stall',
    });
    const h = harness();
    // A timeout well inside the test's: waiting for the rest of either body would fail the attempt.
    const toLong = createForwarder({ url: long.url, timeoutMs: 1000 });
    const toChunked = createForwarder({ url: chunked.url, timeoutMs: 1000 });
    try {
      h.consumer.on('daily.data.steps.created', toLong).on('coach.nudge.created', toChunked);
      await h.consumer.start();
      const a = createTestEnvelope('daily.data.steps.created');
      const b = createTestEnvelope('coach.nudge.created');
      h.source.send(a.raw);
      h.source.send(b.raw);
      const settled = await Promise.all([a, b].map((e) => h.waitFor((r) => r.eventId === e.eventId)));
      expect(settled.map((r) => r.outcome)).toEqual([
        { kind: 'ack', result: 'handled' },
        { kind: 'ack', result: 'handled' },
      ]);
    } finally {
      await h.cleanup();
      await toLong.close();
      await toChunked.close();
      await long.close();
      await chunked.close();
    }
  });

  it('a failure status keeps its meaning when its body is cut off: 503 with Retry-After is retried after it', async () => {
    const app = await startCutOffApp({
      head: 'HTTP/1.1 503 Service Unavailable\r\nretry-after: 7\r\ncontent-length: 1000',
      body: 'partial',
      after: 'close',
    });
    const h = harness();
    const forward = createForwarder({ url: app.url, timeoutMs: 200 });
    try {
      h.consumer.on('*', forward);
      await h.consumer.start();
      h.source.send(createTestEnvelope('daily.data.steps.created').raw);
      const first = await h.waitFor(() => true);
      expect(first.outcome).toMatchObject({ kind: 'retry', code: 'HANDLER_REQUESTED_RETRY', delayMs: 7000 });
    } finally {
      await h.cleanup();
      await forward.close();
      await app.close();
    }
  });

  it('--to http: a 2xx cut off or stalled is not taken (FORWARD_ANSWER_INCOMPLETE), for replay, trigger and the target itself', async () => {
    const closing = await startCutOffApp({ ...CUT_OFF_200, after: 'close' });
    const stalling = await startCutOffApp({ ...CUT_OFF_200, after: 'stall' });
    const target = httpTarget(new URL(stalling.url), { connections: 1, timeoutMs: 200 });
    try {
      const { file } = oneEventFile('dead.jsonl');
      const failed = join(dir.path, 'failed.jsonl');
      const replayed = await runReplay(file, [
        '--to',
        closing.url,
        '--attempts',
        '1',
        '--dead-letter',
        failed,
      ]);
      expect(replayed.code).toBe(1);
      expect(replayed.lines[0]).toMatchObject({ outcome: 'dead', code: 'FORWARD_ANSWER_INCOMPLETE' });
      expect(String(replayed.lines[0]?.reason)).toContain(
        `POST ${closing.url} answered HTTP 200, then the connection closed before the end of its body`,
      );
      expect(replayed.summary).toMatchObject({ injected: 0, failed: 1 });

      const triggered = await runCli(['trigger', 'daily.data.steps.created', '--to', closing.url]);
      expect(triggered.code).toBe(1);
      expect(triggered.stderr).toContain('[FORWARD_ANSWER_INCOMPLETE]');

      const sent = target.send({ body: createTestEnvelope('daily.data.steps.created').raw });
      await expect(sent).rejects.toMatchObject({
        code: 'FORWARD_ANSWER_INCOMPLETE',
        message: `POST ${stalling.url} answered HTTP 200, then timed out after 200ms waiting for the rest of its body (7 of 1000 bytes)`,
      });
    } finally {
      await target.close();
      await closing.close();
      await stalling.close();
    }
  });
});

describe('a hand-off without an answer names the address it tried', () => {
  it('a host name that resolves to a refusing address: the code and that address', async () => {
    const closed = await startServer(() => undefined);
    const port = new URL(closed.origin).port;
    await closed.close();
    const named = createHttpHandoff(`http://localhost:${port}/events`, { connections: 1, timeoutMs: 5000 });
    const literal = createHttpHandoff(`http://127.0.0.1:${port}/events`, { connections: 1, timeoutMs: 5000 });
    try {
      const byName: unknown = await named.post({ headers: {}, body: '{}' }).catch((error: unknown) => error);
      expect((byName as HttpHandoffFailure).reason).toMatch(
        new RegExp(
          `^failed: connection refused \\(ECONNREFUSED\\), address (127\\.0\\.0\\.1|\\[::1\\]):${port}`,
        ),
      );
      // An IP address in the URL is named already: said once.
      const byAddress: unknown = await literal
        .post({ headers: {}, body: '{}' })
        .catch((error: unknown) => error);
      expect((byAddress as HttpHandoffFailure).reason).toBe('failed: connection refused (ECONNREFUSED)');
    } finally {
      await named.close();
      await literal.close();
    }
  });
});
