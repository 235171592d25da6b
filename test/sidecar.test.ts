/**
 * The sidecar as a user runs it: `partner-events run` as a child process, an app on 127.0.0.1,
 * envelopes POSTed to its HTTP ingress or read from a file, and its ops endpoints.
 */
import { writeFileSync } from 'node:fs';
import { Agent, get as httpGet, type IncomingMessage } from 'node:http';
import { type AddressInfo, createServer as createNetServer } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTestEnvelope, forgedEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { ConfigError } from '../src/core/errors.js';
import { silentLogger } from '../src/core/logger.js';
import { postEnvelope as post, runCli, runWithConfig, startApp, startRun } from './support/cli.js';
import { tempDir } from './support/harness.js';
import { HAS_REDIS, RedisServer } from './support/redis-server.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-sidecar-');
});
afterEach(() => dir.cleanup());

/**
 * Starts `run` with an HTTP ingress forwarding to `forward`, its ops endpoints on a free port and
 * its dead letters in the test's directory; resolves once both are up.
 */
function startSidecar(
  forward: string,
  options: { dedupe?: string; args?: string[]; env?: NodeJS.ProcessEnv; killAfterMs?: number } = {},
) {
  const { dedupe = 'memory', args = [], env = {}, killAfterMs } = options;
  const ingress = ['--source', 'http://127.0.0.1:0/events', '--forward', forward, '--dedupe', dedupe];
  return startRun(['--ops-port', '0', ...ingress, ...args], {
    env: { PARTNER_EVENTS_DEAD_LETTER: join(dir.path, 'dead.jsonl'), ...env },
    ...(killAfterMs === undefined ? {} : { killAfterMs }),
  });
}

