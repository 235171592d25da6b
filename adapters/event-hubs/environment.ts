import type { Checkpoint, CheckpointStore, PartitionOwnership, TokenCredential } from '@azure/event-hubs';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { definedOnly } from '../../src/core/defined.js';
import { ConfigError } from '../../src/core/errors.js';
import { redact } from '../../src/core/redact.js';
import { createEventHubsAdapter, DEFAULT_CHECKPOINT_PATH, type EventHubsAdapter } from './adapter.js';
import { eventHubsAuthFromEnv, lazyDefaultCredential } from './credentials.js';
import {
  CLI_SCHEME,
  ENV_CHECKPOINT_STORE,
  ENV_DEAD_LETTER_QUEUE,
  ENV_STORAGE_CONNECTION_STRING,
} from './names.js';
import { type eventHubsOptionsSchema, HUB_NAME } from './options.js';
import { webSocketsFromEnv } from './web-socket.js';

/**
 * The source for `partner-events run --source azure-event-hubs:HUB [--consumer-group NAME]`.
 * Credentials come from the environment: `EVENTHUBS_CONNECTION_STRING`, or
 * `EVENTHUBS_FULLY_QUALIFIED_NAMESPACE` with `@azure/identity`'s `DefaultAzureCredential`
 * (imported on first use, so it is needed only then). The checkpoint store is
 * `EVENTHUBS_CHECKPOINT_STORE`; `EVENTHUBS_DEAD_LETTER_QUEUE` names a hub for copies of dead events
 * (the `deadLetterQueue` option wins over it); `EVENTHUBS_WEBSOCKETS=true` connects over
 * WebSockets (the `webSockets` option wins over it).
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
  const auth = eventHubsAuthFromEnv(env, `--source ${redact(spec)}`);
  // A blob checkpoint store by URL signs in with the hub's identity, or one of its own.
  let credential = 'credential' in auth ? auth.credential : undefined;
  const { deadLetterQueue: configured, webSockets, ...rest } = options;
  const deadLetterQueue = configured ?? env[ENV_DEAD_LETTER_QUEUE];
  if (deadLetterQueue && !HUB_NAME.test(deadLetterQueue)) {
    throw new ConfigError(`${ENV_DEAD_LETTER_QUEUE}="${deadLetterQueue}": expected an event hub name`);
  }
  return createEventHubsAdapter({
    ...definedOnly(rest),
    ...auth,
    eventHubName,
    checkpointStore: checkpointStoreFromEnv(env, () => (credential ??= lazyDefaultCredential())),
    ...(consumerGroup ? { consumerGroup } : {}),
    ...(deadLetterQueue ? { deadLetterQueue } : {}),
    ...(logger ? { logger } : {}),
    webSockets: webSockets ?? webSocketsFromEnv(env),
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
