import { context, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { AsyncLocalStorageContextManager } from '../../src/sidecar/tracing-export.js';

/**
 * Registers a real OpenTelemetry SDK (sdk-trace-base, in-memory exporter) and the sidecar's
 * context manager for this test file's process; `stop()` unregisters them.
 */
export function recordSpans() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager(ROOT_CONTEXT));
  trace.setGlobalTracerProvider(provider);
  return {
    spans: (): ReadableSpan[] => exporter.getFinishedSpans(),
    reset: () => exporter.reset(),
    async stop() {
      await provider.shutdown();
      trace.disable();
      context.disable();
    },
  };
}

/**
 * Every text a span exports, as is (not JSON-escaped, so a body's quotes still match): names,
 * attribute keys and values, status descriptions, event names and attributes, links, resource.
 */
export function spanText(spans: readonly ReadableSpan[]): string {
  const parts: string[] = [];
  const attributes = (a: Record<string, unknown> | undefined) => {
    for (const [k, v] of Object.entries(a ?? {})) parts.push(k, String(v));
  };
  for (const s of spans) {
    parts.push(s.name, s.status.message ?? '');
    attributes(s.attributes);
    attributes(s.resource.attributes);
    for (const e of s.events) {
      parts.push(e.name);
      attributes(e.attributes);
    }
    for (const l of s.links) {
      parts.push(l.context.traceId, l.context.spanId, l.context.traceState?.serialize() ?? '');
      attributes(l.attributes);
    }
  }
  return parts.join('\n');
}
