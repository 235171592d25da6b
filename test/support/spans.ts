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

/** Everything a span exports that could carry text: name, attributes, status, events, links. */
export function spanText(spans: readonly ReadableSpan[]): string {
  return JSON.stringify(
    spans.map((s) => ({
      name: s.name,
      attributes: s.attributes,
      status: s.status,
      events: s.events,
      links: s.links,
      resource: s.resource.attributes,
    })),
  );
}
