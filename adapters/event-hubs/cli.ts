import { redact } from '../../src/core/redact.js';
import { defineTransport, importAdapterModule } from '../../src/core/transport.js';
import { CLI_SCHEME } from './names.js';
import { eventHubsOptionsSchema } from './options.js';

const SDK = '@azure/event-hubs';

/**
 * Azure Event Hubs: `azure-event-hubs:HUB`, with the connection (and the checkpoint store) from
 * the environment variables of names.ts; the consumer group is the sidecar's `consumerGroup`.
 */
export const eventHubsTransport = defineTransport({
  name: 'event-hubs',
  sdk: SDK,
  options: { key: 'eventHubs', schema: eventHubsOptionsSchema },
  names: (spec) => spec.startsWith(CLI_SCHEME),
  describe: redact,
  source: {
    forms: 'azure-event-hubs:HUB (EVENTHUBS_CONNECTION_STRING or EVENTHUBS_FULLY_QUALIFIED_NAMESPACE)',
    async open(spec, { logger, options, consumerGroup }) {
      const { eventHubsSourceFromCli } = await importAdapterModule(
        SDK,
        'source',
        () => import('./environment.js'),
      );
      return eventHubsSourceFromCli(spec, { logger, consumerGroup, options });
    },
  },
  replay: {
    forms:
      'azure-event-hubs:HUB (EVENTHUBS_CONNECTION_STRING or EVENTHUBS_FULLY_QUALIFIED_NAMESPACE; a poison hub, or a main hub with --since/--until: read, never consumed)',
    async open(spec, context) {
      const { eventHubsReplayReader } = await importAdapterModule(
        SDK,
        'replay',
        () => import('./replay-reader.js'),
      );
      return eventHubsReplayReader(spec, context);
    },
  },
  target: {
    forms: 'azure-event-hubs:HUB (EVENTHUBS_CONNECTION_STRING or EVENTHUBS_FULLY_QUALIFIED_NAMESPACE)',
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
