/**
 * The HTTP ingress under slow and many senders: bodies being received share a byte budget, and a
 * body has a read deadline. A real server on 127.0.0.1, raw TCP senders that send when told.
 */
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createHttpIngress, type HttpIngressSource } from '../adapters/http/index.js';
import { runWithConfig, startRun } from './support/cli.js';
import { tempDir } from './support/harness.js';

interface Answer {
  status: number;
  headers: string;
  body: Record<string, unknown>;
}

/**
 * A POST over a raw socket whose body is sent piece by piece (`send`); `answer` resolves with the
 * server's response, `closed` when the server closed the connection.
 */
function slowPost(url: string, options: { contentLength?: number } = {}) {
  const target = new URL(url);
  const socket = connect(Number(target.port), target.hostname);
  const chunked = options.contentLength === undefined;
  socket.write(
    `POST ${target.pathname} HTTP/1.1\r\nhost: ${target.host}\r\n` +
      (chunked ? 'transfer-encoding: chunked\r\n' : `content-length: ${options.contentLength}\r\n`) +
      '\r\n',
  );
  let text = '';
  const answer = new Promise<Answer>((resolve, reject) => {
    const parse = () => {
      const end = text.indexOf('\r\n\r\n');
      const json = text.slice(end).match(/\{.*\}/)?.[0];
      if (end < 0 || !json) return false;
      resolve({
        status: Number(text.slice(9, 12)),
        headers: text.slice(0, end).toLowerCase(),
        body: JSON.parse(json) as Record<string, unknown>,
      });
      return true;
    };
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      parse();
    });
    socket.on('close', () => parse() || reject(new Error(`closed without an answer: ${text}`)));
  });
  answer.catch(() => undefined); // only awaited by tests that expect an answer
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  socket.on('error', () => undefined); // a reset once the server has answered and closed
  return {
    answer,
    closed,
    /** Sends `bytes` more body bytes (of a valid-looking JSON prefix; the content does not matter here). */
    send(bytes: number | string) {
      const data = typeof bytes === 'string' ? bytes : 'x'.repeat(bytes);
      return new Promise<void>((resolve) => {
        socket.write(chunked ? `${Buffer.byteLength(data).toString(16)}\r\n${data}\r\n` : data, () =>
          resolve(),
        );
      });
    },
    end() {
      if (chunked) socket.write('0\r\n\r\n');
    },
    destroy: () => socket.destroy(),
  };
}

const never = new AbortController().signal;

let source: HttpIngressSource | undefined;
afterEach(async () => {
  await source?.close();
  source = undefined;
});

describe('HTTP ingress memory bound', () => {
  it('bodies being received share maxBufferedBytes: beyond it, 503 BUSY + Retry-After, and the rest is not kept', async () => {
    source = await createHttpIngress({
      port: 0,
      maxBodyBytes: 1000,
      maxBufferedBytes: 2500,
      bodyTimeoutMs: 2000,
    });
    const ingress = source;
    const a = slowPost(ingress.url, { contentLength: 1000 });
    await a.send(900);
    await vi.waitFor(() => expect(ingress.bufferedBytes).toBe(900), { interval: 5 });
    const b = slowPost(ingress.url, { contentLength: 1000 });
    await b.send(900);
    await vi.waitFor(() => expect(ingress.bufferedBytes).toBe(1800), { interval: 5 });

    // Declared too large for what is left: refused before a byte of its body is read.
    const c = slowPost(ingress.url, { contentLength: 1000 });
    const refused = await c.answer;
    expect(refused).toMatchObject({ status: 503, body: { outcome: 'retry', code: 'BUSY' } });
    expect(refused.headers).toContain('retry-after: 1');
    await c.send(1000); // read and thrown away

    // Chunked (no length given): refused by the chunk that would go beyond.
    const d = slowPost(ingress.url);
    await d.send(500);
    await vi.waitFor(() => expect(ingress.bufferedBytes).toBe(2300), { interval: 5 });
    await d.send(300);
    expect(await d.answer).toMatchObject({ status: 503, body: { code: 'BUSY' } });
    expect(ingress.bufferedBytes).toBe(1800);
    await d.send(100);

    // The first two complete, wait for the worker, and are answered; taking them frees the budget.
    await a.send(100);
    await b.send(100);
    await vi.waitFor(() => expect(ingress.bufferedBytes).toBe(2000), { interval: 5 });
    const taken: Awaited<ReturnType<HttpIngressSource['receive']>>[] = [];
    while (taken.flat().length < 2) taken.push(await ingress.receive(10, never));
    expect(ingress.bufferedBytes).toBe(0);
    for (const message of taken.flat()) {
      if (message) await ingress.settle(message, { kind: 'ack', result: 'handled' });
    }
    expect(await a.answer).toMatchObject({ status: 200, body: { outcome: 'ack' } });
    expect(await b.answer).toMatchObject({ status: 200 });
    a.destroy();
    b.destroy();
    // The refused sender that never finished its body is disconnected at the body deadline.
    await d.closed;
    expect(ingress.bufferedBytes).toBe(0);
    c.destroy();
  });

  it('a sender that goes away mid-body gives its bytes back', async () => {
    source = await createHttpIngress({ port: 0, maxBodyBytes: 1000 });
    const ingress = source;
    const a = slowPost(ingress.url, { contentLength: 1000 });
    await a.send(600);
    await vi.waitFor(() => expect(ingress.bufferedBytes).toBe(600), { interval: 5 });
    a.destroy();
    await vi.waitFor(() => expect(ingress.bufferedBytes).toBe(0), { interval: 5 });
  });

  it('refuses a budget smaller than one body', async () => {
    await expect(createHttpIngress({ port: 0, maxBodyBytes: 1000, maxBufferedBytes: 999 })).rejects.toThrow(
      /maxBufferedBytes \(999\) is below maxBodyBytes \(1000\)/,
    );
  });
});

