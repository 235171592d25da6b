/**
 * The replay contract (test/support/replay-contract.ts) for `replay azure-storage-queue:QUEUE-poison`,
 * on one Azurite: the worker fills the poison queue itself (what keeps failing after its attempts,
 * what is malformed at once); a poison copy carries no code.
 */
import { type QueueClient, QueueServiceClient } from '@azure/storage-queue';
import { afterAll, beforeAll } from 'vitest';
import { createStorageQueueAdapter } from '../adapters/storage-queue/index.js';
import { silentLogger } from '../src/core/logger.js';
import { Azurite } from './support/azurite.js';
import { fillWithFailingWorker, type ReplayFixture, replayContract } from './support/replay-contract.js';

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
    const visible = () => visibleOn(poison);
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
    return queueFixture(poison);
  },
  async fresh(envelopes) {
    const service = QueueServiceClient.fromConnectionString(azurite.connectionString);
    const queue = service.getQueueClient('max-poison');
    await queue.create();
    for (const e of envelopes) await queue.sendMessage(e.raw);
    return queueFixture(queue);
  },
});

/** Messages on the queue that another reader could take now. */
async function visibleOn(queue: QueueClient): Promise<number> {
  return (await queue.peekMessages({ numberOfMessages: 32 })).peekedMessageItems.length;
}

/** A poison queue as the replay contract reads it. */
function queueFixture(queue: QueueClient): ReplayFixture {
  return {
    spec: `azure-storage-queue:${queue.name}`,
    env: { AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString },
    args: ['--settle-seconds', '1'],
    auditNames: queue.name,
    available: () => visibleOn(queue),
    async stored() {
      return (await queue.getProperties()).approximateMessagesCount ?? -1;
    },
  };
}
