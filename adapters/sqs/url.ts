/**
 * How a CLI spec names an SQS queue, kept free of the AWS SDK so the CLI can route `--source` and
 * `--to` values without loading it.
 */

import { redact } from '../../src/core/redact.js';
import { HTTP_INGRESS_PREFIX } from '../../src/core/transport.js';

/** An AWS SQS queue URL (commercial or China partitions, legacy `queue.amazonaws.com` hosts). */
export const AWS_QUEUE_URL =
  /^https:\/\/(sqs\.[a-z0-9-]+\.amazonaws\.com(\.cn)?|[a-z0-9-]+\.queue\.amazonaws\.com)\//;

/**
 * The path of every SQS queue URL, AWS's and the emulators' (LocalStack, ElasticMQ, fauxqs):
 * `/<12-digit account id>/<queue name>` (1–80 letters, digits, `-`, `_`; `.fifo` for FIFO queues).
 */
const QUEUE_PATH = /^\/\d{12}\/[A-Za-z0-9_-]{1,80}(\.fifo)?$/;

/**
 * How a `--source` / `--to` value reads:
 * - `queue`: an SQS queue, for certain: `sqs:URL`, an AWS queue URL, a URL on the SQS endpoint
 *   the environment names (`AWS_ENDPOINT_URL_SQS` / `AWS_ENDPOINT_URL`), or a queue-shaped path
 *   while such an endpoint is set (emulators hand out URLs on another host name than their
 *   endpoint: fauxqs `sqs.us-east-1.localhost`, LocalStack `sqs.REGION.localhost.localstack.cloud`);
 * - `queue-or-http`: an http(s) URL with a queue-shaped path and no endpoint variable: a queue
 *   at a local endpoint, or an HTTP ingress path that happens to look like one. The caller asks
 *   for an explicit form instead of guessing (a wrong guess listens, or POSTs, in silence);
 * - `other`: not SQS.
 */
export type SqsReading = 'queue' | 'queue-or-http' | 'other';

export function sqsReadingOf(spec: string, env: NodeJS.ProcessEnv = process.env): SqsReading {
  if (spec.startsWith('sqs:') || AWS_QUEUE_URL.test(spec)) return 'queue';
  let url: URL;
  try {
    url = new URL(spec);
  } catch {
    return 'other';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'other';
  const endpoints = endpointOrigins(env);
  if (endpoints.includes(url.origin)) return 'queue';
  if (!QUEUE_PATH.test(url.pathname)) return 'other';
  // A VPC endpoint or any other AWS host: nobody's HTTP ingress.
  if (endpoints.length > 0 || /\.amazonaws\.com(\.cn)?$/.test(url.hostname)) return 'queue';
  return 'queue-or-http';
}

/** `sqs:ANY_QUEUE_URL`, an AWS queue URL, or a URL that reads as a queue for certain (`sqsReadingOf`). */
export function isSqsSpec(spec: string, env: NodeJS.ProcessEnv = process.env): boolean {
  return sqsReadingOf(spec, env) === 'queue';
}

/**
 * Whether a `--source` value names an SQS queue for certain: `sqs:<queue URL>` (any endpoint), an
 * AWS queue URL such as `https://sqs.eu-west-1.amazonaws.com/123456789012/partner-events`, or a
 * URL on (or, with a `/ACCOUNT/QUEUE` path, beside) the endpoint `AWS_ENDPOINT_URL_SQS` /
 * `AWS_ENDPOINT_URL` names.
 */
export function isSqsSourceSpec(spec: string, env: NodeJS.ProcessEnv = process.env): boolean {
  return isSqsSpec(spec, env);
}

/** The origins of `AWS_ENDPOINT_URL_SQS` and `AWS_ENDPOINT_URL`, where set and valid. */
function endpointOrigins(env: NodeJS.ProcessEnv): string[] {
  const origins: string[] = [];
  for (const value of [env.AWS_ENDPOINT_URL_SQS, env.AWS_ENDPOINT_URL]) {
    if (!value) continue;
    try {
      origins.push(new URL(value).origin);
    } catch {
      // The SDK rejects it with its own message when the client is built.
    }
  }
  return origins;
}

/** The queue URL of a spec (`sqs:` prefix removed). */
export function queueUrlOfSpec(spec: string): string {
  return spec.startsWith('sqs:') ? spec.slice('sqs:'.length) : spec;
}

/**
 * Client settings a CLI queue URL implies. SDK v3 reads `AWS_REGION` only: without it, use the
 * URL's region, then `AWS_DEFAULT_REGION`. With an endpoint from the environment (a local
 * emulator), send there rather than to the queue URL's host, which the SDK would otherwise prefer.
 */
export function cliClientConfig(
  queueUrl: string,
  env: NodeJS.ProcessEnv = process.env,
): { region?: string; useQueueUrlAsEndpoint?: boolean } {
  const fromUrl = /^https:\/\/sqs\.([a-z0-9-]+)\.amazonaws\.com/.exec(queueUrl)?.[1];
  const region = env.AWS_REGION ? undefined : (fromUrl ?? env.AWS_DEFAULT_REGION);
  const localEndpoint = env.AWS_ENDPOINT_URL_SQS ?? env.AWS_ENDPOINT_URL;
  return { ...(region ? { region } : {}), ...(localEndpoint ? { useQueueUrlAsEndpoint: false } : {}) };
}

/**
 * The usage error for a `queue-or-http` value: both readings, and the explicit form of each.
 * `http` says what the HTTP reading does (`listen on` for `--source`, `POST to` for `--to`).
 */
export function ambiguousQueueUrlMessage(option: string, spec: string, http: string): string {
  const shown = redact(spec);
  return (
    `${option} ${shown} is ambiguous: an SQS queue URL (its path is /ACCOUNT/QUEUE) or an HTTP ingress to ${http}. ` +
    `Write sqs:${shown} for the queue (requests go to AWS_ENDPOINT_URL_SQS when it is set), ` +
    `or ${HTTP_INGRESS_PREFIX}${shown} for the ingress`
  );
}
