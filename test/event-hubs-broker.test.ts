/**
 * The test Event Hubs broker itself (test/support/event-hubs-broker.ts), where its behaviour is
 * ours and not the SDK's: a client's late frames on a session the broker has ended; a message
 * over its size limit refused as Event Hubs refuses it.
 */
import { EventHubProducerClient } from '@azure/event-hubs';
import rhea, { type Connection, type Delivery, type EventContext, type Receiver } from 'rhea';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import type { TestHub } from './support/event-hubs-server.js';

let broker: EventHubsBroker;
let hub: TestHub;

beforeAll(async () => {
  broker = await EventHubsBroker.start();
  hub = await broker.createHub(1);
  await hub.publish('0', '{"n":1}');
});
afterAll(async () => {
  await broker?.stop();
});

/** Opens a reader on partition 0 from the start that leaves accepting to the caller. */
function openReader(connection: Connection, name: string): Receiver {
  return connection.open_receiver({
    name,
    source: { address: `${hub.name}/ConsumerGroups/$Default/Partitions/0` },
    autoaccept: false,
  });
}

/** The reader's first event; fails as soon as the connection drops. */
function firstDelivery(receiver: Receiver): Promise<Delivery> {
  return new Promise((resolve, reject) => {
    receiver.once('message', (ctx: EventContext) => resolve(ctx.delivery as Delivery));
    receiver.connection.once('disconnected', () => reject(new Error('the broker dropped the connection')));
  });
}

describe('test Event Hubs broker', () => {
  it("keeps a connection open when the client accepts an event after the broker ended that event's session", async () => {
    const container = rhea.create_container({ id: 'late-disposition-client' });
    const connection = container.connect({ host: '127.0.0.1', port: broker.port, reconnect: false });
    connection.on('connection_error', () => {});
    try {
      const first = openReader(connection, 'first');
      const delivery = await firstDelivery(first);
      // As the SDK's rhea does when a reader closes with events in flight: the session ends, and
      // the event is accepted only after the broker's `end` arrived. The broker has removed the
      // session by then, so the disposition reaches it on a channel it no longer knows.
      const session = first.session;
      const ended = new Promise<void>((resolve) =>
        session.once('session_close', () => {
          delivery.accept();
          resolve();
        }),
      );
      session.close();
      await ended;

      // The same connection still reads: the broker took the late frame in order before this attach.
      await expect(firstDelivery(openReader(connection, 'second'))).resolves.toBeDefined();
    } finally {
      connection.close();
    }
  });

  it('refuses a message over maxMessageBytes as Event Hubs does: MessageTooLargeError, not retryable, the link kept', async () => {
    const limited = await EventHubsBroker.start({ maxMessageBytes: 2048 });
    const producer = new EventHubProducerClient(limited.connectionString());
    try {
      const refused = producer.sendBatch([{ body: 'x'.repeat(4096) }], { partitionId: '0' });
      await expect(refused).rejects.toMatchObject({
        code: 'MessageTooLargeError',
        retryable: false,
        message: expect.stringMatching(/exceeds the limit \(2048 bytes\) currently allowed on the link/),
      });
      await producer.sendBatch([{ body: 'small' }], { partitionId: '0' });
      expect(limited.events('0')).toHaveLength(1);
    } finally {
      await producer.close();
      await limited.stop();
    }
  });
});
