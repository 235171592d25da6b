/**
 * The adapter contract (test/support/adapter-contract.ts) for Azure Event Hubs, on one in-process
 * test broker (test/support/event-hubs-broker.ts): a hub of two partitions per check.
 */
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import {
  createEventHubsAdapter,
  type EventHubsAdapter,
  SqliteCheckpointStore,
} from '../adapters/event-hubs/index.js';
import { silentLogger } from '../src/core/logger.js';
import { adapterContract } from './support/adapter-contract.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import { tempDir } from './support/harness.js';

let broker: EventHubsBroker;

beforeAll(async () => {
  broker = await EventHubsBroker.start();
});
afterAll(async () => {
  await broker.stop();
});

adapterContract('Event Hubs', {
  declares: {
    redelivery: 'adapter',
    unsettledAtClose: 'unsettled',
    sideChannel: 'poison hub',
    concurrentReceives: false,
    outage: { reportsConnected: true },
  },
  async setup() {
    const hub = await broker.createHub(2);
    const poisonHub = await broker.createHub(1);
    const dir = tempDir('phe-contract-eh-');
    const checkpointStore = join(dir.path, 'checkpoints.db');
    const adapters: EventHubsAdapter[] = [];
    let crashed = false;
    return {
      // Partition 0, or 1 for a message that must not wait behind the others.
      publish: (body, options) => hub.publish(options?.apart ? '1' : '0', body),
      async open() {
        const adapter = createEventHubsAdapter({
          connectionString: hub.connectionString,
          checkpointStore,
          checkpointIntervalMs: 20,
          deadLetterQueue: poisonHub.name,
          logger: silentLogger(),
          // Reconnect for as long as an outage lasts (the SDK's default gives up after 3 tries).
          clientOptions: { retryOptions: { maxRetries: 1000, retryDelayInMs: 100, maxRetryDelayInMs: 100 } },
        });
        adapters.push(adapter);
        return adapter;
      },
      // What lies past each partition's checkpoint (a log keeps everything; the checkpoint moves).
      async holds() {
        let held = 0;
        const written = await checkpoints(adapters[0]);
        for (const partitionId of hub.partitionIds) {
          const next = (written.get(partitionId) ?? -1) + 1;
          held += (await hub.events(partitionId)).length - next;
        }
        return held;
      },
      async sideChannel() {
        return (await poisonHub.events('0')).map((e) => e.body);
      },
      outage: {
        async begin() {
          crashed = true;
          await broker.crash();
        },
        async end() {
          await broker.resume();
          crashed = false;
        },
      },
      async cleanup() {
        if (crashed) await broker.resume(); // after a failed outage check
        for (const adapter of adapters) await adapter.close();
        dir.cleanup();
      },
    };

    /** Each partition's checkpoint (a sequence number), as the adapters wrote them. */
    async function checkpoints(adapter: EventHubsAdapter | undefined): Promise<Map<string, number>> {
      if (!adapter) return new Map();
      const store = new SqliteCheckpointStore({ path: checkpointStore });
      try {
        const list = await store.listCheckpoints(
          adapter.fullyQualifiedNamespace,
          hub.name,
          adapter.consumerGroup,
        );
        return new Map(list.map((c) => [c.partitionId, c.sequenceNumber]));
      } finally {
        store.close();
      }
    }
  },
});
