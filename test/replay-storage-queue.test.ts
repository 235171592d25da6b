/**
 * The replay contract (test/support/replay-contract.ts) for `replay azure-storage-queue:QUEUE-poison`,
 * on one Azurite: the worker fills the poison queue itself (what keeps failing after its attempts,
 * what is malformed at once); a poison copy carries no code.
 */
import { QueueServiceClient } from '@azure/storage-queue';
import { afterAll, beforeAll } from 'vitest';
import { createStorageQueueAdapter } from '../adapters/storage-queue/index.js';
import { silentLogger } from '../src/core/logger.js';
import { Azurite } from './support/azurite.js';
import { fillWithFailingWorker, replayContract } from './support/replay-contract.js';

let azurite: Azurite;

beforeAll(async () => {
  azurite = await Azurite.start('queue');
});
afterAll(async () => {
  await azurite?.stop();
});

replayContract('Storage Queue poison queue', {
  declares: { reading: 'queue', recordedCodes: [null, null, null, null, null] },
  async setup(context) {
    const service = QueueServiceClient.fromConnectionString(azurite.connectionString);
    const queue = service.getQueueClient('orders');
    await queue.create();
    const poison = service.getQueueClient('orders-poison');
    /** Messages on the poison queue that another reader could take now. */
    const visible = async () =>
      (await poison.peekMessages({ numberOfMessages: 32 })).peekedMessageItems.length;
    // Each failed event is copied to orders-poison (the mismatch at once).
    await fillWithFailingWorker(context, {
      source: createStorageQueueAdapter({
        queueClient: queue,
        pollIntervalMs: 10,
        maxPollIntervalMs: 100,
        logger: silentLogger(),
      }),
      retry: { maxAttempts: 2, baseDelayMs: 0, maxDelayMs: 0 },
      send: async (e) => void (await queue.sendMessage(e.raw)),
      sideChannel: async () => ((await poison.exists()) ? visible() : 0),
    });
    return {
      spec: `azure-storage-queue:${poison.name}`,
      env: { AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString },
      args: ['--settle-seconds', '1'],
      auditNames: poison.name,
      available: visible,
      async stored() {
        return (await poison.getProperties()).approximateMessagesCount ?? -1;
      },
    };
  },
});
