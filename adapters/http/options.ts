import { z } from 'zod';

/**
 * The HTTP ingress settings that the sidecar's config reads (`http.*`, PARTNER_EVENTS_HTTP_*);
 * each default is the one `HttpIngressOptions` documents.
 */
export const httpIngressTuningSchema = z.strictObject({
  /** Bytes of bodies being received or waiting; default `concurrency × 8 × maxEnvelopeBytes`. */
  maxBufferedBytes: z.number().int().positive().optional(),
  /** A body must arrive within this many ms of its request's headers, else 408. */
  bodyTimeoutMs: z.number().int().positive().default(10_000),
});

export type HttpIngressTuning = z.input<typeof httpIngressTuningSchema>;
