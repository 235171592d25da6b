/**
 * docs/replay-runbook.md, executed: its shell blocks run in order, in bash, against a local app,
 * a real SQS emulator (fauxqs) and a worker (`partner-events run`), with `npx partner-health-events`
 * standing for this checkout's CLI. Blocks marked `<!-- runbook-test: settings -->` are replaced
 * by the test's paths; `A` and `B` blocks are the two ways of step 6, run in separate scenarios.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { QueueServiceClient } from '@azure/storage-queue';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTestEnvelope, forgedEnvelope } from '../src/consumer/testing.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { Azurite } from './support/azurite.js';
import { cliCommand, cliEnv, collectOutput, startApp, startRun } from './support/cli.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import { sqsCounts, startFauxqsQueue } from './support/fauxqs.js';
import { tempDir } from './support/harness.js';
import { deadRecord, jsonLines } from './support/records.js';

const RUNBOOK = fileURLToPath(new URL('../docs/replay-runbook.md', import.meta.url));
const hasJq = spawnSync('jq', ['--version'], { stdio: 'ignore' }).status === 0;
const ROTATED_SECRET = 'the-secret-before-the-rotation';

interface Block {
  readonly variant: string | undefined;
  readonly code: string;
}

/** The runbook's ```sh blocks, in order, with the variant marker that precedes each, if any. */
function runbookBlocks(): Block[] {
  const text = readFileSync(RUNBOOK, 'utf8');
  const blocks: Block[] = [];
  for (const match of text.matchAll(/(?:<!-- runbook-test: (\w+)[^>]*-->\n)?```sh\n([\s\S]*?)```/g)) {
    blocks.push({ variant: match[1], code: match[2] ?? '' });
  }
  return blocks;
}

/** Step 10's blocks, one broker each: run with the settings alone, not the file's steps. */
type BrokerVariant = 'sqs' | 'poisonqueue' | 'hub';

/**
 * The script for one way through step 6 (settings replaced, the other way's block left out), or
 * for one broker of step 10 (the settings and that broker's blocks only).
 */
function script(variant: 'A' | 'B' | BrokerVariant, settings: Record<string, string>): string {
  const blocks = runbookBlocks();
  expect(blocks.filter((b) => b.variant === 'settings')).toHaveLength(1);
  expect(blocks.filter((b) => b.variant === variant).length).toBeGreaterThan(0);
  const fileSteps = variant === 'A' || variant === 'B';
  const lines = [
    'set -u',
    `pe_cli() { ${cliCommand()
      .map((a) => JSON.stringify(a))
      .join(' ')} "$@"; }`,
  ];
  for (const block of blocks) {
    if (block.variant === 'settings') {
      for (const [name, value] of Object.entries(settings)) lines.push(`${name}=${JSON.stringify(value)}`);
    } else if ((block.variant === undefined && fileSteps) || block.variant === variant) {
      lines.push(block.code.replaceAll('npx partner-health-events', 'pe_cli'));
    }
  }
  return lines.join('\n');
}

/** Runs one way through the runbook in bash, in the test's directory, with the CLI's test environment. */
function runRunbook(
  variant: 'A' | 'B' | BrokerVariant,
  settings: Record<string, string>,
  env: NodeJS.ProcessEnv,
) {
  const child = spawn('bash', ['-c', script(variant, settings)], {
    cwd: dir.path,
    env: cliEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return collectOutput(child).done;
}

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-runbook-');
});
afterEach(() => dir.cleanup());

/**
 * A worker's dead letters: two events the app missed, one of them handled since; one signed with
 * the secret before a rotation (its verifier lacked the new one; now both are deployed); one forgery.
 */
async function scenario(dedupePath: string) {
  const missed = [createTestEnvelope('daily.data.steps.created'), createTestEnvelope('coach.nudge.created')];
  const handledSince = createTestEnvelope('daily.data.hrv.created');
  const rotated = createTestEnvelope('daily.data.glucose.created', { secret: ROTATED_SECRET });
  const forged = forgedEnvelope('daily.data.weight.created');
  const dead = join(dir.path, 'dead-letters.jsonl');
  writeFileSync(
    dead,
    `${[
      deadRecord(missed[0]?.raw ?? ''),
      deadRecord(handledSince.raw),
      deadRecord(rotated.raw, { code: 'SIGNATURE_MISMATCH' }),
      deadRecord(missed[1]?.raw ?? ''),
      deadRecord(forged.raw, { code: 'SIGNATURE_MISMATCH' }),
    ].join('\n')}\n`,
  );
  const store = createSqliteDedupe({ path: dedupePath });
  const claim = await store.claim(handledSince.eventId, 60_000);
  if (claim.status === 'claimed') await store.complete(handledSince.eventId, claim.token, 3_600_000);
  await store.close();
  return {
    dead,
    /** The runbook's settings block: these paths, the app's URL and the queue of way B. */
    settings: (app: string, queue: string) => ({
      DEAD: dead,
      DEDUPE: `sqlite:${dedupePath}`,
      APP: app,
      QUEUE: queue,
    }),
    replayed: [...missed, rotated].map((e) => e.eventId).sort(),
    handledSince: handledSince.eventId,
    forged,
  };
}

