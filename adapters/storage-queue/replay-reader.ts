import { setTimeout as sleep } from 'node:timers/promises';
import type { QueueClient, ReceivedMessageItem } from '@azure/storage-queue';
import { ConfigError } from '../../src/core/errors.js';
import { redact } from '../../src/core/redact.js';
import {
  createSideChannelReader,
  type ReplayReader,
  type ReplayReaderContext,
  type SideChannel,
  type SideChannelMessage,
} from '../../src/core/replay-reader.js';
import { decodeMessageText } from './encoding.js';
import { MessageLease } from './lease.js';
import { CLI_PREFIX } from './names.js';
import { MAX_MESSAGES_PER_RECEIVE, MAX_VISIBILITY_SECONDS } from './options.js';
import { resolveTarget, type StorageQueueTarget } from './queue-address.js';
import { adapterError } from './service-error.js';

/** The longest wait between two receives that found the queue empty. */
const EMPTY_POLL_MS = 500;

/**
 * `replay azure-storage-queue:QUEUE` (typically `QUEUE-poison`, where the worker copies dead
 * messages): receives with the run's visibility timeout, deletes a message once done and makes
 * any other visible again. The text is decoded as the worker's `auto` encoding does. A poison
 * copy carries no code, so `--code` selects none of them.
 */
export function storageQueueReplayReader(spec: string, context: ReplayReaderContext): ReplayReader {
  let target: StorageQueueTarget;
  if (spec.startsWith(CLI_PREFIX)) {
    const queueName = spec.slice(CLI_PREFIX.length);
    if (!queueName) throw new ConfigError(`replay ${CLI_PREFIX}QUEUE_NAME needs a queue name`);
    target = { queueName };
  } else if (/^https?:\/\//i.test(spec)) {
    target = { queueUrl: spec };
  } else {
    throw new ConfigError(`replay ${redact(spec)}: expected ${CLI_PREFIX}QUEUE_NAME`);
  }
  const resolved = resolveTarget(target);
  const connecting = resolved.connect().then((c) => c.queue);
  connecting.catch(() => {}); // reported by the first call that needs it
  return createSideChannelReader(
    storageQueueChannel(`storage-queue:${resolved.queueName}`, () => connecting, context),
    context,
  );
}

function storageQueueChannel(
  name: string,
  queueOf: () => Promise<QueueClient>,
  context: ReplayReaderContext,
): SideChannel {
  const visibility = Math.min(MAX_VISIBILITY_SECONDS, context.visibilityTimeoutSeconds);
  /** Each held message's newest popReceipt: every update invalidates the one it was called with. */
  const leases = new Map<string, MessageLease>();
  const call = async <T>(operation: string, run: (queue: QueueClient) => Promise<T>): Promise<T> => {
    try {
      return await run(await queueOf());
    } catch (error) {
      throw adapterError(operation, error);
    }
  };
  const update = (message: SideChannelMessage, seconds: number) =>
    leases.get(message.id)?.run((receipt) =>
      call(`update of message ${message.id}`, async (queue) => {
        const response = await queue.updateMessage(message.id, receipt, undefined, seconds);
        return response.popReceipt;
      }),
    );
  return {
    name,
    kind: 'queue',
    async fetch(max, signal) {
      const items = await call('receive', (queue) => receiveBatch(queue, max, visibility, signal));
      if (items.length === 0) {
        await sleep(Math.min(EMPTY_POLL_MS, context.settleMs / 4), undefined, { signal }).catch(() => {});
        return [];
      }
      for (const item of items) leases.set(item.messageId, new MessageLease(item.popReceipt));
      return items.map((item) => replayMessage(item, name));
    },
    async remove(message) {
      await leases.get(message.id)?.run(async (receipt) => {
        await call(`delete of message ${message.id}`, (queue) => queue.deleteMessage(message.id, receipt));
        return undefined;
      });
      leases.delete(message.id);
    },
    async release(message) {
      await update(message, 0);
      leases.delete(message.id);
    },
    async renew(messages) {
      await Promise.all(messages.map((m) => update(m, visibility)));
    },
    async total() {
      const properties = await call('getProperties', (queue) => queue.getProperties());
      return properties.approximateMessagesCount;
    },
    // The count includes hidden messages: 0 once the run let go of its own means none is left.
    async leftAfterMax() {
      const properties = await call('getProperties', (queue) => queue.getProperties());
      return properties.approximateMessagesCount === 0 ? 'none' : { unread: 'may-remain' };
    },
    close: async () => {},
  };
}

async function receiveBatch(
  queue: QueueClient,
  max: number,
  visibility: number,
  signal: AbortSignal,
): Promise<ReceivedMessageItem[]> {
  const { receivedMessageItems } = await queue.receiveMessages({
    numberOfMessages: Math.min(MAX_MESSAGES_PER_RECEIVE, max),
    visibilityTimeout: visibility,
    abortSignal: signal,
  });
  return receivedMessageItems;
}

function replayMessage(item: ReceivedMessageItem, queue: string): SideChannelMessage {
  const decoded = decodeMessageText(item.messageText, 'auto');
  return {
    id: item.messageId,
    body: decoded.text,
    attempt: item.dequeueCount,
    enqueuedAt: item.insertedOn.getTime(),
    metadata: { queue, dequeue_count: item.dequeueCount, encoding: decoded.applied },
  };
}