function metric(text: string, name: string, labels = ''): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels ? `{${labels}}` : ''} `));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

describe('sidecar configuration', () => {
  it('names the field, its environment variable and the problem, before anything connects', async () => {
    const result = await runWithConfig(
      join(dir.path, 'worker.yaml'),
      'source: file:/nowhere\nconcurrency: many\nretry:\n  maxAttemps: 3\nforward: not a url\n',
    );
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('CONFIG_INVALID');
    expect(result.stderr).toContain('concurrency (PARTNER_EVENTS_CONCURRENCY)');
    expect(result.stderr).toContain('maxAttemps');
    expect(result.stderr).toContain('forward.url (PARTNER_EVENTS_FORWARD_URL)');
  });

  it('layers file < environment < flags', async () => {
    const app = await startApp();
    try {
      const events = join(dir.path, 'events.jsonl');
      writeFileSync(events, `${createTestEnvelope('daily.data.steps.created').raw}\n`);
      // The file's source is overridden by the environment, its forward URL by a flag.
      const result = await runWithConfig(
        join(dir.path, 'worker.json'),
        JSON.stringify({ source: 'file:/does/not/exist', forward: { url: 'http://127.0.0.1:9/x' } }),
        ['--forward', app.url, '--dedupe', 'memory'],
        { env: { PARTNER_EVENTS_SOURCE: `file:${events}` } },
      );
      expect(result.code).toBe(0);
      expect(app.received).toHaveLength(1);
    } finally {
      await app.close();
    }
  });
});

describe('sidecar configuration of the queue adapters', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
  });

  it('reads the sqs, storageQueue and eventHubs sections from file and environment into the adapters', async () => {
    const { configFromEnv, resolveSidecarConfig } = await import('../src/sidecar/config.js');
    const { openSource } = await import('../src/cli/sources.js');
    const file = {
      forward: 'http://127.0.0.1:9/events',
      storageQueue: { numberOfMessages: 7, encoding: 'base64', requestTimeoutMs: 2500 },
      eventHubs: { deadLetterQueue: 'orders-poison', startPosition: 'latest' },
    };
    const env = configFromEnv({
      PARTNER_EVENTS_SQS_BATCH_SIZE: '5',
      PARTNER_EVENTS_SQS_MAX_CONCURRENT_RECEIVES: '2',
      PARTNER_EVENTS_SQS_DEAD_LETTER_QUEUE: 'http://127.0.0.1:9/000000000000/dlq',
    });
    const open = (source: string) =>
      openSource(resolveSidecarConfig({ file: { ...file, source }, env }), silentLogger());

    const sqs = await open('sqs:http://127.0.0.1:9/000000000000/orders');
    expect(sqs).toMatchObject({ maxBatchSize: 5, maxConcurrentReceives: 2 });
    await sqs.close();

    vi.stubEnv('AZURE_STORAGE_CONNECTION_STRING', 'UseDevelopmentStorage=true');
    const queue = await open('azure-storage-queue:orders');
    expect(queue).toMatchObject({ maxBatchSize: 7 });
    await queue.close();

    vi.stubEnv(
      'EVENTHUBS_CONNECTION_STRING',
      'Endpoint=sb://127.0.0.1:9;SharedAccessKeyName=dev;SharedAccessKey=dev;UseDevelopmentEmulator=true',
    );
    vi.stubEnv('EVENTHUBS_CHECKPOINT_STORE', `sqlite:${join(dir.path, 'cp.db')}`);
    const hub = await open('azure-event-hubs:orders');
    expect(hub).toMatchObject({ deadLetterQueueName: 'orders-poison' });
    await hub.close();
  });

  it('names the section, the field and its environment variable when a value is wrong', async () => {
    const { configFromEnv, resolveSidecarConfig } = await import('../src/sidecar/config.js');
    const attempt = () =>
      resolveSidecarConfig({
        file: { source: 'file:x', forward: 'http://127.0.0.1:9/', storageQueue: { colour: 'blue' } },
        env: configFromEnv({
          PARTNER_EVENTS_SQS_BATCH_SIZE: '50',
          PARTNER_EVENTS_EVENT_HUBS_START_POSITION: 'middle',
        }),
      });
    expect(attempt).toThrow(ConfigError);
    expect(attempt).toThrow(/sqs\.batchSize \(PARTNER_EVENTS_SQS_BATCH_SIZE\)/);
    expect(attempt).toThrow(/eventHubs\.startPosition \(PARTNER_EVENTS_EVENT_HUBS_START_POSITION\)/);
    expect(attempt).toThrow(/colour/);
  });
});

describe('sidecar with HTTP ingress', () => {
  it('forwards verified events, answers each sender with its outcome, and counts it all in /metrics', async () => {
    const app = await startApp();
    const sidecar = await startSidecar(app.url);
    try {
      const a = createTestEnvelope('daily.data.heart_rate.created');
      const b = createTestEnvelope('coach.nudge.created');
      expect(await post(sidecar.ingress, a.raw)).toEqual({
        status: 200,
        body: { outcome: 'ack', result: 'handled' },
      });
      expect((await post(sidecar.ingress, b.raw)).status).toBe(200);
      expect(await post(sidecar.ingress, a.raw)).toEqual({
        status: 200,
        body: { outcome: 'ack', result: 'duplicate' },
      });
      const forged = await post(sidecar.ingress, forgedEnvelope('daily.data.steps.created').raw);
      expect(forged.status).toBe(503);
      expect(forged.body).toMatchObject({ outcome: 'retry', code: 'SIGNATURE_MISMATCH' });
      const broken = await post(sidecar.ingress, '{"not": "an envelope"}');
      expect(broken).toMatchObject({
        status: 422,
        body: { outcome: 'rejected', code: 'MALFORMED_ENVELOPE' },
      });
      expect(app.eventIds().sort()).toEqual([a.eventId, b.eventId].sort());
      expect(app.received[0]?.headers['partner-event-attempt']).toBe('1');

      const metrics = await (await fetch(`${sidecar.ops}/metrics`)).text();
      expect(metric(metrics, 'partner_events_received_total')).toBe(5);
      expect(metric(metrics, 'partner_events_verified_total', 'key_id="current"')).toBe(3);
      expect(
        metric(metrics, 'partner_events_handled_total', 'event_type="daily.data.heart_rate.created"'),
      ).toBe(1);
      expect(metric(metrics, 'partner_events_handled_total', 'event_type="coach.nudge.created"')).toBe(1);
      expect(metric(metrics, 'partner_events_duplicates_total')).toBe(1);
      expect(metric(metrics, 'partner_events_rejected_total', 'code="SIGNATURE_MISMATCH"')).toBe(1);
      expect(metric(metrics, 'partner_events_retried_total', 'code="SIGNATURE_MISMATCH"')).toBe(1);
      expect(metric(metrics, 'partner_events_dead_lettered_total', 'code="MALFORMED_ENVELOPE"')).toBe(1);
      expect(metric(metrics, 'partner_events_processing_seconds_count', 'outcome="ack"')).toBe(3);
      expect(metric(metrics, 'partner_events_handler_seconds_count', 'outcome="ok"')).toBe(2);
      expect(metric(metrics, 'partner_events_event_age_seconds_count')).toBe(3);
      expect(metric(metrics, 'partner_events_in_flight')).toBe(0);
      expect(metric(metrics, 'partner_events_in_flight_bytes')).toBe(0);
      expect((await fetch(`${sidecar.ops}/healthz`)).status).toBe(200);
      const ready = await fetch(`${sidecar.ops}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toMatchObject({
        ready: true,
        checks: { dedupe: { ok: true }, secrets: { ok: true } },
      });
      // A line per retry and dead event, with id, type, code and attempt; acks only counted at
      // info (the summary at stop); never a secret.
      expect(sidecar.logs().find((l) => l.code === 'SIGNATURE_MISMATCH')).toMatchObject({
        attempt: 1,
        outcome: 'retry',
      });
      await sidecar.stop();
      expect(sidecar.logs().filter((l) => l.msg === 'event acked')).toEqual([]);
      expect(sidecar.find('events settled')).toMatchObject({
        level: 30,
        handled: 2,
        duplicate: 1,
        retried: 1,
        dead_lettered: 1,
        key_ids: { current: 3 },
      });
      expect(sidecar.output()).not.toContain(TEST_SIGNING_SECRET);
    } finally {
      await sidecar.stop();
      await app.close();
    }
  });

  it('retries when the app fails, and succeeds once it recovers', async () => {
    let failures = 2;
    const app = await startApp(() => (failures-- > 0 ? 500 : 204));
    const events = join(dir.path, 'events.jsonl');
    const event = createTestEnvelope('daily.data.steps.created');
    writeFileSync(events, `${event.raw}\n`);
    const result = await runCli(
      ['run', '--source', `file:${events}`, '--forward', app.url, '--dedupe', 'memory'],
      {
        env: { PARTNER_EVENTS_RETRY_BASE_DELAY_MS: '20', LOG_LEVEL: 'info' },
      },
    );
    await app.close();
    expect(result.code).toBe(0);
    expect(app.received).toHaveLength(3);
    expect(app.received.map((r) => r.headers['partner-event-attempt'])).toEqual(['1', '2', '3']);
    expect(result.stdout).toContain('"msg":"events settled"');
    expect(result.stdout).toContain('"handled":1');
    expect(result.stdout).toContain('"retried":2');
  });

  it('SIGTERM with a console page open and a kept-alive connection idle: the worker exits 0, and the page sees its stream end', async () => {
    const app = await startApp();
    // Killed after 15 s: a worker held open by the page fails here, not at the test's timeout.
    const sidecar = await startSidecar(app.url, { killAfterMs: 15_000 });
    const agent = new Agent({ keepAlive: true });
    try {
      const get = (path: string) =>
        new Promise<IncomingMessage>((resolve, reject) =>
          httpGet(`${sidecar.ops}${path}`, { agent }, resolve).on('error', reject),
        );
      const health = await get('/healthz');
      health.resume();
      await new Promise((resolve) => health.on('end', resolve));
      const stream = await get('/console/api/stream'); // a second connection: the first is idle
      expect(stream.headers['content-type']).toBe('text/event-stream');
      const ended = new Promise<string>((resolve) => {
        stream.on('end', () => resolve('end')).on('error', () => resolve('aborted'));
      });
      await new Promise((resolve) => stream.once('data', resolve));
      stream.resume();

      const result = await sidecar.stop();
      expect(result.code).toBe(0);
      expect(await ended).toBe('end');
    } finally {
      agent.destroy();
      await sidecar.stop();
      await app.close();
    }
  });

  it('SIGTERM mid-batch: every request gets a definite answer and nothing acked went unforwarded', async () => {
    const app = await startApp();
    const sidecar = await startSidecar(app.url, { args: ['--concurrency', '4'] });
    const events = Array.from({ length: 40 }, () => createTestEnvelope('daily.data.steps.created'));
    const answers = events.map((e) => post(sidecar.ingress, e.raw).catch(() => ({ status: 0, body: {} })));
    await vi.waitFor(() => expect(app.received.length).toBeGreaterThan(0), { interval: 5 });
    const stopped = sidecar.stop();
    const settled = await Promise.all(answers);
    const result = await stopped;
    await app.close();
    expect(result.code).toBe(0);
    const acked = new Set(events.filter((_, i) => settled[i]?.status === 200).map((e) => e.eventId));
    const forwarded = new Set(app.eventIds());
    // Acked means forwarded; everything else was told to retry (503) or could not connect (0).
    for (const id of acked) expect(forwarded.has(id)).toBe(true);
    expect(settled.every((s) => [200, 503, 0].includes(s?.status ?? -1))).toBe(true);
    expect(acked.size).toBeGreaterThan(0);
  });

  it('rotates secrets from a file while events flow: the old key passes in its grace window, then fails', async () => {
    const app = await startApp();
    const secrets = join(dir.path, 'secrets.json');
    const write = (keys: object[]) => writeFileSync(secrets, JSON.stringify({ keys }));
    write([{ id: 'old', secret: 'the-old-signing-secret' }]);
    const sidecar = await startSidecar(app.url, {
      args: ['--secrets-file', secrets],
      env: { PARTNER_EVENTS_SIGNING_SECRET: '', LOG_LEVEL: 'debug' },
    });
    const signed = (secret: string) => createTestEnvelope('daily.data.steps.created', { secret }).raw;
    try {
      expect((await post(sidecar.ingress, signed('the-old-signing-secret'))).status).toBe(200);
      expect((await post(sidecar.ingress, signed('the-new-signing-secret'))).status).toBe(503);
      const graceEnds = Date.now() + 2500;
      write([
        { id: 'new', secret: 'the-new-signing-secret' },
        { id: 'old', secret: 'the-old-signing-secret', not_after: new Date(graceEnds).toISOString() },
      ]);
      await vi.waitFor(() => expect(sidecar.find('signing secrets reloaded')).toBeDefined(), {
        timeout: 5000,
      });
      expect((await post(sidecar.ingress, signed('the-new-signing-secret'))).status).toBe(200);
      expect((await post(sidecar.ingress, signed('the-old-signing-secret'))).status).toBe(200);
      await vi.waitFor(() => expect(Date.now()).toBeGreaterThan(graceEnds), { timeout: 5000, interval: 100 });
      const late = await post(sidecar.ingress, signed('the-old-signing-secret'));
      expect(late).toMatchObject({ status: 503, body: { code: 'SIGNATURE_MISMATCH' } });
      expect((await post(sidecar.ingress, signed('the-new-signing-secret'))).status).toBe(200);
      const keys = () =>
        sidecar
          .logs()
          .filter((l) => l.msg === 'event acked')
          .map((l) => l.key_id);
      await vi.waitFor(() => expect(keys()).toEqual(['old', 'new', 'old', 'new']));
      expect(sidecar.output()).not.toContain('the-old-signing-secret');
    } finally {
      await sidecar.stop();
      await app.close();
    }
  });

  it.skipIf(!HAS_REDIS)(
    '/readyz flips when the dedupe store goes away, and back when it returns',
    async () => {
      const redis = await RedisServer.start();
      const app = await startApp();
      const sidecar = await startSidecar(app.url, { dedupe: redis.url });
      try {
        const ready = async () => (await fetch(`${sidecar.ops}/readyz`)).status;
        await vi.waitFor(async () => expect(await ready()).toBe(200), { timeout: 5000 });
        await redis.pause();
        await vi.waitFor(async () => expect(await ready()).toBe(503), { timeout: 5000 });
        const body = await (await fetch(`${sidecar.ops}/readyz`)).json();
        expect(body).toMatchObject({ ready: false, checks: { dedupe: { ok: false } } });
        // Nothing is acked meanwhile: the sender is told to retry.
        const during = await post(sidecar.ingress, createTestEnvelope('daily.data.steps.created').raw);
        expect(during).toMatchObject({ status: 503, body: { code: 'DEDUPE_UNAVAILABLE' } });
        await redis.resume();
        await vi.waitFor(async () => expect(await ready()).toBe(200), { timeout: 10_000 });
        expect((await post(sidecar.ingress, createTestEnvelope('daily.data.steps.created').raw)).status).toBe(
          200,
        );
      } finally {
        await sidecar.stop();
        await app.close();
        await redis.stop();
      }
    },
  );
});

