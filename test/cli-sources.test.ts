/**
 * `partner-events run --source …` against each queue emulator, the way a user runs it: the
 * connection comes from the environment, events are forwarded to an app on 127.0.0.1.
 */

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { QueueClient } from '@azure/storage-queue';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createFileSource } from '../adapters/file/index.js';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { deadLetterRecord } from '../src/core/dead-letter-record.js';
import { Azurite } from './support/azurite.js';
import { expectReceived, runCli, startApp, startRun } from './support/cli.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import { startFauxqsQueue } from './support/fauxqs.js';
import { tempDir } from './support/harness.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-cli-src-');
});
afterEach(() => dir.cleanup());

describe('run --source azure-storage-queue:NAME', () => {
  let azurite: Azurite;
  beforeAll(async () => {
    azurite = await Azurite.start('queue');
  });
  afterAll(async () => {
    await azurite.stop();
  });

  it('consumes the queue named in the source with the connection string from the environment', async () => {
    const queue = new QueueClient(azurite.connectionString, 'cli-events');
    await queue.create();
    const events = [
      createTestEnvelope('daily.data.steps.created'),
      createTestEnvelope('coach.nudge.created'),
    ];
    for (const e of events) await queue.sendMessage(e.raw);
    const app = await startApp();
    const worker = await startRun(
      ['--source', 'azure-storage-queue:cli-events', '--forward', app.url, '--dedupe', 'memory'],
      { env: { AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString } },
    );
    try {
      await expectReceived(app, events);
      await vi.waitFor(async () => expect((await queue.getProperties()).approximateMessagesCount).toBe(0));
    } finally {
      expect((await worker.stop()).code).toBe(0);
      await app.close();
    }
  });
});

describe('run --source sqs:QUEUE_URL', () => {
  it('consumes an SQS queue through the SDK’s standard endpoint and credential settings', async () => {
    const sqs = await startFauxqsQueue('cli');
    const app = await startApp();
    try {
      const events = [
        createTestEnvelope('daily.data.hrv.created'),
        createTestEnvelope('daily.data.weight.created'),
      ];
      for (const e of events)
        await sqs.client.send(new SendMessageCommand({ QueueUrl: sqs.queue.url, MessageBody: e.raw }));
      const worker = await startRun(
        ['--source', `sqs:${sqs.queue.url}`, '--forward', app.url, '--dedupe', 'memory'],
        { env: sqs.env },
      );
      try {
        await expectReceived(app, events);
      } finally {
        expect((await worker.stop()).code).toBe(0);
      }
    } finally {
      await app.close();
      await sqs.close();
    }
  });
});

describe('sqsSourceFromCli', () => {
  it('takes the region from an AWS queue URL unless AWS_REGION is set (SDK v3 ignores AWS_DEFAULT_REGION)', async () => {
    const { sqsSourceFromCli } = await import('../adapters/sqs/index.js');
    const saved = { region: process.env.AWS_REGION, fallback: process.env.AWS_DEFAULT_REGION };
    try {
      delete process.env.AWS_REGION;
      process.env.AWS_DEFAULT_REGION = 'us-west-2';
      const fromUrl = sqsSourceFromCli('https://sqs.eu-central-1.amazonaws.com/123456789012/q');
      expect(await fromUrl.client.config.region()).toBe('eu-central-1');
      const fromDefault = sqsSourceFromCli('sqs:http://127.0.0.1:9/000000000000/q');
      expect(await fromDefault.client.config.region()).toBe('us-west-2');
      await Promise.all([fromUrl.close(), fromDefault.close()]);
    } finally {
      if (saved.region === undefined) delete process.env.AWS_REGION;
      else process.env.AWS_REGION = saved.region;
      if (saved.fallback === undefined) delete process.env.AWS_DEFAULT_REGION;
      else process.env.AWS_DEFAULT_REGION = saved.fallback;
    }
  });
});

describe('run --source azure-event-hubs:HUB', () => {
  it('consumes every partition of the hub with the connection string from the environment', async () => {
    const broker = await EventHubsBroker.start({ hub: 'cli-hub', partitions: 2 });
    const app = await startApp();
    try {
      const events = [
        createTestEnvelope('daily.data.sleep.created'),
        createTestEnvelope('daily.data.fat.created'),
      ];
      broker.publish('0', events[0]?.raw ?? '');
      broker.publish('1', events[1]?.raw ?? '');
      const worker = await startRun(
        ['--source', 'azure-event-hubs:cli-hub', '--forward', app.url, '--dedupe', 'memory'],
        {
          env: {
            EVENTHUBS_CONNECTION_STRING: broker.connectionString('cli-hub'),
            EVENTHUBS_CHECKPOINT_STORE: `sqlite:${join(dir.path, 'checkpoints.db')}`,
          },
        },
      );
      try {
        await expectReceived(app, events, 20_000);
      } finally {
        expect((await worker.stop()).code).toBe(0);
      }
    } finally {
      await app.close();
      await broker.stop();
    }
  }, 30_000);
});

describe('replaying an ENCODING_MISMATCH dead letter', () => {
  it('decodes the base64 text its hint points at, so the original envelope verifies', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const base64 = Buffer.from(event.raw).toString('base64');
    const record = deadLetterRecord(
      { id: 'q-1', body: base64, attempt: 1, metadata: { encoding: 'none', encoding_hint: 'looks-base64' } },
      { code: 'ENCODING_MISMATCH', reason: "set encoding to 'base64' or 'auto'" },
      'storage-queue:q',
    );
    const file = join(dir.path, 'dead.jsonl');
    writeFileSync(file, `${JSON.stringify(record)}\n`);
    const source = createFileSource({ path: file });
    const [message] = (await source.receive(1, new AbortController().signal)) ?? [];
    expect(message?.body).toBe(event.raw);
    await source.close();
    // verify judges the record the same way replay will.
    const verified = await runCli(['verify', file, '--json', '--no-age']);
    expect(JSON.parse(verified.stdout.trim())).toMatchObject({ ok: true, event_id: event.eventId });
  });
});
