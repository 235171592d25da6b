import { z } from 'zod';
import { DEFAULT_MAX_ENVELOPE_BYTES } from '../../src/core/envelope.js';

// The shape apart from the schema, so that the published types keep each option's JSDoc.
const httpIngressOptionsShape = {
  /** Interface to bind. Default `127.0.0.1`; `0.0.0.0` to accept from other hosts. */
  host: z.string().min(1).default('127.0.0.1'),
  /** Port; 0 picks a free one (see `url`). Required. */
  port: z.number().int().min(0).max(65_535),
  /** The path envelopes are POSTed to. Default `/events`. */
  path: z.string().min(1).default('/events'),
  /** Larger bodies are refused with 413 before they are read. Default 1 MiB. */
  maxBodyBytes: z.number().int().positive().default(DEFAULT_MAX_ENVELOPE_BYTES),
  /** Requests waiting for the worker beyond this get 503 BUSY + Retry-After (backpressure). Default 1000. */
  maxPending: z.number().int().positive().default(1000),
  /**
   * Bytes of request bodies held at once, counting bodies still being received and bodies waiting
   * for the worker. A request that would go beyond gets 503 BUSY + Retry-After; the rest of its
   * body is read and thrown away. Default `maxPending × maxBodyBytes` (what waiting bodies alone
   * could hold before); at least `maxBodyBytes`. In the sidecar: `concurrency × 8 × maxEnvelopeBytes`.
   */
  maxBufferedBytes: z.number().int().positive().optional(),
  /**
   * A request's body must arrive in full within this many ms of its headers; a slower one gets 408
   * and its connection is closed (Node's own limit is 300 s). Default 10 000, the spec's
   * acknowledgment timeout.
   */
  bodyTimeoutMs: z.number().int().positive().default(10_000),
};

/** The HTTP ingress's options, each default documented here only. */
export const httpIngressOptionsSchema: z.ZodObject<typeof httpIngressOptionsShape, z.core.$strict> =
  z.strictObject(httpIngressOptionsShape);

export type HttpIngressOptions = z.input<typeof httpIngressOptionsSchema>;
export type ResolvedHttpIngressOptions = z.output<typeof httpIngressOptionsSchema>;

/**
 * The sidecar's `http` section (`http.*`, `PARTNER_EVENTS_HTTP_*`): the host, port and path come
 * from the source URL, the body limit and the queue length from the consumer settings.
 */
export const httpIngressSectionSchema = httpIngressOptionsSchema.pick({
  maxBufferedBytes: true,
  bodyTimeoutMs: true,
});