describe('deployment examples', () => {
  it('the Kubernetes example’s worker config is valid for this version', async () => {
    const { readFileSync } = await import('node:fs');
    const { parseAllDocuments } = await import('yaml');
    const { resolveSidecarConfig } = await import('../src/sidecar/config.js');
    const docs = parseAllDocuments(readFileSync('examples/kubernetes/sidecar.yaml', 'utf8')).map((d) =>
      d.toJS(),
    );
    const configMap = docs.find((d) => d?.kind === 'ConfigMap');
    const { parse } = await import('yaml');
    const config = resolveSidecarConfig({ file: parse(configMap.data['worker.yaml']) });
    expect(config).toMatchObject({
      tenant: 'acme',
      ops: { host: '0.0.0.0', port: 9464 },
      forward: { timeoutMs: 10_000 },
    });
    const deployment = docs.find((d) => d?.kind === 'Deployment');
    const sidecar = deployment.spec.template.spec.containers.find(
      (c: { name: string }) => c.name === 'partner-events',
    );
    expect(sidecar.readinessProbe.httpGet.path).toBe('/readyz');
    expect(sidecar.livenessProbe.httpGet.path).toBe('/healthz');
  });
});

describe('sidecar start-up failures', () => {
  const ingressRun = (source = 'http://127.0.0.1:0/events') => [
    'run',
    '--source',
    source,
    '--forward',
    'http://127.0.0.1:9/x',
    '--dedupe',
    'memory',
  ];

  /** Runs `fn` with a port another server on 127.0.0.1 listens on. */
  async function withPortTaken<T>(fn: (port: number) => Promise<T>): Promise<T> {
    const blocker = createNetServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    try {
      return await fn((blocker.address() as AddressInfo).port);
    } finally {
      blocker.close();
    }
  }

  it('exits 2, without hanging, when the ops port is taken', async () => {
    const result = await withPortTaken((port) => runCli([...ingressRun(), '--ops-port', String(port)]));
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('cannot serve the ops endpoints');
  });

  it('exits 2, without a stack trace, when the ingress port is taken', async () => {
    const result = await withPortTaken((port) => runCli(ingressRun(`http://127.0.0.1:${port}/events`)));
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('HTTP ingress cannot listen');
    expect(result.stderr).not.toContain('    at ');
  });

  it('refuses an unknown LOG_LEVEL with a clear message', async () => {
    const result = await runCli(ingressRun(), { env: { LOG_LEVEL: 'verbose' } });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('log level "verbose"');
  });

  it('--no-ops turns the endpoints off', async () => {
    const app = await startApp();
    const events = join(dir.path, 'events.jsonl');
    writeFileSync(events, `${createTestEnvelope('daily.data.steps.created').raw}\n`);
    const result = await runCli(
      ['run', '--source', `file:${events}`, '--forward', app.url, '--dedupe', 'memory', '--no-ops'],
      {
        env: { PARTNER_EVENTS_OPS_PORT: '9464', LOG_LEVEL: 'info' },
      },
    );
    await app.close();
    expect(result.code).toBe(0);
    expect(result.stdout).not.toContain('operations endpoints');
  });
});