describe('HTTP ingress body deadline', () => {
  it('a body that has not arrived within bodyTimeoutMs gets 408 BODY_TIMEOUT and the connection closes', async () => {
    source = await createHttpIngress({ port: 0, bodyTimeoutMs: 200 });
    const ingress = source;
    const stalled = slowPost(ingress.url, { contentLength: 1000 });
    await stalled.send(10);
    const answer = await stalled.answer;
    expect(answer).toMatchObject({ status: 408, body: { outcome: 'retry', code: 'BODY_TIMEOUT' } });
    expect(String(answer.body.reason)).toContain('200ms');
    await stalled.closed;
    expect(ingress.bufferedBytes).toBe(0);
  });

  it('a body over maxBodyBytes gets 413, and the connection stays open while the sender sends the rest', async () => {
    source = await createHttpIngress({ port: 0, maxBodyBytes: 1000, bodyTimeoutMs: 5000 });
    for (const declared of [true, false]) {
      // Declared too large (refused before a byte is read), or found too large while reading.
      const sender = slowPost(source.url, declared ? { contentLength: 5000 } : {});
      await sender.send(declared ? 500 : 1500);
      const answer = await sender.answer;
      expect(answer).toMatchObject({
        status: 413,
        body: { outcome: 'rejected', code: 'ENVELOPE_TOO_LARGE' },
      });
      let closedEarly = false;
      void sender.closed.then(() => {
        closedEarly = true;
      });
      // The sender is still sending: were the connection closed now, these writes would be reset.
      for (let i = 0; i < 9; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        await sender.send(500);
        expect(closedEarly).toBe(false);
      }
      sender.end();
      expect(source.bufferedBytes).toBe(0);
      sender.destroy();
    }
  });

  it('a refused body still arriving at bodyTimeoutMs is disconnected', async () => {
    source = await createHttpIngress({ port: 0, maxBodyBytes: 1000, bodyTimeoutMs: 200 });
    const sender = slowPost(source.url, { contentLength: 1_000_000 });
    await sender.send(100);
    expect((await sender.answer).status).toBe(413);
    await sender.closed; // without the deadline, the test would time out here
  });

  it('does not touch a request whose body arrived, however long the worker then takes', async () => {
    source = await createHttpIngress({ port: 0, bodyTimeoutMs: 200 });
    const ingress = source;
    const complete = slowPost(ingress.url, { contentLength: 2 });
    await complete.send('{}');
    const [message] = (await ingress.receive(1, never)) ?? [];
    // A request that started after the first one's body arrived, timed out: the deadline has passed.
    const later = slowPost(ingress.url, { contentLength: 10 });
    expect((await later.answer).status).toBe(408);
    if (message) await ingress.settle(message, { kind: 'ack', result: 'handled' });
    expect(await complete.answer).toMatchObject({ status: 200, body: { outcome: 'ack' } });
    complete.destroy();
  });
});

describe('run with an HTTP ingress: http.* settings', () => {
  let dir: ReturnType<typeof tempDir>;
  beforeEach(() => {
    dir = tempDir('phe-ingress-');
  });
  afterEach(() => dir.cleanup());

  it('takes http.bodyTimeoutMs from the environment and http.maxBufferedBytes from the config file', async () => {
    const flags = ['--source', 'http://127.0.0.1:0/events', '--forward', 'http://127.0.0.1:9/x'];
    const worker = await startRun(flags, {
      env: { PARTNER_EVENTS_HTTP_BODY_TIMEOUT_MS: '300', PARTNER_EVENTS_DEDUPE: 'memory' },
    });
    try {
      const stalled = slowPost(worker.ingress, { contentLength: 4000 });
      await stalled.send(3000);
      expect(await stalled.answer).toMatchObject({ status: 408, body: { code: 'BODY_TIMEOUT' } });
      expect(String((await stalled.answer).body.reason)).toContain('300ms');
    } finally {
      await worker.stop();
    }

    const config = 'http:\n  maxBufferedBytes: 100\n';
    const refused = await runWithConfig(join(dir.path, 'worker.yaml'), config, [
      ...flags,
      '--dedupe',
      'memory',
    ]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('maxBufferedBytes (100) is below maxBodyBytes (1048576)');
  });
});
