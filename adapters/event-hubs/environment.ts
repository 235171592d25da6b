import type { Checkpoint, CheckpointStore, PartitionOwnership, TokenCredential } from '@azure/event-hubs';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { definedOnly } from '../../src/core/defined.js';
import { ConfigError } from '../../src/core/errors.js';
import { redact } from '../../src/core/redact.js';
import { createEventHubsAdapter, DEFAULT_CHECKPOINT_PATH, type EventHubsAdapter } from './adapter.js';
import {
  CLI_SCHEME,
  ENV_CHECKPOINT_STORE,
  ENV_CONNECTION_STRING,
  ENV_DEAD_LETTER_QUEUE,
  ENV_NAMESPACE,
  ENV_STORAGE_CONNECTION_STRING,
} from './names.js';
import { type eventHubsOptionsSchema, HUB_NAME } from './options.js';

/**
 * The source for `partner-events run --source azure-event-hubs:HUB [--consumer-group NAME]`.
 * Credentials come from the environment: `EVENTHUBS_CONNECTION_STRING`, or
 * `EVENTHUBS_FULLY_QUALIFIED_NAMESPACE` with `@azure/identity`'s `DefaultAzureCredential`
 * (imported on first use, so it is needed only then). The checkpoint store is
 * `EVENTHUBS_CHECKPOINT_STORE`; `EVENTHUBS_DEAD_LETTER_QUEUE` names a hub for copies of dead events
 * (the `deadLetterQueue` option wins over it).
 */
export function eventHubsSourceFromCli(
  spec: string,
  {
    logger,
    consumerGroup,
    options = {},
  }: { logger?: Logger; consumerGroup?: string; options?: z.input<typeof eventHubsOptionsSchema> } = {},
  env: NodeJS.ProcessEnv = process.env,
): EventHubsAdapter {
  if (!spec.startsWith(CLI_SCHEME)) throw new ConfigError(`not an Event Hubs source: "${redact(spec)}"`);
  const eventHubName = spec.slice(CLI_SCHEME.length);
  if (!HUB_NAME.test(eventHubName)) {
    throw new ConfigError(`--source ${redact(spec)}: expected ${CLI_SCHEME}HUB_NAME`);
  }
  const connectionString = env[ENV_CONNECTION_STRING];
  const namespace = env[ENV_NAMESPACE];
  let credential: TokenCredential | undefined;
  if (!connectionString) {
    if (!namespace) {
      throw new ConfigError(
        `--source ${redact(spec)} needs ${ENV_CONNECTION_STRING}, or ${ENV_NAMESPACE} with an Azure identity`,
      );
    }
    credential = lazyDefaultCredential();
  }
  const { deadLetterQueue: configured, ...rest } = options;
  const deadLetterQueue = configured ?? env[ENV_DEAD_LETTER_QUEUE];
  if (deadLetterQueue && !HUB_NAME.test(deadLetterQueue)) {
    throw new ConfigError(`${ENV_DEAD_LETTER_QUEUE}="${deadLetterQueue}": expected an event hub name`);
  }
  const auth = connectionString
    ? { connectionString }
    : { fullyQualifiedNamespace: namespace as string, credential: credential as TokenCredential };
  return createEventHubsAdapter({
    ...definedOnly(rest),
    ...auth,
    eventHubName,
    checkpointStore: checkpointStoreFromEnv(env, () => (credential ??= lazyDefaultCredential())),
    ...(consumerGroup ? { consumerGroup } : {}),
    ...(deadLetterQueue ? { deadLetterQueue } : {}),
    ...(logger ? { logger } : {}),
  });
}

function checkpointStoreFromEnv(
  env: NodeJS.ProcessEnv,
  credential: () => TokenCredential,
): CheckpointStore | string {
  const spec = env[ENV_CHECKPOINT_STORE] ?? `sqlite:${DEFAULT_CHECKPOINT_PATH}`;
  if (spec.startsWith('sqlite:') && spec.length > 'sqlite:'.length) return spec.slice('sqlite:'.length);
  if (spec.startsWith('blob:') && spec.length > 'blob:'.length) {
    const target = spec.slice('blob:'.length);
    if (/^https?:\/\//.test(target))
      return lazyBlobCheckpointStore({ url: target, credential: credential() });
    const storage = env[ENV_STORAGE_CONNECTION_STRING];
    if (!storage) {
      throw new ConfigError(
        `${ENV_CHECKPOINT_STORE}=blob:${redact(target)} needs ${ENV_STORAGE_CONNECTION_STRING}`,
      );
    }
    return lazyBlobCheckpointStore({ connectionString: storage, container: target });
  }
  throw new ConfigError(
    `${ENV_CHECKPOINT_STORE}="${redact(spec)}": expected sqlite:PATH or blob:CONTAINER_URL`,
  );
}

/** `DefaultAzureCredential`, imported when the first token is needed (an optional peer dependency). */
function lazyDefaultCredential(): TokenCredential {
  let inner: Promise<TokenCredential> | undefined;
  return {
    async getToken(...args: Parameters<TokenCredential['getToken']>) {
      inner ??= import('@azure/identity').then(
        (identity) => new identity.DefaultAzureCredential(),
        (cause: unknown) => {
          throw new ConfigError('signing in without a connection string needs @azure/identity installed', {
            cause,
          });
        },
      );
      return (await inner).getToken(...args);
    },
  };
}

type BlobTarget =
  | { url: string; credential: TokenCredential }
  | { connectionString: string; container: string };

/**
 * `BlobCheckpointStore` on a container, with `@azure/storage-blob` and
 * `@azure/eventhubs-checkpointstore-blob` imported on first use (optional peer dependencies).
 */
export function lazyBlobCheckpointStore(target: BlobTarget): CheckpointStore {
  let store: Promise<CheckpointStore> | undefined;
  const open = async (): Promise<CheckpointStore> => {
    const modules = await Promise.all([
      import('@azure/storage-blob'),
      import('@azure/eventhubs-checkpointstore-blob'),
    ]).catch((cause: unknown) => {
      throw new ConfigError(
        'a blob checkpoint store needs @azure/storage-blob and @azure/eventhubs-checkpointstore-blob installed',
        { cause },
      );
    });
    const [{ ContainerClient }, { BlobCheckpointStore }] = modules;
    const container =
      'url' in target
        ? new ContainerClient(target.url, target.credential)
        : new ContainerClient(target.connectionString, target.container);
    return new BlobCheckpointStore(container);
  };
  const get = () => {
    store ??= open().catch((error: unknown) => {
      store = undefined; // try again on the next call
      throw error;
    });
    return store;
  };
  return {
    listOwnership: async (...args) => (await get()).listOwnership(...args),
    claimOwnership: async (ownership: PartitionOwnership[]) => (await get()).claimOwnership(ownership),
    listCheckpoints: async (...args) => (await get()).listCheckpoints(...args),
    updateCheckpoint: async (checkpoint: Checkpoint) => (await get()).updateCheckpoint(checkpoint),
  };
}
