/**
 * Azure Event Hubs source: `import { createEventHubsAdapter } from 'partner-health-events/event-hubs'`.
 * Needs `@azure/event-hubs` (and, for a blob checkpoint store or Azure identity sign-in,
 * `@azure/eventhubs-checkpointstore-blob` + `@azure/storage-blob` / `@azure/identity`).
 */
export {
  createEventHubsAdapter,
  DEFAULT_CHECKPOINT_PATH,
  type EventHubsAdapter,
  type EventHubsMessage,
} from './adapter.js';
export { envelopeText } from './body.js';
export { eventHubsSourceFromCli, lazyBlobCheckpointStore } from './environment.js';
export {
  CLI_SCHEME,
  ENV_CHECKPOINT_STORE,
  ENV_CONNECTION_STRING,
  ENV_DEAD_LETTER_QUEUE,
  ENV_NAMESPACE,
  ENV_STORAGE_CONNECTION_STRING,
  ENV_WEBSOCKETS,
} from './names.js';
export type { EventHubsAdapterOptions } from './options.js';
export { type DeadEventInfo, POISON_PROPERTIES } from './poison-hub.js';
export { SqliteCheckpointStore, type SqliteCheckpointStoreOptions } from './sqlite-checkpoint-store.js';
