import { hasCredentials } from '../../src/core/http-answer.js';
import { redact, redactUrl } from '../../src/core/redact.js';
import { defineTransport, HTTP_INGRESS_PREFIX, SpecError } from '../../src/core/transport.js';
import { httpIngressSectionSchema } from './options.js';

/** The URL of a spec, without the explicit `http-ingress:` prefix. */
function urlText(spec: string): string {
  return spec.startsWith(HTTP_INGRESS_PREFIX) ? spec.slice(HTTP_INGRESS_PREFIX.length) : spec;
}

/**
 * An HTTP ingress: as a source, `run` listens on `http://HOST:PORT/PATH` for POSTed envelopes; as
 * a target, each envelope is POSTed to an ingress (http or https). `http-ingress:URL` says
 * "ingress" explicitly, for a URL that also reads as an SQS queue.
 */
export const httpTransport = defineTransport({
  name: 'http',
  options: { key: 'http', schema: httpIngressSectionSchema },
  names(spec, role) {
    if (role === 'source') return spec.startsWith('http://') || spec.startsWith(HTTP_INGRESS_PREFIX);
    const url = urlText(spec);
    return url.startsWith('http://') || url.startsWith('https://');
  },
  describe: redact,
  source: {
    forms:
      'http://HOST:PORT/PATH or http-ingress:http://HOST:PORT/PATH (HTTP ingress: listen for POSTed envelopes)',
    async open(spec, { options, concurrency, maxEnvelopeBytes, logger }) {
      const url = ingressUrl(spec);
      const { createHttpIngress } = await import('./adapter.js');
      const source = await createHttpIngress({
        host: url.hostname.replace(/^\[|\]$/g, ''),
        port: Number(url.port || 80),
        path: url.pathname === '/' ? '/events' : url.pathname,
        maxBodyBytes: maxEnvelopeBytes,
        // Bounded memory: at most this many bodies wait for a free handler slot, and bodies being
        // received or waiting hold at most maxBufferedBytes (by default, what those could hold).
        maxPending: concurrency * 8,
        ...(options.maxBufferedBytes === undefined ? {} : { maxBufferedBytes: options.maxBufferedBytes }),
        bodyTimeoutMs: options.bodyTimeoutMs,
      });
      logger.info({ ingress: source.url }, 'listening for envelopes');
      return source;
    },
  },
  target: {
    forms: 'http(s)://HOST:PORT/PATH or http-ingress:URL (an HTTP ingress: POST each envelope)',
    async open(spec, { concurrency }) {
      const text = urlText(spec);
      let url: URL;
      try {
        url = new URL(text);
      } catch {
        throw new SpecError(`--to is not a URL: ${redactUrl(text)}`);
      }
      // The credentials would never be sent, and every failure would quote them.
      if (hasCredentials(text)) {
        throw new SpecError(
          `--to ${redactUrl(text)} must not contain a user name or password (user:password@)`,
        );
      }
      const { httpTarget } = await import('./sender.js');
      return httpTarget(url, { connections: concurrency });
    },
  },
});

function ingressUrl(spec: string): URL {
  let url: URL;
  try {
    url = new URL(urlText(spec));
  } catch {
    throw new SpecError(`--source ${redact(spec)} is not a URL`);
  }
  if (url.protocol !== 'http:')
    throw new SpecError(`--source ${redact(spec)}: an HTTP ingress listens on http://`);
  return url;
}
