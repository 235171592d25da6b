/**
 * How a CLI spec names an SQS queue, kept free of the AWS SDK so the CLI can route `--source` and
 * `--to` values without loading it.
 */

/** An AWS SQS queue URL (commercial or China partitions, legacy `queue.amazonaws.com` hosts). */
export const AWS_QUEUE_URL =
  /^https:\/\/(sqs\.[a-z0-9-]+\.amazonaws\.com(\.cn)?|[a-z0-9-]+\.queue\.amazonaws\.com)\//;

/** `sqs:ANY_QUEUE_URL` (a local endpoint) or an AWS queue URL. */
export function isSqsSpec(spec: string): boolean {
  return spec.startsWith('sqs:') || AWS_QUEUE_URL.test(spec);
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
