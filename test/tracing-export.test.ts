/**
 * `partner-events run` exporting its spans by the standard OTEL_* variables to an OTLP/HTTP
 * receiver this test starts on 127.0.0.1 (JSON encoding), with an app behind `--forward` that
 * records the traceparent it got: one trace holds delivery → verify → dedupe → forward, and the
 * app's parent is the forward span.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestEnvelope, forgedEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import {
  type LogLine,
  postEnvelope,
  type ReceivedRequest,
  startApp,
  startCli,
  startServer,
} from './support/cli.js';
import { tempDir } from './support/harness.js';
import { jsonLines } from './support/records.js';

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes?: { key: string; value: OtlpValue }[];
  links?: { traceId: string; spanId: string }[];
  status?: { code?: number; message?: string };
}
interface OtlpExport {
  resourceSpans: {
    resource?: { attributes?: { key: string; value: OtlpValue }[] };
    scopeSpans: { spans: OtlpSpan[] }[];
  }[];
}

let dir: ReturnType<typeof tempDir>;
let collector: Awaited<ReturnType<typeof startServer>>;
beforeAll(async () => {
  dir = tempDir('phe-otlp-');
  collector = await startServer((_req, res) =>
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}'),
  );
});
afterAll(async () => {
  await collector.close();
  dir.cleanup();
});

function exported(requests: readonly ReceivedRequest[]) {
  const spans: OtlpSpan[] = [];
  const resources: Record<string, unknown>[] = [];
  for (const r of requests) {
    if (r.path !== '/v1/traces') continue;
    for (const rs of (JSON.parse(r.body) as OtlpExport).resourceSpans) {
      resources.push(attributes(rs.resource?.attributes));
      for (const ss of rs.scopeSpans) spans.push(...ss.spans);
    }
  }
  return { spans, resources };
}

function attributes(list: { key: string; value: OtlpValue }[] | undefined): Record<string, unknown> {
  return Object.fromEntries(
    (list ?? []).map((a) => [a.key, a.value.stringValue ?? a.value.intValue ?? a.value.boolValue]),
  );
}

describe('run exports traces over OTLP/HTTP', () => {
  it('one trace per delivery: delivery → verify → dedupe → forward, and the app’s parent is the forward span', {
    timeout: 180_000,
  }, async () => {
    const app = await startApp();
    // Started by hand rather than with startRun: loading the SDK takes a while on a loaded machine.
    const run = startCli(
      [
        'run',
        '--no-ops',
        '--source',
        'http://127.0.0.1:0/events',
        '--forward',
        app.url,
        '--dedupe',
        'memory',
      ],
      {
        env: {
          LOG_LEVEL: 'info',
          PARTNER_EVENTS_DEAD_LETTER: join(dir.path, 'dead.jsonl'),
          OTEL_EXPORTER_OTLP_ENDPOINT: collector.origin,
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          OTEL_SERVICE_NAME: 'health-app-sidecar',
          OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=test',
          OTEL_TRACES_SAMPLER: 'always_on',
        },
        killAfterMs: 120_000,
      },
    );
    const logs = () => jsonLines(run.output()) as LogLine[];
    const find = (msg: string) => logs().find((l) => l.msg?.startsWith(msg));
    await vi.waitFor(() => expect(find('consumer started'), run.output()).toBeDefined(), {
      timeout: 90_000,
      interval: 50,
    });
    const ingress = String(find('listening for envelopes')?.ingress);
    let output = '';
    const event = createTestEnvelope('daily.data.steps.created');
    try {
      const producer = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
      const sent = await fetch(ingress, {
        method: 'POST',
        body: event.raw,
        headers: { 'content-type': 'application/json', traceparent: producer },
      });
      expect(sent.status).toBe(200);
      expect((await postEnvelope(ingress, forgedEnvelope('daily.data.steps.created').raw)).status).toBe(503);
      expect(find('exporting traces over OTLP/HTTP')).toBeDefined();
    } finally {
      run.child.kill('SIGTERM'); // a clean stop flushes the spans still buffered
      const result = await run.done;
      output = result.stdout + result.stderr;
      await app.close();
    }
    const { spans, resources } = exported(collector.received);
    expect(spans.length, output).toBeGreaterThan(0);
    expect(resources[0]).toMatchObject({
      'service.name': 'health-app-sidecar',
      'deployment.environment': 'test',
    });

    const handled = spans.find(
      (s) => s.name === 'process http' && attributes(s.attributes)['partner_events.outcome'] === 'handled',
    );
    expect(handled, JSON.stringify(spans.map((s) => s.name))).toBeDefined();
    expect(attributes(handled?.attributes)).toMatchObject({
      'messaging.system': 'http',
      'messaging.operation.type': 'process',
      'partner_events.key_id': 'current',
      'partner_events.event_type': 'daily.data.steps.created',
    });
    expect(handled?.links?.map((l) => `${l.traceId}-${l.spanId}`)).toEqual([
      '0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331',
    ]);
    const trace = spans.filter((s) => s.traceId === handled?.traceId);
    const child = (name: string, parent: OtlpSpan | undefined) =>
      trace.find((s) => s.name.startsWith(name) && s.parentSpanId === parent?.spanId);
    expect(child('partner_events.verify', handled)).toBeDefined();
    expect(child('partner_events.dedupe.claim', handled)).toBeDefined();
    expect(child('partner_events.dedupe.complete', handled)).toBeDefined();
    const handler = child('partner_events.handler', handled);
    const forward = child('partner_events.forward', handler);
    expect(forward, JSON.stringify(trace.map((s) => [s.name, s.spanId, s.parentSpanId]))).toBeDefined();
    expect(attributes(forward?.attributes)['http.response.status_code']).toBe(204);

    // The app got the forward span as its parent.
    const got = app.received[0]?.headers.traceparent;
    expect(got).toBe(`00-${handled?.traceId}-${forward?.spanId}-01`);

    // The forged delivery: a retry, an error with its code.
    const forged = spans.find(
      (s) => attributes(s.attributes)['partner_events.code'] === 'SIGNATURE_MISMATCH',
    );
    expect(forged?.status).toMatchObject({ code: 2, message: 'SIGNATURE_MISMATCH' });

    // Nothing secret or private in anything exported.
    const text = collector.received.map((r) => r.body).join('\n');
    expect(text).not.toContain(TEST_SIGNING_SECRET);
    expect(text).not.toContain(JSON.parse(event.raw).signature);
    expect(text).not.toContain(JSON.parse(event.raw).body);
  });
});

describe('run --handlers with trace export', () => {
  it('runs each handler inside its span: trace.getActiveSpan() there is the handler span, after an await too', {
    timeout: 180_000,
  }, async () => {
    const api = pathToFileURL(createRequire(import.meta.url).resolve('@opentelemetry/api')).href;
    const seen = join(dir.path, 'seen.txt');
    const module = join(dir.path, 'handlers.mjs');
    writeFileSync(
      module,
      `import { trace } from ${JSON.stringify(api)};
       import { appendFileSync } from 'node:fs';
       export default {
         '*': async () => {
           await new Promise((resolve) => setTimeout(resolve, 1));
           const span = trace.getActiveSpan();
           appendFileSync(${JSON.stringify(seen)}, (span ? span.spanContext().spanId : 'none') + '\\n');
         },
       };`,
    );
    const events = join(dir.path, 'events.jsonl');
    writeFileSync(events, `${createTestEnvelope('daily.data.steps.created').raw}\n`);
    collector.received.length = 0;
    const result = await startCli(
      ['run', '--no-ops', '--source', `file:${events}`, '--handlers', module, '--dedupe', 'memory'],
      {
        env: {
          PARTNER_EVENTS_DEAD_LETTER: join(dir.path, 'dead-2.jsonl'),
          OTEL_EXPORTER_OTLP_ENDPOINT: collector.origin,
          OTEL_SERVICE_NAME: 'handlers-sidecar',
        },
        killAfterMs: 120_000,
      },
    ).done;
    expect(result.code, result.stdout + result.stderr).toBe(0);
    const { spans } = exported(collector.received);
    const handler = spans.find((s) => s.name.startsWith('partner_events.handler'));
    expect(handler, JSON.stringify(spans.map((s) => s.name))).toBeDefined();
    expect(readFileSync(seen, 'utf8').trim()).toBe(handler?.spanId);
  });
});

describe('without the OTEL variables', () => {
  it('asks for export only by the standard variables', async () => {
    const { traceExportRequested } = await import('../src/sidecar/tracing-export.js');
    expect(traceExportRequested({})).toBe(false);
    expect(traceExportRequested({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on' })).toBe(false);
    expect(traceExportRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' })).toBe(true);
    expect(
      traceExportRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' }),
    ).toBe(true);
    expect(traceExportRequested({ OTEL_TRACES_EXPORTER: 'otlp' })).toBe(true);
    expect(
      traceExportRequested({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x' }),
    ).toBe(false);
    expect(traceExportRequested({ OTEL_SDK_DISABLED: 'true', OTEL_TRACES_EXPORTER: 'otlp' })).toBe(false);
  });

  it('run registers no tracer provider and loads no SDK package', { timeout: 180_000 }, async () => {
    const seen = join(dir.path, 'registered.txt');
    const module = join(dir.path, 'probe-handlers.mjs');
    // What the handler sees: the API's global registry, and every SDK module CommonJS loaded.
    writeFileSync(
      module,
      `import { appendFileSync } from 'node:fs';
       import { createRequire } from 'node:module';
       const require = createRequire(import.meta.url);
       export default {
         '*': () => {
           const registry = globalThis[Symbol.for('opentelemetry.js.api.1')];
           const sdk = Object.keys(require.cache).filter((p) => /@opentelemetry[\\\\/](sdk|exporter|resources)/.test(p));
           appendFileSync(${JSON.stringify(seen)}, JSON.stringify({ trace: registry?.trace !== undefined, sdk }) + '\\n');
         },
       };`,
    );
    const events = join(dir.path, 'events-3.jsonl');
    writeFileSync(events, `${createTestEnvelope('daily.data.steps.created').raw}\n`);
    const result = await startCli(
      ['run', '--no-ops', '--source', `file:${events}`, '--handlers', module, '--dedupe', 'memory'],
      { env: { PARTNER_EVENTS_DEAD_LETTER: join(dir.path, 'dead-3.jsonl') }, killAfterMs: 120_000 },
    ).done;
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(JSON.parse(readFileSync(seen, 'utf8'))).toEqual({ trace: false, sdk: [] });
  });
});