describe.skipIf(!hasJq)('docs/replay-runbook.md, run as written', () => {
  it('A: from a growing dead-letter file to all replayed, straight to the app', async () => {
    const dedupePath = join(dir.path, 'dedupe.db');
    const s = await scenario(dedupePath);
    const app = await startApp();
    try {
      const result = await runRunbook('A', s.settings(app.url, 'sqs:http://127.0.0.1:9/unused'), {
        PARTNER_EVENTS_SIGNING_SECRET_PREVIOUS: ROTATED_SECRET,
      });
      expect(result.stderr).not.toMatch(/unbound variable|command not found|jq: error/);
      expect(existsSync(s.dead)).toBe(false); // moved to the snapshot
      expect(result.stdout).toContain('exit 1'); // the forgery is rejected: expected
      const report = jsonLines(readFileSync(join(dir.path, 'replay-report.jsonl'), 'utf8'));
      expect(report.at(-1)).toMatchObject({
        total: 5,
        forwarded: 3,
        duplicates: 1,
        rejected: 1,
        by_code: {
          HANDLER_FAILED: { forwarded: 2, duplicate: 1 },
          SIGNATURE_MISMATCH: { forwarded: 1, rejected: 1 },
        },
      });
      expect(app.eventIds().sort()).toEqual(s.replayed);
      // Step 8 and 9: the new file holds only the forgery, and its dry run says so.
      expect(result.stdout).toMatch(/1\s+SIGNATURE_MISMATCH\tSIGNATURE_MISMATCH/);
      expect(result.stdout).toMatch(/line 1: reject SIGNATURE_MISMATCH/);
      expect(result.stdout).toContain('"would_forward":0');
      const dry = jsonLines(readFileSync(join(dir.path, 'dry-run.jsonl'), 'utf8'));
      expect(dry.at(-1)).toMatchObject({ would_forward: 3, duplicates: 1, rejected: 1 });
    } finally {
      await app.close();
    }
  }, 60_000);

  it('B: back onto the SQS queue, where the worker handles each event once', async () => {
    const dedupePath = join(dir.path, 'dedupe.db');
    const s = await scenario(dedupePath);
    const sqs = await startFauxqsQueue('runbook');
    const app = await startApp();
    const env = { ...sqs.env, PARTNER_EVENTS_SIGNING_SECRET_PREVIOUS: ROTATED_SECRET };
    const queue = `sqs:${sqs.queue.url}`;
    const dedupe = `sqlite:${dedupePath}`;
    const worker = await startRun(
      ['--source', queue, '--forward', app.url, '--dedupe', dedupe, '--dead-letter', s.dead],
      { env },
    );
    try {
      const result = await runRunbook('B', s.settings(app.url, queue), env);
      expect(result.stderr).not.toMatch(/unbound variable|command not found|jq: error/);
      const report = jsonLines(readFileSync(join(dir.path, 'replay-report.jsonl'), 'utf8'));
      expect(report.at(-1)).toMatchObject({ injected: 3, duplicates: 1, rejected: 1, forwarded: 0 });
      await vi.waitFor(() => expect(app.eventIds().sort()).toEqual(s.replayed), {
        timeout: 15_000,
        interval: 50,
      });
      expect(app.eventIds()).not.toContain(s.handledSince);
    } finally {
      await worker.stop();
      await app.close();
      await sqs.close();
    }
  }, 60_000);
});

/** Two events the app missed and a forgery, as they sit on a side channel. */
function sideChannelEvents() {
  const missed = [createTestEnvelope('daily.data.steps.created'), createTestEnvelope('coach.nudge.created')];
  return { missed, forged: forgedEnvelope('daily.data.weight.created') };
}

