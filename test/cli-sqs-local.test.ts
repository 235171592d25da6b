/**
 * SQS queue URLs of a local emulator, passed as emulator users copy them (the URL `CreateQueue`
 * returned, no `sqs:` prefix): read as a queue when the environment names an SQS endpoint, and
 * refused as ambiguous (exit 2, both readings named) when nothing says which they are, never
 * silently taken for an HTTP ingress.
 */
import { ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { sqsReadingOf } from '../adapters/sqs/url.js';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { expectReceived, runCli, startApp, startRun } from './support/cli.js';
import { startFauxqsQueue } from './support/fauxqs.js';
import { tempDir } from './support/harness.js';
import { jsonLines, writeJsonl } from './support/records.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-sqs-local-');
});
afterEach(() => dir.cleanup());

/** No SQS endpoint from the environment the tests run in. */
const NO_ENDPOINT = { AWS_ENDPOINT_URL_SQS: '', AWS_ENDPOINT_URL: '' };

describe('sqsReadingOf', () => {
  const local = { AWS_ENDPOINT_URL_SQS: 'http://localhost:4566' };
  it.each([
    ['sqs:http://127.0.0.1:9324/queue/q', {}, 'queue'],
    ['https://sqs.eu-west-1.amazonaws.com/123456789012/q', {}, 'queue'],
    ['https://vpce-1a2b.sqs.eu-west-1.vpce.amazonaws.com/123456789012/q.fifo', {}, 'queue'],
    // What LocalStack users copy: a queue-shaped path, the endpoint in the environment.
    ['http://localhost:4566/000000000000/my-queue', local, 'queue'],
    ['http://sqs.us-east-1.localhost.localstack.cloud:4566/000000000000/my-queue', local, 'queue'],
    // On the endpoint's origin any path is the emulator's (ElasticMQ: /queue/NAME).
    ['http://localhost:4566/queue/my-queue', local, 'queue'],
    ['http://localhost:4566/000000000000/my-queue', { AWS_ENDPOINT_URL: 'http://localhost:4566/' }, 'queue'],
    // Nothing says which it is.
    ['http://localhost:4566/000000000000/my-queue', {}, 'queue-or-http'],
    ['https://ingress.example/123456789012/events', {}, 'queue-or-http'],
    // Not queue-shaped, not on the endpoint: an ingress, whatever the environment.
    ['http://127.0.0.1:8080/events', local, 'other'],
    ['http://127.0.0.1:8080/12345/events', {}, 'other'],
    ['http://127.0.0.1:8080/000000000000/a/b', local, 'other'],
    ['http-ingress:http://localhost:4566/000000000000/my-queue', local, 'other'],
    ['file:events.jsonl', local, 'other'],
    ['azure-storage-queue:q', local, 'other'],
  ])('%s with %j reads as %s', (spec, env, reading) => {
    expect(sqsReadingOf(spec, env)).toBe(reading);
  });
});

describe('a local queue URL exactly as CreateQueue returned it', () => {
  it('run --source consumes the queue (fauxqs: http://sqs.us-east-1.localhost:PORT/000000000000/NAME)', async () => {
    const sqs = await startFauxqsQueue('local-url');
    const app = await startApp();
    try {
      const { queue } = sqs;
      expect(queue.url).toMatch(/^http:\/\/[^/]+\/\d{12}\/local-url-/);
      const events = [
        createTestEnvelope('daily.data.steps.created'),
        createTestEnvelope('coach.nudge.created'),
      ];
      for (const e of events)
        await sqs.client.send(new SendMessageCommand({ QueueUrl: queue.url, MessageBody: e.raw }));
      const worker = await startRun(['--source', queue.url, '--forward', app.url, '--dedupe', 'memory'], {
        env: sqs.env,
      });
      try {
        await expectReceived(app, events);
      } finally {
        const result = await worker.stop();
        expect(result.code).toBe(0);
        expect(result.stdout).not.toContain('listening for envelopes');
      }
    } finally {
      await app.close();
      await sqs.close();
    }
  });

  it('replay --to and trigger --to send to the queue', async () => {
    const { client, queue, env, close } = await startFauxqsQueue('local-to');
    try {
      const event = createTestEnvelope('daily.data.weight.created');
      const file = writeJsonl(dir.path, 'dead.jsonl', [event.raw]);
      const replay = await runCli(['replay', file, '--to', queue.url, '--dedupe', 'memory', '--json'], {
        env,
      });
      expect(replay.code).toBe(0);
      expect(jsonLines(replay.stdout).at(-1)).toMatchObject({ injected: 1, target: `sqs:${queue.name}` });
      const trigger = await runCli(['trigger', 'daily.data.steps.created', '--to', queue.url], { env });
      expect(trigger.code).toBe(0);
      const { Messages = [] } = await client.send(
        new ReceiveMessageCommand({ QueueUrl: queue.url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 }),
      );
      expect(Messages.map((m) => m.Body)).toContain(event.raw);
      expect(Messages.map((m) => JSON.parse(m.Body ?? '{}').event_id)).toContain(trigger.stdout.trim());
    } finally {
      await close();
    }
  });
});

