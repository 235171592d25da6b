import type { ReceivedEventData } from '@azure/event-hubs';
import type { TraceCarrier } from '../../src/core/source-adapter.js';

/**
 * The producer's trace context from an event's application properties: W3C `traceparent` (with
 * `tracestate`), or `Diagnostic-Id` as older Azure SDKs set it (also a traceparent). The worker's
 * deliveries and a replay's link to it alike; a poison copy keeps the publisher's properties.
 */
export function traceContextOf(properties: ReceivedEventData['properties']): { traceContext?: TraceCarrier } {
  const traceparent = properties?.traceparent ?? properties?.['Diagnostic-Id'];
  if (typeof traceparent !== 'string') return {};
  const { tracestate } = properties ?? {};
  return {
    traceContext: { traceparent, tracestate: typeof tracestate === 'string' ? tracestate : undefined },
  };
}
