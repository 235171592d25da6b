import { randomUUID } from 'node:crypto';
import { SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { AdapterError, ConfigError, errorMessage } from '../../src/core/errors.js';
import { redact } from '../../src/core/redact.js';
import type { Delivery, OutgoingMessage, Target } from '../../src/core/target.js';
import { isFifoQueue, queueNameOf } from './options.js';
import { cliClientConfig } from './url.js';

/** The SQS client a CLI queue spec implies (region from the URL, a local endpoint from the env). */
export function cliClient(queueUrl: string): SQSClient {
  return new SQSClient(cliClientConfig(queueUrl));
}

/**
 * `--to sqs:QUEUE_URL` (or an AWS queue URL): one `SendMessage` per envelope, the body exactly as
 * given. On a FIFO queue every message gets its own deduplication id (a duplicate delivery is
 * meant to arrive twice) and one message group, so order is kept.
 */
export function sqsTargetFromCli(spec: string): Target {
  const queueUrl = spec.startsWith('sqs:') ? spec.slice('sqs:'.length) : spec;
  if (!/^https?:\/\/[^/]+\/.+/.test(queueUrl))
    throw new ConfigError(`--to ${redact(spec)}: expected sqs:QUEUE_URL`);
  const client = cliClient(queueUrl);
  const fifo = isFifoQueue(queueUrl);
  const name = `sqs:${queueNameOf(queueUrl)}`;
  return {
    name,
    async send(message: OutgoingMessage): Promise<Delivery> {
      const body =
        typeof message.body === 'string' ? message.body : Buffer.from(message.body).toString('utf8');
      try {
        await client.send(
          new SendMessageCommand({
            QueueUrl: queueUrl,
            MessageBody: body,
            ...(fifo ? { MessageGroupId: 'partner-events', MessageDeduplicationId: randomUUID() } : {}),
          }),
        );
      } catch (cause) {
        throw new AdapterError(`SendMessage to ${name} failed: ${errorMessage(cause)}`, { cause });
      }
      return { accepted: true, detail: 'sent' };
    },
    close: async () => client.destroy(),
  };
}
