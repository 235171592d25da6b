import type { QueueClient } from '@azure/storage-queue';
import { AdapterError, ConfigError, errorMessage } from '../../src/core/errors.js';
import type { Delivery, OutgoingMessage, Target } from '../../src/core/target.js';
import { CLI_PREFIX as PREFIX } from './names.js';
import { CONNECTION_STRING_ENV, resolveTarget, type StorageQueueTarget } from './queue-address.js';

/**
 * `--to azure-storage-queue:QUEUE` (connection string from `AZURE_STORAGE_CONNECTION_STRING`) or
 * `--to https://ACCOUNT.queue.core.windows.net/QUEUE[?SAS]`: one `sendMessage` per envelope, its
 * text as-is (what the JS SDK sends; the adapter's default `auto` encoding reads it). The queue
 * must exist.
 */
export function storageQueueTargetFromCli(spec: string): Target {
  let target: StorageQueueTarget;
  if (spec.startsWith(PREFIX)) {
    const queueName = spec.slice(PREFIX.length);
    if (!queueName) throw new ConfigError(`--to ${PREFIX}QUEUE_NAME needs a queue name`);
    target = { queueName };
  } else if (/^https?:\/\//i.test(spec)) {
    target = { queueUrl: spec };
  } else {
    throw new ConfigError(
      `not a Storage Queue target: use ${PREFIX}QUEUE_NAME (with ${CONNECTION_STRING_ENV}) or https://ACCOUNT.queue.core.windows.net/QUEUE`,
    );
  }
  const resolved = resolveTarget(target);
  const name = `storage-queue:${resolved.queueName}`;
  let queue: Promise<QueueClient> | undefined;
  return {
    name,
    async send(message: OutgoingMessage): Promise<Delivery> {
      queue ??= resolved.connect().then((c) => c.queue);
      const text =
        typeof message.body === 'string' ? message.body : Buffer.from(message.body).toString('utf8');
      try {
        await (await queue).sendMessage(text);
      } catch (cause) {
        throw new AdapterError(`sendMessage to ${name} failed: ${errorMessage(cause)}`, { cause });
      }
      return { accepted: true, detail: 'sent' };
    },
    close: async () => {},
  };
}
