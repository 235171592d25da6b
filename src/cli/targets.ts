import { ambiguousQueueUrlMessage, HTTP_INGRESS_PREFIX, sqsReadingOf } from '../../adapters/sqs/url.js';
import { appendLine } from '../consumer/durable-append.js';
import { AdapterError, ConfigError, errorMessage } from '../core/errors.js';
import { redact } from '../core/redact.js';
import type { Target } from '../core/target.js';
import { classifyAnswer, describeUrl, hasCredentials, redirectReason } from '../sidecar/forward.js';
import { UsageError } from './common.js';

export type { Delivery, OutgoingMessage, Target } from '../core/target.js';

/**
 * Where `replay --to`, `trigger --to` and `simulate --to` put envelopes: the same forms as
 * `run --source`, seen from the publisher's side (an HTTP URL is POSTed to, not listened on).
 */
export const TARGET_FORMS = [
  'file:PATH (appends one JSONL line)',
  'an SQS queue URL (a local one when AWS_ENDPOINT_URL_SQS is set) or sqs:QUEUE_URL',
  'azure-storage-queue:QUEUE (AZURE_STORAGE_CONNECTION_STRING) or https://ACCOUNT.queue.core.windows.net/QUEUE[?SAS]',
  'azure-event-hubs:HUB (EVENTHUBS_CONNECTION_STRING)',
  'http(s)://HOST:PORT/PATH or http-ingress:URL (an HTTP ingress: POST each envelope)',
].join(', ');

const STORAGE_QUEUE_URL = /^https:\/\/[^/?]+\.queue\.core\./;

/** Loads a sender module; its SDK is an optional dependency, so say which one is missing. */
async function importSender<T>(sdk: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (cause) {
    throw new ConfigError(`this target needs the ${sdk} package: npm install ${sdk}`, { cause });
  }
}

/** Opens the target a `--to` value names. Queue SDKs are imported only when used. */
export async function openTarget(spec: string): Promise<Target> {
  if (spec.startsWith('file:')) {
    const path = spec.slice('file:'.length);
    if (!path) throw new UsageError('--to file: needs a path');
    return fileTarget(path);
  }
  const sqs = sqsReadingOf(spec);
  if (sqs === 'queue-or-http') throw new UsageError(ambiguousQueueUrlMessage('--to', spec, 'POST to'));
  if (sqs === 'queue') {
    const sender = await importSender('@aws-sdk/client-sqs', () => import('../../adapters/sqs/sender.js'));
    return sender.sqsTargetFromCli(spec);
  }
  if (spec.startsWith('azure-event-hubs:')) {
    const sender = await importSender(
      '@azure/event-hubs',
      () => import('../../adapters/event-hubs/sender.js'),
    );
    return sender.eventHubsTargetFromCli(spec);
  }
  if (spec.startsWith('azure-storage-queue:') || STORAGE_QUEUE_URL.test(spec)) {
    const sender = await importSender(
      '@azure/storage-queue',
      () => import('../../adapters/storage-queue/sender.js'),
    );
    return sender.storageQueueTargetFromCli(spec);
  }
  const http = spec.startsWith(HTTP_INGRESS_PREFIX) ? spec.slice(HTTP_INGRESS_PREFIX.length) : spec;
  if (http.startsWith('http://') || http.startsWith('https://')) {
    let url: URL;
    try {
      url = new URL(http);
    } catch {
      throw new UsageError(`--to is not a URL: ${describeUrl(http)}`);
    }
    // fetch refuses such a URL on every send, with an error that quotes it, password and all.
    if (hasCredentials(http)) {
      throw new UsageError(
        `--to ${describeUrl(http)} must not contain a user name or password (user:password@)`,
      );
    }
    return httpTarget(url);
  }
  throw new UsageError(`unknown --to "${redact(spec)}": expected ${TARGET_FORMS}`);
}

function fileTarget(path: string): Target {
  let tail: Promise<unknown> = Promise.resolve();
  return {
    name: `file:${path}`,
    send(message) {
      const text =
        typeof message.body === 'string' ? message.body : Buffer.from(message.body).toString('utf8');
      // Serialised, so concurrent sends never interleave within a line; all of a line or none.
      const write = tail.then(() => appendLine(path, text));
      tail = write.catch(() => undefined);
      return write.then(() => ({ accepted: true, detail: 'appended' }));
    },
    close: async () => {
      await tail;
    },
  };
}

/**
 * POSTs each envelope to an HTTP ingress (`run --source http://…`); the answer is the worker's
 * verdict. A redirect is not followed and not accepted (a 2xx from elsewhere is no ingress's).
 */
function httpTarget(url: URL, timeoutMs = 10_000): Target {
  const name = describeUrl(url.href);
  return {
    name,
    async send(message) {
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: typeof message.body === 'string' ? message.body : Buffer.from(message.body),
          redirect: 'manual',
          signal: AbortSignal.timeout(timeoutMs),
        });
      } catch (cause) {
        throw new AdapterError(`POST ${name} failed: ${errorMessage(cause)}`, { cause });
      }
      const text = await response.text().catch(() => '');
      const answer = classifyAnswer(response.status, response.headers, url);
      const code = codeOf(text);
      const retryAfter = Number(response.headers.get('retry-after'));
      return {
        accepted: answer.kind === 'delivered',
        status: response.status,
        detail:
          answer.kind === 'redirected'
            ? redirectReason(answer).replace(/^answered /, '')
            : `HTTP ${response.status}${code ? ` ${code}` : ''}`,
        ...(Number.isFinite(retryAfter) && retryAfter > 0 ? { retryAfterSeconds: retryAfter } : {}),
      };
    },
    close: async () => {},
  };
}

/** The `code` (or ack `result`) of an ingress answer, if it is one. */
function codeOf(text: string): string | undefined {
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== 'object' || value === null) return undefined;
    const { code, result } = value as { code?: unknown; result?: unknown };
    if (typeof code === 'string') return code;
    return typeof result === 'string' ? result : undefined;
  } catch {
    return undefined;
  }
}
