/**
 * Spans of a delivery through the OpenTelemetry API, an optional peer dependency: loaded on
 * first use with `require` (so the root entry imports nothing of it), and skipped when it is not
 * installed. The kit never registers an SDK; without one every span is a non-recording no-op and
 * a delivery costs one `startSpan` call. Bodies, signatures and secrets never become attributes:
 * only ids, types, key ids, codes and broker facts do.
 */
import { createRequire } from 'node:module';
import type * as OtelApi from '@opentelemetry/api';
import type { Outcome } from './outcome.js';
import type { RawMessage, TraceCarrier } from './source-adapter.js';

type Api = typeof OtelApi;
type Span = OtelApi.Span;
type Context = OtelApi.Context;

const TRACER_NAME = 'partner-health-events';

let loaded: Api | null | undefined;

/** The OpenTelemetry API when it is installed, else null (looked up once). */
export function openTelemetryApi(): Api | null {
  if (loaded === undefined) {
    try {
      loaded = createRequire(import.meta.url)('@opentelemetry/api') as Api;
    } catch {
      loaded = null;
    }
  }
  return loaded;
}

/**
 * Where every copy of API 1.x keeps its registrations (`trace` once an SDK registered a tracer
 * provider). Read directly: without a provider every span is a no-op, and skipping `startSpan`
 * then makes a delivery's tracing cost one property read (~400 ns otherwise, measured).
 */
const API_REGISTRY = Symbol.for('opentelemetry.js.api.1');

function tracerProviderRegistered(): boolean {
  return (globalThis as { [API_REGISTRY]?: { trace?: unknown } })[API_REGISTRY]?.trace !== undefined;
}

/** `messaging.system` of each source kind, by the prefix of the source's name. */
const MESSAGING_SYSTEMS: readonly (readonly [string, string])[] = [
  ['sqs:', 'aws_sqs'],
  ['azure-event-hubs:', 'azure_eventhubs'],
  ['azure-storage-queue:', 'azure_storage_queue'],
  ['file:', 'file'],
  ['http', 'http'],
];

/** Where deliveries come from, for the span's messaging attributes. */
export interface TracedSource {
  /** The source adapter's name (`sqs:orders`, `azure-event-hubs:hub`, `http`, …). */
  readonly name: string;
}

/** Extra attributes of every delivery span (replay marks its spans with these). */
export type TraceAttributes = Readonly<Record<string, string | number | boolean>>;

/** Starts a span per delivery; one per consumer. */
export class DeliveryTracer {
  readonly #api: Api;
  readonly #tracer: OtelApi.Tracer;
  readonly #system: string;
  readonly #destination: string;
  readonly #spanName: string;
  readonly #extra: TraceAttributes | undefined;

  constructor(api: Api, source: TracedSource | undefined, extra?: TraceAttributes) {
    this.#api = api;
    this.#tracer = api.trace.getTracer(TRACER_NAME);
    const name = source?.name ?? 'library';
    const kind = MESSAGING_SYSTEMS.find(([prefix]) => name.startsWith(prefix));
    this.#system = kind?.[1] ?? 'partner_events';
    this.#destination = kind && name.length > kind[0].length ? name.slice(kind[0].length) : name;
    this.#spanName = `process ${this.#destination}`;
    this.#extra = extra;
  }

  /**
   * The delivery's span, a child of the active context (root in the sidecar), linked to the
   * trace context the message carried. Undefined when no SDK records or propagates anything.
   */
  begin(message: RawMessage): DeliveryTrace | undefined {
    if (!tracerProviderRegistered()) return undefined;
    const api = this.#api;
    const parent = api.context.active();
    const carried = message.traceContext ? remoteSpanContext(api, message.traceContext) : undefined;
    const span = this.#tracer.startSpan(
      this.#spanName,
      {
        kind: api.SpanKind.CONSUMER,
        ...(carried ? { links: [{ context: carried }] } : {}),
      },
      parent,
    );
    if (!span.isRecording() && !api.isSpanContextValid(span.spanContext())) return undefined;
    if (span.isRecording()) {
      span.setAttributes({
        'messaging.system': this.#system,
        'messaging.destination.name': this.#destination,
        'messaging.operation.type': 'process',
        'messaging.operation.name': 'process',
        'messaging.message.id': message.id,
        'partner_events.delivery.attempt': message.attempt,
        ...(typeof message.metadata?.partition_id === 'string'
          ? { 'messaging.destination.partition.id': message.metadata.partition_id }
          : {}),
        ...this.#extra,
      });
    }
    return new DeliveryTrace(api, this.#tracer, span, api.trace.setSpan(parent, span));
  }
}

