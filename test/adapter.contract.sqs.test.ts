/** The adapter contract (test/support/adapter-contract.ts) for SQS, on one in-process fauxqs. */
import { CreateQueueCommand, ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll } from 'vitest';
import { createSqsAdapter, type SqsAdapter } from '../adapters/sqs/index.js';
import { adapterContract } from './support/adapter-contract.js';
import { createQueue, type FauxqsServer, fauxqsClient, sqsCounts, startFauxqs } from './support/fauxqs.js';

let server: FauxqsServer;

beforeAll(async () => {
  server = await startFauxqs();
});
afterAll(async () => {
  await server.close();
});

adapterContract('SQS', {
  declares: {
    redelivery: 'adapter',
    unsettledAtClose: 'unsettled',
    sideChannel: 'dead-letter queue',
    concurrentReceives: true,
    outage: { reportsConnected: false },
  },
  async setup() {
    const client = fauxqsClient(server.endpoint);
    const queue = await createQueue(client, 'contract');
    const dlq = await createQueue(client, 'contract-dlq');
    const adapters: SqsAdapter[] = [];
    return {
      async publish(body) {
        await client.send(new SendMessageCommand({ QueueUrl: queue.url, MessageBody: utf8(body) }));
      },
      async open(options) {
        const adapter = createSqsAdapter({
          queueUrl: queue.url,
          client,
          waitTimeSeconds: 1,
          // Left unsettled, a message comes back after its visibility timeout: 1 s when asked,
          // else long past any check, so that nothing comes back unless settled so.
          visibilityTimeoutSeconds: options?.unsettledReturnSoon ? 1 : 60,
          deadLetterQueue: dlq.url,
        });
        adapters.push(adapter);
        return adapter;
      },
      async holds() {
        const { visible, inFlight, delayed } = await sqsCounts(client, queue.url);
        return visible + inFlight + delayed;
      },
      async sideChannel() {
        // Visibility 0: reading the dead-letter queue leaves it as it was.
        const { Messages = [] } = await client.send(
          new ReceiveMessageCommand({ QueueUrl: dlq.url, MaxNumberOfMessages: 10, VisibilityTimeout: 0 }),
        );
        return Messages.map((m) => new Uint8Array(Buffer.from(m.Body ?? '', 'utf8')));
      },
      outage: {
        begin: () => server.close(),
        async end() {
          // Back on the same port, so the adapter's endpoint and queue URLs hold; fauxqs keeps
          // its queues in memory, so they are made again (empty).
          server = await startFauxqs({ port: Number(new URL(server.endpoint).port) });
          for (const { name } of [queue, dlq]) await client.send(new CreateQueueCommand({ QueueName: name }));
        },
      },
      async cleanup() {
        for (const adapter of adapters) await adapter.close();
        client.destroy();
      },
    };
  },
});

function utf8(body: Uint8Array): string {
  return new TextDecoder('utf-8', { fatal: true }).decode(body);
}
