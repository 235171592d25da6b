/** `partner-events trigger`, run as a child process against real local targets. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { Keyring } from '../src/core/secrets.js';
import { verifyMessage } from '../src/core/verify.js';
import { runCli, startApp } from './support/cli.js';
import { startFauxqsQueue } from './support/fauxqs.js';
import { tempDir } from './support/harness.js';
import { jsonLines } from './support/records.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-trigger-');
});
afterEach(() => dir.cleanup());

const keyring = new Keyring([{ id: 'current', secret: TEST_SIGNING_SECRET }]);

describe('partner-events trigger', () => {
  it('sends one signed sample event to SQS, with --set fields at dotted paths and JSON values', async () => {
    const { client, queue, env, close } = await startFauxqsQueue('trigger');
    try {
      const result = await runCli(
        [
          'trigger',
          'coach.nudge.created',
          '--to',
          `sqs:${queue.url}`,
          '--set',
          'target.type=health_action',
          '--set',
          'target.extra={"priority":2}',
          '--set',
          'nudge_id=n-42',
        ],
        { env },
      );
      expect(result.code).toBe(0);
      const eventId = result.stdout.trim();
      expect(eventId).toMatch(/^evt_/);
      expect(result.stderr).toContain(`coach.nudge.created ${eventId} -> sqs:${queue.name}: sent`);
      const { Messages = [] } = await client.send(
        new ReceiveMessageCommand({ QueueUrl: queue.url, MaxNumberOfMessages: 10 }),
      );
      expect(Messages).toHaveLength(1);
      const verified = verifyMessage(Messages[0]?.Body ?? '', { keyring });
      expect(verified.eventId).toBe(eventId);
      expect(verified.keyId).toBe('current');
      expect(verified.payload).toMatchObject({
        nudge_id: 'n-42',
        target: { type: 'health_action', extra: { priority: 2 } },
      });
    } finally {
      await close();
    }
  });

  it('without --to prints the envelope, signed with the secret --secret-env names', async () => {
    const result = await runCli(
      ['trigger', 'daily.data.weight.created', '--secret-env', 'MY_SECRET', '--set', 'value=70.5'],
      {
        env: { MY_SECRET: 'another-secret-for-a-staging-worker' },
      },
    );
    expect(result.code).toBe(0);
    const other = new Keyring([{ id: 'staging', secret: 'another-secret-for-a-staging-worker' }]);
    const verified = verifyMessage(result.stdout.trim(), { keyring: other });
    expect(verified.payload).toMatchObject({ event_type: 'daily.data.weight.created', value: 70.5 });
  });

  it('appends to a file with --json, and reports an ingress that refuses the event', async () => {
    const file = join(dir.path, 'events.jsonl');
    const json = await runCli(['trigger', 'daily.data.hrv.created', '--to', `file:${file}`, '--json']);
    expect(json.code).toBe(0);
    const [out] = jsonLines(json.stdout);
    expect(out).toMatchObject({ event_type: 'daily.data.hrv.created', delivery: { accepted: true } });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(out?.envelope);

    const app = await startApp(() => 422);
    try {
      const refused = await runCli(['trigger', 'daily.data.hrv.created', '--to', app.url]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain('HTTP 422');
      expect(app.received).toHaveLength(1);
    } finally {
      await app.close();
    }
  });

  it('exits 2 for a type outside the catalog, a bad --set, or no secret', async () => {
    const unknown = await runCli(['trigger', 'lab.result.created']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('the catalog has: daily.data.heart_rate.created');
    expect((await runCli(['trigger', 'coach.nudge.created', '--set', '=1'])).code).toBe(2);
    const noSecret = await runCli(['trigger', 'coach.nudge.created'], {
      env: { PARTNER_EVENTS_SIGNING_SECRET: '' },
    });
    expect(noSecret.code).toBe(2);
    expect(noSecret.stderr).toContain('SECRET_INVALID');
  });

  it('warns, and still sends, when --set makes the body invalid (to test SCHEMA_INVALID handling)', async () => {
    const result = await runCli(['trigger', 'daily.data.steps.created', '--set', 'value="many"']);
    expect(result.code).toBe(0);
    expect(result.stderr).toContain('warning: sending it anyway');
  });
});