/** One delivery's span and the context its steps and handlers run in. */
export class DeliveryTrace {
  readonly #api: Api;
  readonly #tracer: OtelApi.Tracer;
  readonly span: Span;
  readonly context: Context;

  constructor(api: Api, tracer: OtelApi.Tracer, span: Span, context: Context) {
    this.#api = api;
    this.#tracer = tracer;
    this.span = span;
    this.context = context;
  }

  /** A child span for one step (verify, dedupe claim/complete), ended by `StepSpan.end`. */
  step(name: string): StepSpan {
    return new StepSpan(this.#api, this.#tracer.startSpan(`partner_events.${name}`, {}, this.context));
  }

  /** A handler's span: `call` runs the handler with it active (`trace.getActiveSpan()` works there). */
  handler(index: number, name: string): HandlerSpan {
    const span = this.#tracer.startSpan(
      `partner_events.handler ${name || `#${index + 1}`}`,
      { attributes: { 'partner_events.handler.index': index } },
      this.context,
    );
    return new HandlerSpan(this.#api, span, this.#api.trace.setSpan(this.context, span));
  }

  /** What verification established: ids from the signed body (never the unverified envelope's). */
  verified(facts: { eventId: string; eventType: string; keyId: string }): void {
    if (!this.span.isRecording()) return;
    this.span.setAttributes({
      'partner_events.event_id': facts.eventId,
      'partner_events.event_type': facts.eventType,
      'partner_events.key_id': facts.keyId,
    });
  }

  /** Ends the delivery span with its outcome; retries and dead letters are errors with their code. */
  end(outcome: Outcome): void {
    const span = this.span;
    if (span.isRecording()) {
      if (outcome.kind === 'ack') {
        span.setAttribute('partner_events.outcome', outcome.result);
      } else {
        span.setAttributes({ 'partner_events.outcome': outcome.kind, 'partner_events.code': outcome.code });
        span.setStatus({ code: this.#api.SpanStatusCode.ERROR, message: outcome.code });
      }
    }
    span.end();
  }
}

/** A step's span; `end(error)` marks it failed with the error's code (never its message). */
export class StepSpan {
  readonly #api: Api;
  readonly #span: Span;

  constructor(api: Api, span: Span) {
    this.#api = api;
    this.#span = span;
  }

  end(error?: unknown, result?: string): void {
    const span = this.#span;
    if (span.isRecording()) {
      if (result !== undefined) span.setAttribute('partner_events.result', result);
      if (error !== undefined) {
        span.setStatus({ code: this.#api.SpanStatusCode.ERROR, message: codeOf(error) });
      }
    }
    span.end();
  }
}

/** A handler's span and its context. */
export class HandlerSpan {
  readonly #api: Api;
  readonly #span: Span;
  readonly #context: Context;
  #ended = false;

  constructor(api: Api, span: Span, context: Context) {
    this.#api = api;
    this.#span = span;
    this.#context = context;
  }

  /** Calls `fn(a, b)` with this span active. */
  call<A, B, R>(fn: (a: A, b: B) => R, a: A, b: B): R {
    return this.#api.context.with(this.#context, fn, undefined, a, b);
  }

  /** Ends the span once; `failure` (an error or an abort cause) marks it failed with its code. */
  end(failure?: unknown): void {
    if (this.#ended) return;
    this.#ended = true;
    if (failure !== undefined && this.#span.isRecording()) {
      this.#span.setStatus({ code: this.#api.SpanStatusCode.ERROR, message: codeOf(failure) });
    }
    this.#span.end();
  }
}

/** A stable code for a span status: the kit's error code, an abort cause, or the error's class name. */
function codeOf(error: unknown): string {
  if (typeof error === 'string') return error;
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^[A-Z_]+$/.test(code)) return code;
  return error instanceof Error ? error.name : 'error';
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const XRAY_ROOT = /(?:^|;)\s*Root=1-([0-9a-f]{8})-([0-9a-f]{24})(?:;|$)/i;
const XRAY_PARENT = /(?:^|;)\s*Parent=([0-9a-f]{16})(?:;|$)/i;
const XRAY_SAMPLED = /(?:^|;)\s*Sampled=1(?:;|$)/;

/**
 * The span context a message carried: W3C `traceparent` (+ `tracestate`), or an X-Ray
 * `AWSTraceHeader`. Malformed values are ignored: a producer's header never fails a delivery.
 */
function remoteSpanContext(api: Api, carrier: TraceCarrier): OtelApi.SpanContext | undefined {
  let context: OtelApi.SpanContext | undefined;
  if (carrier.traceparent !== undefined) {
    const m = TRACEPARENT.exec(carrier.traceparent.trim().toLowerCase());
    if (m && m[1] !== 'ff') {
      context = {
        traceId: m[2] as string,
        spanId: m[3] as string,
        traceFlags: Number.parseInt(m[4] as string, 16) & 1,
        isRemote: true,
      };
      if (carrier.tracestate) {
        try {
          context = { ...context, traceState: api.createTraceState(carrier.tracestate) };
        } catch {
          // an unparsable tracestate is dropped; the link keeps the ids
        }
      }
    }
  } else if (carrier.awsTraceHeader !== undefined) {
    const root = XRAY_ROOT.exec(carrier.awsTraceHeader);
    const parent = XRAY_PARENT.exec(carrier.awsTraceHeader);
    if (root && parent) {
      context = {
        traceId: `${root[1]}${root[2]}`.toLowerCase(),
        spanId: (parent[1] as string).toLowerCase(),
        traceFlags: XRAY_SAMPLED.test(carrier.awsTraceHeader) ? 1 : 0,
        isRemote: true,
      };
    }
  }
  return context && api.isSpanContextValid(context) ? context : undefined;
}

/** `traceparent` / `tracestate` for a span's context, to send to the next hop (the app). */
export function traceHeaders(span: Span | undefined): Record<string, string> {
  if (span === undefined) return {};
  const { traceId, spanId, traceFlags, traceState } = span.spanContext();
  const api = openTelemetryApi();
  if (!api?.isSpanContextValid({ traceId, spanId, traceFlags })) return {};
  const headers: Record<string, string> = {
    traceparent: `00-${traceId}-${spanId}-${(traceFlags & 0xff).toString(16).padStart(2, '0')}`,
  };
  const state = traceState?.serialize();
  if (state) headers.tracestate = state;
  return headers;
}

/**
 * The tracer of a consumer: undefined when tracing is turned off or the API is not installed,
 * so the pipeline then runs no tracing code at all.
 */
export function deliveryTracer(
  enabled: boolean | undefined,
  source: TracedSource | undefined,
  extra?: TraceAttributes,
): DeliveryTracer | undefined {
  if (enabled === false) return undefined;
  const api = openTelemetryApi();
  return api ? new DeliveryTracer(api, source, extra) : undefined;
}

/** A client span for one outgoing request (the forward to the app), with the headers to send. */
export interface ClientSpan {
  /** `traceparent` / `tracestate` of this span: the app's spans become its children. */
  readonly headers: Readonly<Record<string, string>>;
  /** Ends the span: `status` is the answer's HTTP status; `error` marks it failed with its code. */
  end(status: number | undefined, error?: unknown): void;
}

/**
 * Starts a client span under the active span (a handler's), or returns undefined when nothing
 * is traced (no API, no SDK, no active trace). `target` is a URL already stripped of secrets.
 */
export function startClientSpan(name: string, target: string): ClientSpan | undefined {
  const api = tracerProviderRegistered() ? openTelemetryApi() : null;
  if (!api) return undefined;
  const span = api.trace
    .getTracer(TRACER_NAME)
    .startSpan(name, { kind: api.SpanKind.CLIENT }, api.context.active());
  if (!span.isRecording() && !api.isSpanContextValid(span.spanContext())) return undefined;
  if (span.isRecording()) span.setAttributes({ 'http.request.method': 'POST', 'url.full': target });
  return {
    headers: traceHeaders(span),
    end(status, error) {
      if (span.isRecording()) {
        if (status !== undefined) span.setAttribute('http.response.status_code', status);
        if (error !== undefined) span.setStatus({ code: api.SpanStatusCode.ERROR, message: codeOf(error) });
      }
      span.end();
    },
  };
}