/** Step 10's report: the two missed events forwarded, the forgery rejected (and left where it was). */
function expectDrained(
  result: { stdout: string; stderr: string },
  report: string,
  missed: readonly { eventId: string }[],
  app: { eventIds(): string[] },
) {
  expect(result.stderr).not.toMatch(/unbound variable|command not found|jq: error/);
  expect(result.stdout).toContain('exit 1'); // the forgery is rejected: expected
  expect(jsonLines(readFileSync(join(dir.path, report), 'utf8')).at(-1)).toMatchObject({
    total: 3,
    forwarded: 2,
    rejected: 1,
  });
  expect(app.eventIds().sort()).toEqual(missed.map((e) => e.eventId).sort());
}

describe('docs/replay-runbook.md step 10, run as written', () => {
  const settingsOf = (app: string, more: Record<string, string>) => ({
    DEDUPE: `sqlite:${join(dir.path, 'dedupe.db')}`,
    APP: app,
    ...more,
  });

  it('SQS: drains the dead-letter queue, leaving the forgery on it', async () => {
    const sqs = await startFauxqsQueue('runbook-dlq');
    const app = await startApp();
    try {
      const { missed, forged } = sideChannelEvents();
      for (const e of [...missed, forged]) {
        await sqs.client.send(new SendMessageCommand({ QueueUrl: sqs.queue.url, MessageBody: e.raw }));
      }
      const result = await runRunbook('sqs', settingsOf(app.url, { DLQ: `sqs:${sqs.queue.url}` }), sqs.env);
      expect(result.stdout).toContain('"would_forward":2');
      expectDrained(result, 'dlq-report.jsonl', missed, app);
      await vi.waitFor(async () => expect((await sqsCounts(sqs.client, sqs.queue.url)).visible).toBe(1));
    } finally {
      await app.close();
      await sqs.close();
    }
  }, 90_000);

  it('Storage Queue: drains the poison queue, leaving the forgery on it', async () => {
    const azurite = await Azurite.start('queue');
    const app = await startApp();
    try {
      const poison = QueueServiceClient.fromConnectionString(azurite.connectionString).getQueueClient(
        'orders-poison',
      );
      await poison.create();
      const { missed, forged } = sideChannelEvents();
      for (const e of [...missed, forged]) await poison.sendMessage(e.raw);
      const env = { AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString };
      const result = await runRunbook(
        'poisonqueue',
        settingsOf(app.url, { POISON_QUEUE: `azure-storage-queue:${poison.name}` }),
        env,
      );
      expect(result.stdout).toContain('"would_forward":2');
      expectDrained(result, 'poison-report.jsonl', missed, app);
      expect((await poison.peekMessages({ numberOfMessages: 32 })).peekedMessageItems).toHaveLength(1);
    } finally {
      await app.close();
      await azurite.stop();
    }
  }, 90_000);

  it('Event Hubs: replays the poison hub, then rewinds a window of the main hub', async () => {
    const broker = await EventHubsBroker.start();
    const app = await startApp();
    try {
      const poisonHub = await broker.createHub(1);
      const hub = await broker.createHub(2);
      const { missed, forged } = sideChannelEvents();
      for (const e of [...missed, forged]) await poisonHub.publish('0', e.raw);
      const [before, inside, after] = [
        createTestEnvelope('daily.data.steps.created'),
        createTestEnvelope('daily.data.steps.created'),
        createTestEnvelope('daily.data.steps.created'),
      ];
      /** The clock past the hub's last enqueue time (ms), as the window's edge. */
      const edge = async () => {
        const times = (await Promise.all(hub.partitionIds.map((id) => hub.events(id))))
          .flat()
          .map((e) => e.enqueuedTime);
        const last = Math.max(...times);
        await vi.waitFor(() => expect(Date.now()).toBeGreaterThan(last + 1), { interval: 1 });
        return new Date(last + 1).toISOString();
      };
      await hub.publish('0', before.raw);
      const since = await edge();
      await hub.publish('1', inside.raw);
      const until = await edge();
      await hub.publish('0', after.raw);
      const env = { EVENTHUBS_CONNECTION_STRING: hub.connectionString };
      const settings = settingsOf(app.url, {
        POISON_HUB: `azure-event-hubs:${poisonHub.name}`,
        HUB: `azure-event-hubs:${hub.name}`,
        SINCE: since,
        UNTIL: until,
      });
      const result = await runRunbook('hub', settings, env);
      expect(result.stdout).toMatch(/exit 1\nexit 0/); // the forgery, then the clean rewind
      const rewind = jsonLines(readFileSync(join(dir.path, 'rewind-report.jsonl'), 'utf8')).at(-1);
      expect(rewind).toMatchObject({ total: 1, forwarded: 1 });
      expect(app.eventIds().sort()).toEqual([...missed, inside].map((e) => e.eventId).sort());
    } finally {
      await app.close();
      await broker.stop();
    }
  }, 90_000);
});