describe('a queue-shaped http URL with no SQS endpoint in the environment', () => {
  const url = 'http://127.0.0.1:4566/000000000000/my-queue';

  it('run --source exits 2 naming both readings and their explicit forms, and listens on nothing', async () => {
    const result = await runCli(
      ['run', '--source', url, '--forward', 'http://127.0.0.1:9/', '--dedupe', 'memory'],
      {
        env: { ...NO_ENDPOINT, LOG_LEVEL: 'info' },
      },
    );
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`--source ${url} is ambiguous`);
    expect(result.stderr).toContain(`sqs:${url}`);
    expect(result.stderr).toContain(`http-ingress:${url}`);
    expect(result.stdout).not.toContain('listening for envelopes');
  });

  it('replay --to and trigger --to exit 2 the same way, before sending anything', async () => {
    const file = writeJsonl(dir.path, 'dead.jsonl', [createTestEnvelope('daily.data.steps.created').raw]);
    const app = await startApp();
    try {
      const target = `${app.url.replace(/\/events$/, '')}/123456789012/events`;
      for (const args of [
        ['replay', file, '--to', target, '--dedupe', 'memory'],
        ['trigger', 'daily.data.steps.created', '--to', target],
      ]) {
        const result = await runCli(args, { env: NO_ENDPOINT });
        expect(result.code).toBe(2);
        expect(result.stderr).toContain(`--to ${target} is ambiguous`);
        expect(result.stderr).toContain(`http-ingress:${target}`);
      }
      expect(app.received).toHaveLength(0);
    } finally {
      await app.close();
    }
  });

  it('http-ingress:URL says it is an ingress: run listens there and trigger --to http-ingress:URL posts to it', async () => {
    const app = await startApp();
    const source = 'http-ingress:http://127.0.0.1:0/000000000000/my-queue';
    const worker = await startRun(['--source', source, '--forward', app.url, '--dedupe', 'memory'], {
      env: NO_ENDPOINT,
    });
    try {
      const { ingress } = worker;
      expect(ingress).toMatch(/\/000000000000\/my-queue$/);
      const trigger = await runCli(
        ['trigger', 'daily.data.steps.created', '--to', `http-ingress:${ingress}`],
        {
          env: NO_ENDPOINT,
        },
      );
      expect(trigger.code).toBe(0);
      await vi.waitFor(() => expect(app.received).toHaveLength(1), { timeout: 15_000 });
      expect(app.received[0]?.headers['partner-event-id']).toBe(trigger.stdout.trim());
      // The explicit form gets the same checks as a bare URL: no user:password@ for fetch to refuse.
      const withUser = await runCli(
        [
          'trigger',
          'daily.data.steps.created',
          '--to',
          `http-ingress:${ingress.replace('//', '//user:pw0rd@')}`,
        ],
        { env: NO_ENDPOINT },
      );
      expect(withUser.code).toBe(2);
      expect(withUser.stderr).not.toContain('pw0rd');
    } finally {
      await worker.stop();
      await app.close();
    }
  });
});
