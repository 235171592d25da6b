import {
  type AnonymousCredential,
  isPipelineLike,
  type newPipeline,
  type Pipeline,
  QueueClient,
  type StoragePipelineOptions,
  type StorageSharedKeyCredential,
} from '@azure/storage-queue';
import { ConfigError, errorMessage } from '../../src/core/errors.js';

/** An `@azure/identity` credential (or any `getToken` implementation), without importing its types. */
export type TokenCredential = Exclude<
  Parameters<typeof newPipeline>[0],
  StorageSharedKeyCredential | AnonymousCredential | undefined
>;

export const CONNECTION_STRING_ENV = 'AZURE_STORAGE_CONNECTION_STRING';

/** Which queue to consume, in one of three forms. */
export type StorageQueueTarget =
  /** A client you built (any credential, pipeline options, proxy…). */
  | { readonly queueClient: QueueClient }
  /** A queue in the account of a connection string (default: `AZURE_STORAGE_CONNECTION_STRING`). */
  | { readonly queueName: string; readonly connectionString?: string }
  /**
   * A queue URL, `https://ACCOUNT.queue.core.windows.net/QUEUE`, with a SAS token in its query or
   * else authenticated by `credential` (default: `@azure/identity`'s DefaultAzureCredential).
   */
  | { readonly queueUrl: string; readonly credential?: TokenCredential };

/** The queue and, on demand, a sibling queue of the same account with the same credentials. */
export interface QueueConnection {
  readonly queue: QueueClient;
  sibling(name: string): QueueClient;
}

export interface ResolvedTarget {
  readonly queueName: string;
  /** Builds the clients. Async: DefaultAzureCredential is imported only when it is needed. */
  connect(): Promise<QueueConnection>;
}

/**
 * For the clients we build: few, quick SDK retries. The SDK's default (4 tries, 4 s doubling to
 * 2 min) hides a short outage from the worker and its readiness, and holds a receive for minutes;
 * the worker retries receives itself, with backoff, and reports the failure.
 */
export const PIPELINE_OPTIONS: StoragePipelineOptions = {
  retryOptions: { maxTries: 3, retryDelayInMs: 500, maxRetryDelayInMs: 2000 },
};

// Azure's rule: 3–63 characters, lowercase letters, digits and single hyphens, not at either end.
const QUEUE_NAME = /^(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*$/;

export function checkQueueName(name: string, what: string): string {
  if (!QUEUE_NAME.test(name)) {
    throw new ConfigError(
      `${what} "${name}" is not a valid Storage queue name (3–63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit)`,
    );
  }
  return name;
}

/** Validates the target now (bad names and URLs fail at start-up); connects later. */
export function resolveTarget(target: StorageQueueTarget): ResolvedTarget {
  if ('queueClient' in target) {
    const { queueClient } = target;
    return {
      queueName: queueClient.name,
      connect: async () => ({
        queue: queueClient,
        sibling: (name) => new QueueClient(siblingUrl(queueClient.url, name), pipelineOf(queueClient)),
      }),
    };
  }
  if ('queueName' in target) {
    const queueName = checkQueueName(target.queueName, 'queue name');
    const connectionString = target.connectionString ?? process.env[CONNECTION_STRING_ENV];
    if (!connectionString) {
      throw new ConfigError(
        `queue "${queueName}" needs a connection string: pass connectionString or set ${CONNECTION_STRING_ENV}`,
      );
    }
    const queue = fromConnectionString(connectionString, queueName);
    return {
      queueName,
      connect: async () => ({ queue, sibling: (name) => fromConnectionString(connectionString, name) }),
    };
  }
  const url = parseQueueUrl(target.queueUrl);
  const queueName = checkQueueName(queueNameOfUrl(url), 'queue name in the URL');
  if (url.search.length > 1 || target.credential) {
    const credential = url.search.length > 1 ? undefined : target.credential;
    const client = (href: string) => new QueueClient(href, credential, PIPELINE_OPTIONS);
    const queue = client(url.href);
    return {
      queueName,
      connect: async () => ({ queue, sibling: (name) => client(siblingUrl(url.href, name)) }),
    };
  }
  return {
    queueName,
    connect: async () => {
      const credential = await defaultAzureCredential();
      return {
        queue: new QueueClient(url.href, credential, PIPELINE_OPTIONS),
        sibling: (name) => new QueueClient(siblingUrl(url.href, name), credential, PIPELINE_OPTIONS),
      };
    },
  };
}

function fromConnectionString(connectionString: string, queueName: string): QueueClient {
  try {
    return new QueueClient(connectionString, queueName, PIPELINE_OPTIONS);
  } catch (cause) {
    // The SDK's message is safe (it never echoes the string); never put the string itself in ours.
    throw new ConfigError(`the Storage connection string is not usable: ${errorMessage(cause)}`, {
      cause,
    });
  }
}

/** https only, except for a local emulator: a SAS token or bearer token must not cross in clear. */
export function parseQueueUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ConfigError('the queue URL is not a valid URL');
  }
  const loopback = ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback)) {
    throw new ConfigError(`the queue URL must use https (http only for a local emulator): ${url.origin}`);
  }
  return url;
}

function queueNameOfUrl(url: URL): string {
  try {
    // The SDK knows both URL styles: `/QUEUE` on a storage host, `/ACCOUNT/QUEUE` on an IP/emulator.
    return new QueueClient(url.href).name;
  } catch (cause) {
    throw new ConfigError(`no queue name in the queue URL ${url.origin}${url.pathname}`, { cause });
  }
}

/** The URL of queue `name` in the same account: the last path segment replaced, the SAS kept. */
function siblingUrl(queueUrl: string, name: string): string {
  const url = new URL(queueUrl);
  const segments = url.pathname.split('/');
  while (segments.length > 1 && segments[segments.length - 1] === '') segments.pop();
  segments[segments.length - 1] = encodeURIComponent(name);
  url.pathname = segments.join('/');
  return url.href;
}

/**
 * The request pipeline of a client we were given, so a sibling queue gets the same credentials
 * and options. `pipeline` is an SDK-internal member (the SDK's own `getQueueClient` does the same);
 * if it ever moves, the caller is told to pass the poison queue's client explicitly.
 */
function pipelineOf(client: QueueClient): Pipeline {
  const pipeline = (client as unknown as { readonly pipeline?: unknown }).pipeline;
  if (!isPipelineLike(pipeline)) {
    throw new ConfigError(
      'cannot derive the poison queue from the given queueClient: pass deadLetterQueue as a QueueClient (or false)',
    );
  }
  return pipeline as Pipeline;
}

async function defaultAzureCredential(): Promise<TokenCredential> {
  let identity: typeof import('@azure/identity');
  try {
    identity = await import('@azure/identity');
  } catch (cause) {
    throw new ConfigError(
      'a queue URL without a SAS token authenticates with @azure/identity: install it (npm install @azure/identity), add a SAS token to the URL, or pass a credential',
      { cause },
    );
  }
  return new identity.DefaultAzureCredential();
}
