/** The adapter contract (test/support/adapter-contract.ts) for Azure Storage Queue, on one Azurite. */
import { randomUUID } from 'node:crypto';
import { QueueServiceClient } from '@azure/storage-queue';
import { afterAll, beforeAll } from 'vitest';
import { createStorageQueueAdapter, type StorageQueueAdapter } from '../adapters/storage-queue/index.js';
import { silentLogger } from '../src/core/logger.js';
import { adapterContract } from './support/adapter-contract.js';
import { Azurite } from './support/azurite.js';

let azurite: Azurite;
let service: QueueServiceClient;

beforeAll(async () => {
  // On disk: an outage (pause, resume) keeps the queues and their messages.
  azurite = await Azurite.start('queue', { persistent: true });
  service = QueueServiceClient.fromConnectionString(azurite.connectionString);
});
afterAll(async () => {
  await azurite?.stop();
});

adapterContract('Storage Queue', {
  declares: {
    redelivery: 'adapter',
    unsettledAtClose: 'unsettled',
    sideChannel: 'poison queue',
    concurrentReceives: false,
    outage: { reportsConnected: false },
  },
  async setup() {
    const queueName = `contract-${randomUUID().slice(0, 8)}`;
    const queue = service.getQueueClient(queueName);
    await queue.create();
    const poison = service.getQueueClient(`${queueName}-poison`);
    const adapters: StorageQueueAdapter[] = [];
    return {
      async publish(body) {
        await queue.sendMessage(new TextDecoder('utf-8', { fatal: true }).decode(body));
      },
      async open(options) {
        // As the CLI builds it: queue name and connection string (the adapter's own clients, with
        // their few quick retries), the default poison queue `<queue>-poison`.
        const adapter = createStorageQueueAdapter({
          queueName,
          connectionString: azurite.connectionString,
          pollIntervalMs: 10,
          maxPollIntervalMs: 100,
          // Left unsettled, a message comes back after its visibility timeout: 1 s when asked,
          // else long past any check, so that nothing comes back unless settled so.
          visibilityTimeoutSeconds: options?.unsettledReturnSoon ? 1 : 60,
          logger: silentLogger(),
        });
        adapters.push(adapter);
        return adapter;
      },
      // Counts invisible messages too.
      holds: async () => (await queue.getProperties()).approximateMessagesCount ?? -1,
      async sideChannel() {
        if (!(await poison.exists())) return [];
        const { peekedMessageItems } = await poison.peekMessages({ numberOfMessages: 32 });
        return peekedMessageItems.map((m) => new Uint8Array(Buffer.from(m.messageText, 'utf8')));
      },
      outage: { begin: () => azurite.pause(), end: () => azurite.resume() },
      async cleanup() {
        for (const adapter of adapters) await adapter.close();
        await azurite.resume(); // after a failed outage check
        await queue.deleteIfExists();
        await poison.deleteIfExists();
      },
    };
  },
});
