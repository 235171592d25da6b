/**
 * The replay contract (test/support/replay-contract.ts) for `replay sqs:DLQ`, on one in-process
 * fauxqs: the worker (`partner-events run`) fills the dead-letter queue itself, a redrive policy
 * moving what keeps failing (without a code), its `deadLetterQueue` setting sending what dies at
 * once (with its code).
 */
import { join } from 'node:path';
import { GetQueueAttributesCommand, SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { sqsReplayReader } from '../adapters/sqs/replay-reader.js';
import { silentLogger } from '../src/core/logger.js';
import type { ReplayMessage } from '../src/core/replay-reader.js';
import { startApp, startRun } from './support/cli.js';
import {
  createQueue,
  type FauxqsServer,
  fauxqsClient,
  fauxqsEnv,
  sqsCounts,
  startFauxqs,
} from './support/fauxqs.js';
import { type ReplayFixture, replayContract } from './support/replay-contract.js';

let fauxqs: FauxqsServer;

beforeAll(async () => {
  fauxqs = await startFauxqs();
});
afterAll(async () => {
  await fauxqs?.close();
});

replayContract('SQS dead-letter queue', {
  declares: {
    reading: 'queue',
    // The worker sent the one that died at once with its code; SQS moved the others without one.
    recordedCodes: ['ENVELOPE_MISMATCH', null, null, null, null],
  },
  async setup({ dir, dedupePath, envelopes }) {
    const client = fauxqsClient(fauxqs.endpoint);
    const env = fauxqsEnv(fauxqs.endpoint);
    const dlq = await createQueue(client, 'dlq');
    const { Attributes } = await client.send(
      new GetQueueAttributesCommand({ QueueUrl: dlq.url, AttributeNames: ['QueueArn'] }),
    );
    const main = await createQueue(client, 'main', {
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: Attributes?.QueueArn, maxReceiveCount: 2 }),
    });
    // The app is down: the worker retries, and SQS moves each message on after its second receive.
    const down = await startApp(() => 503);
    const worker = await startRun(
      [
        '--source',
        `sqs:${main.url}`,
        '--forward',
        down.url,
        '--dedupe',
        `sqlite:${dedupePath}`,
        '--dead-letter',
        join(dir, 'worker-dead.jsonl'),
      ],
      { env: { ...env, PARTNER_EVENTS_SQS_DEAD_LETTER_QUEUE: dlq.url } },
    );
    try {
      for (const e of envelopes) {
        await client.send(new SendMessageCommand({ QueueUrl: main.url, MessageBody: e.raw }));
      }
      // The worker must receive a message once more for SQS to move it: it polls on its own.
      await vi.waitFor(
        async () => expect((await sqsCounts(client, dlq.url)).visible).toBe(envelopes.length),
        { timeout: 60_000, interval: 200 },
      );
    } finally {
      await worker.stop();
      await down.close();
    }
    return sqsFixture(client, dlq.url);
  },
  async fresh(envelopes) {
    const client = fauxqsClient(fauxqs.endpoint);
    const queue = await createQueue(client, 'max-dlq');
    for (const e of envelopes) {
      await client.send(new SendMessageCommand({ QueueUrl: queue.url, MessageBody: e.raw }));
    }
    return sqsFixture(client, queue.url);
  },
});

/** A queue as the replay contract reads it. */
function sqsFixture(client: SQSClient, queueUrl: string): ReplayFixture {
  return {
    spec: `sqs:${queueUrl}`,
    env: fauxqsEnv(fauxqs.endpoint),
    args: ['--settle-seconds', '1'],
    auditNames: new URL(queueUrl).host,
    /** Visible messages, once none is in flight. */
    async available() {
      let counts = await sqsCounts(client, queueUrl);
      await vi.waitFor(
        async () => {
          counts = await sqsCounts(client, queueUrl);
          expect(counts.inFlight).toBe(0);
        },
        { timeout: 20_000, interval: 100 },
      );
      return counts.visible;
    },
    async stored() {
      const { visible, inFlight } = await sqsCounts(client, queueUrl);
      return visible + inFlight;
    },
    async cleanup() {
      client.destroy();
    },
  };
}

describe('the SQS replay reader', () => {
  it('keeps the trace context: a traceparent attribute comes with the message, and every receive asks for AWSTraceHeader', async () => {
    const client = fauxqsClient(fauxqs.endpoint);
    const receives: Record<string, unknown>[] = [];
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'ReceiveMessageCommand')
          receives.push(args.input as Record<string, unknown>);
        return next(args);
      },
      { step: 'initialize', name: 'recordReceives' },
    );
    const queue = await createQueue(client, 'traced-dlq');
    const traceparent = '00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01';
    await client.send(
      new SendMessageCommand({
        QueueUrl: queue.url,
        MessageBody: '{}',
        MessageAttributes: {
          traceparent: { DataType: 'String', StringValue: traceparent },
          tracestate: { DataType: 'String', StringValue: 'vendor=1' },
        },
      }),
    );
    const reader = sqsReplayReader(
      `sqs:${queue.url}`,
      {
        logger: silentLogger(),
        settleMs: 3000,
        max: undefined,
        visibilityTimeoutSeconds: 30,
        since: undefined,
        until: undefined,
        consumerGroup: '$Default',
      },
      client,
    );
    try {
      let batch: readonly ReplayMessage[] | null = [];
      while (batch !== null && batch.length === 0)
        batch = await reader.receive(10, new AbortController().signal);
      expect(batch?.map((m) => m.traceContext)).toEqual([{ traceparent, tracestate: 'vendor=1' }]);
      for (const message of batch ?? []) await reader.skip(message);
      expect(receives.length).toBeGreaterThan(0);
      for (const receive of receives) {
        expect(receive.MessageSystemAttributeNames).toEqual(expect.arrayContaining(['AWSTraceHeader']));
        expect(receive.MessageAttributeNames).toEqual(['All']);
      }
    } finally {
      await reader.close();
    }
  });
});
