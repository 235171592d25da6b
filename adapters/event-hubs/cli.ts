import { redact } from '../../src/core/redact.js';
import { defineTransport, importAdapterModule } from '../../src/core/transport.js';
import { eventHubsOptionsSchema } from './options.js';

const SDK = '@azure/event-hubs';

export const CLI_SCHEME = 'azure-event-hubs:';
/** A connection string (namespace or hub level). */
export const ENV_CONNECTION_STRING = 'EVENTHUBS_CONNECTION_STRING';
/** `<namespace>.servicebus.windows.net`, signed in with `DefaultAzureCredential`. */
export const ENV_NAMESPACE = 'EVENTHUBS_FULLY_QUALIFIED_NAMESPACE';
/** `sqlite:PATH` (default `sqlite:partner-events-checkpoints.db`) or `blob:CONTAINER_URL`. */
export const ENV_CHECKPOINT_STORE = 'EVENTHUBS_CHECKPOINT_STORE';
/** A hub in the same namespace that receives a copy of each dead event (optional; was `EVENTHUBS_POISON_HUB`). */
export const ENV_DEAD_LETTER_QUEUE = 'EVENTHUBS_DEAD_LETTER_QUEUE';
/** With `blob:NAME` (a container name rather than a URL): the storage account's connection string. */
export const ENV_STORAGE_CONNECTION_STRING = 'AZURE_STORAGE_CONNECTION_STRING';

/**
 * Azure Event Hubs: `azure-event-hubs:HUB`, with the connection (and the checkpoint store) from
 * the environment variables above; the consumer group is the sidecar's `consumerGroup`.
 */
export const eventHubsTransport = defineTransport({
  name: 'event-hubs',
  sdk: SDK,
  options: { key: 'eventHubs', schema: eventHubsOptionsSchema },
  names: (spec) => spec.startsWith(CLI_SCHEME),
  describe: redact,
  source: {
    forms: 'azure-event-hubs:HUB (EVENTHUBS_CONNECTION_STRING)',
    async open(spec, { logger, options, consumerGroup }) {
      const { eventHubsSourceFromCli } = await importAdapterModule(
        SDK,
        'source',
        () => import('./environment.js'),
      );
      return eventHubsSourceFromCli(spec, { logger, consumerGroup, options });
    },
  },
  target: {
    forms: 'azure-event-hubs:HUB (EVENTHUBS_CONNECTION_STRING)',
    async open(spec) {
      const { eventHubsTargetFromCli } = await importAdapterModule(
        SDK,
        'target',
        () => import('./sender.js'),
      );
      return eventHubsTargetFromCli(spec);
    },
  },
});
