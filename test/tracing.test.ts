/**
 * Spans per delivery through the OpenTelemetry API, with a real SDK (sdk-trace-base) registered
 * in this test's process: one delivery span (messaging attributes, the kit's ids once verified,
 * outcome and code), its steps and handlers as children, and a link (not a parent) to the trace
 * context the message carried.
 */
import { trace } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createConsumer } from '../src/consumer/consumer.js';
import { createTestEnvelope, forgedEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { silentLogger } from '../src/core/logger.js';
import type { RawMessage } from '../src/core/source-adapter.js';
import { tempDir } from './support/harness.js';
import { recordSpans } from './support/spans.js';

let recorder: ReturnType<typeof recordSpans>;
beforeAll(() => {
  recorder = recordSpans();
});
afterAll(() => recorder.stop());
beforeEach(() => recorder.reset());

const PRODUCER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const PRODUCER_SPAN = '00f067aa0ba902b7';

function consumer(options: { tracing?: boolean; retry?: { maxAttempts: number } } = {}) {
  return createConsumer({
    secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
    logger: silentLogger(),
    deadLetter: { write: async () => {}, close: async () => {} },
    ...options,
  });
}

function message(body: string, extra: Partial<RawMessage> = {}): RawMessage {
  return { id: 'msg-1', body, attempt: 1, enqueuedAt: Date.now(), ...extra };
}

const byName = (spans: readonly ReadableSpan[], name: string) => spans.find((s) => s.name.startsWith(name));
const parentOf = (span: ReadableSpan | undefined) => span?.parentSpanContext?.spanId;

describe('a span per delivery', () => {
  it('with messaging attributes, the verified ids, children for verify, dedupe and each handler, and a link to the carried context', async () => {
    const c = consumer();
    const seen: (string | undefined)[] = [];
    c.on('daily.data.steps.created', function stepsHandler() {
      seen.push(trace.getActiveSpan()?.spanContext().spanId);
    });
    const envelope = createTestEnvelope('daily.data.steps.created');
    const result = await c.process(
      message(envelope.raw, {
        traceContext: { traceparent: `00-${PRODUCER_TRACE}-${PRODUCER_SPAN}-01`, tracestate: 'vendor=1' },
      }),
    );
    expect(result.outcome).toMatchObject({ kind: 'ack', result: 'handled' });

    const spans = recorder.spans();
    const delivery = byName(spans, 'process ');
    expect(delivery?.kind).toBe(4); // SpanKind.CONSUMER
    expect(delivery?.attributes).toMatchObject({
      'messaging.operation.type': 'process',
      'messaging.message.id': 'msg-1',
      'partner_events.delivery.attempt': 1,
      'partner_events.event_id': envelope.eventId,
      'partner_events.event_type': 'daily.data.steps.created',
      'partner_events.key_id': 'current',
      'partner_events.outcome': 'handled',
    });
    expect(delivery?.status.code).not.toBe(2);
    // A link, not a parent: the delivery starts its own trace.
    expect(delivery?.spanContext().traceId).not.toBe(PRODUCER_TRACE);
    expect(parentOf(delivery)).toBeUndefined();
    expect(delivery?.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([
      [PRODUCER_TRACE, PRODUCER_SPAN],
    ]);
    expect(delivery?.links[0]?.context.traceState?.get('vendor')).toBe('1');

    const deliveryId = delivery?.spanContext().spanId;
    for (const step of [
      'partner_events.verify',
      'partner_events.dedupe.claim',
      'partner_events.dedupe.complete',
    ]) {
      expect(parentOf(byName(spans, step)), step).toBe(deliveryId);
    }
    expect(byName(spans, 'partner_events.dedupe.claim')?.attributes['partner_events.result']).toBe('claimed');
    const handler = byName(spans, 'partner_events.handler stepsHandler');
    expect(parentOf(handler)).toBe(deliveryId);
    // The handler ran with its own span active.
    expect(seen).toEqual([handler?.spanContext().spanId]);
    expect(new Set(spans.map((s) => s.spanContext().traceId))).toEqual(
      new Set([delivery?.spanContext().traceId]),
    );
  });

  it('links to an AWS X-Ray trace header, and ignores a malformed traceparent', async () => {
    const c = consumer();
    c.on('*', () => {});
    await c.process(
      message(createTestEnvelope('daily.data.steps.created').raw, {
        traceContext: {
          awsTraceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1',
        },
      }),
    );
    await c.process(
      message(createTestEnvelope('daily.data.steps.created').raw, {
        id: 'msg-2',
        traceContext: { traceparent: 'not-a-traceparent' },
      }),
    );
    const deliveries = recorder.spans().filter((s) => s.name.startsWith('process '));
    expect(deliveries.map((d) => d.links.map((l) => `${l.context.traceId}/${l.context.spanId}`))).toEqual([
      ['5759e988bd862e3fe1be46a994272793/53995c3f42cd8ad8'],
      [],
    ]);
  });

  it('marks retries and dead letters as errors with their code, and carries no ids before verification', async () => {
    const c = consumer({ retry: { maxAttempts: 5 } });
    c.on('*', () => {
      throw new Error('the app is down');
    });
    await c.process(message(forgedEnvelope('daily.data.steps.created').raw));
    await c.process(message('{"not": "an envelope"}', { id: 'msg-2' }));
    await c.process(message(createTestEnvelope('daily.data.steps.created').raw, { id: 'msg-3' }));
    const deliveries = recorder.spans().filter((s) => s.name.startsWith('process '));
    expect(
      deliveries.map((d) => [d.status.code, d.status.message, d.attributes['partner_events.outcome']]),
    ).toEqual([
      [2, 'SIGNATURE_MISMATCH', 'retry'],
      [2, 'MALFORMED_ENVELOPE', 'dead'],
      [2, 'HANDLER_FAILED', 'retry'],
    ]);
    expect(deliveries[0]?.attributes['partner_events.event_id']).toBeUndefined();
    expect(byName(recorder.spans(), 'partner_events.verify')?.status).toMatchObject({
      code: 2,
      message: 'SIGNATURE_MISMATCH',
    });
    const handler = byName(recorder.spans(), 'partner_events.handler');
    expect(handler?.status).toMatchObject({ code: 2, message: 'Error' });
  });

  it('reports the final outcome when the dead-letter write fails: a retry with the dead code, not dead', async () => {
    // The JSONL sink on a path that is a directory: every append fails (EISDIR).
    const dir = tempDir('phe-tracing-');
    const c = createConsumer({
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      logger: silentLogger(),
      retry: { maxAttempts: 1 },
      deadLetter: dir.path,
    });
    c.on('*', () => {
      throw new Error('the app is down');
    });
    const result = await c.process(message(createTestEnvelope('daily.data.steps.created').raw));
    expect(result.outcome).toMatchObject({ kind: 'retry', code: 'HANDLER_FAILED' });
    const deliveries = recorder.spans().filter((s) => s.name.startsWith('process '));
    expect(
      deliveries.map((d) => [d.attributes['partner_events.outcome'], d.attributes['partner_events.code']]),
    ).toEqual([['retry', 'HANDLER_FAILED']]);
    expect(deliveries[0]?.status).toEqual({ code: 2, message: 'HANDLER_FAILED' });
    await c.stop();
    dir.cleanup();
  });

  it('a batch: each message its own delivery span; a claim span covers the store call, not the verification of the rest', async () => {
    const { createMemorySource } = await import('../adapters/memory/index.js');
    const source = createMemorySource({ endWhenEmpty: true });
    const c = createConsumer({
      source,
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      logger: silentLogger(),
      deadLetter: { write: async () => {}, close: async () => {} },
    });
    c.on('*', () => {});
    // The last one is large (its verification takes milliseconds), so that a claim span that
    // started before the batch was verified would show it beyond the clocks' sub-millisecond skew.
    const envelopes = [0, 1, 2].map((i) =>
      createTestEnvelope(
        'daily.data.steps.created',
        i === 2 ? { fields: { note: 'x'.repeat(800_000) } } : {},
      ),
    );
    for (const e of envelopes) source.send(e.raw);
    await c.start();
    await c.stopped;
    const spans = recorder.spans();
    const deliveries = spans.filter((s) => s.name.startsWith('process '));
    expect(deliveries.map((d) => d.attributes['partner_events.event_id']).sort()).toEqual(
      envelopes.map((e) => e.eventId).sort(),
    );
    // Each delivery span anchors its children's clock on its own start (sdk-trace-base's
    // AnchoredClock, from Date.now()): times of different deliveries may be ~1 ms apart.
    const ms = (t: readonly [number, number]) => t[0] * 1e3 + t[1] / 1e6;
    const lastVerifyEnd = Math.max(
      ...spans.filter((s) => s.name === 'partner_events.verify').map((s) => ms(s.endTime)),
    );
    const claims = spans.filter((s) => s.name === 'partner_events.dedupe.claim');
    expect(claims).toHaveLength(3);
    // The memory store claims a batch in one call: the claims start once all three are verified.
    for (const claim of claims) expect(ms(claim.startTime)).toBeGreaterThan(lastVerifyEnd - 1.5);
    for (const claim of claims) {
      const delivery = deliveries.find((d) => d.spanContext().spanId === parentOf(claim));
      expect(delivery).toBeDefined();
    }
  });

  it('records nothing with tracing: false', async () => {
    const c = consumer({ tracing: false });
    c.on('*', () => {});
    await c.process(message(createTestEnvelope('daily.data.steps.created').raw));
    expect(recorder.spans()).toEqual([]);
  });
});
