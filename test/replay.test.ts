/**
 * `partner-events replay`'s ops features, run as a child process: filters, --force, --rate, the
 * report by code, and --to (re-injecting the original envelopes into real local queues).
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { QueueClient } from '@azure/storage-queue';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { envelopeText } from '../adapters/event-hubs/body.js';
import { workerSettings } from '../src/cli/replay-config.js';
import { createTestEnvelope, forgedEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { createRedisDedupe } from '../src/dedupe/redis.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { Azurite } from './support/azurite.js';
import { runCli, runReplay, startApp } from './support/cli.js';
import { EventHubsBroker } from './support/event-hubs-broker.js';
import { createQueue, type FauxqsServer, fauxqsClient, fauxqsEnv, startFauxqs } from './support/fauxqs.js';
import { tempDir } from './support/harness.js';
import { deadRecord, jsonLines, readJsonl, writeJsonl } from './support/records.js';
import { HAS_REDIS, RedisServer } from './support/redis-server.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-replay-');
});
afterEach(() => dir.cleanup());

const now = () => Math.floor(Date.now() / 1000);

describe('replay filters', () => {
  it('selects by type wildcard, event id, recorded code and signed_at, and reports what it left out', async () => {
    const t0 = now() - 7200;
    const hr = createTestEnvelope('daily.data.heart_rate.created', { signedAt: t0 });
    const steps = createTestEnvelope('daily.data.steps.created', { signedAt: t0 + 600 });
    const nudge = createTestEnvelope('coach.nudge.created', { signedAt: t0 + 1200 });
    const late = createTestEnvelope('daily.data.glucose.created', { signedAt: t0 + 3600 });
    const file = writeJsonl(dir.path, 'dead.jsonl', [
      deadRecord(hr.raw, { code: 'HANDLER_FAILED' }),
      deadRecord(steps.raw, { code: 'SIGNATURE_MISMATCH' }),
      deadRecord(nudge.raw, { code: 'HANDLER_FAILED' }),
      late.raw, // a bare envelope: no recorded code
      'not json',
    ]);
    const dry = (...flags: string[]) => runReplay(file, ['--dry-run', ...flags]);
    const ids = (out: string) =>
      jsonLines(out)
        .filter((l) => 'action' in l)
        .map((l) => l.event_id);

    const byType = await dry('--type', 'daily.data.*');
    expect(ids(byType.stdout)).toEqual([hr.eventId, steps.eventId, late.eventId]);
    expect(byType.summary).toMatchObject({ total: 3, filtered_out: 2 });

    const byCode = await dry('--code', 'handler_failed', '--type', '*.created');
    expect(ids(byCode.stdout)).toEqual([hr.eventId, nudge.eventId]);

    const byId = await dry('--event-id', `${nudge.eventId},${late.eventId}`);
    expect(ids(byId.stdout)).toEqual([nudge.eventId, late.eventId]);

    const byTime = await dry(
      '--since',
      new Date((t0 + 600) * 1000).toISOString(),
      '--until',
      String(t0 + 1200),
    );
    expect(ids(byTime.stdout)).toEqual([steps.eventId, nudge.eventId]);

    // The real replay honours the same filters; the unselected records are not in the new file.
    const app = await startApp();
    try {
      const flags = ['--forward', app.url, '--type', 'daily.data.heart_rate.created', '--type', 'coach.*'];
      const result = await runReplay(file, flags);
      expect(result.code).toBe(0);
      expect(result.summary).toMatchObject({
        total: 2,
        forwarded: 2,
        filtered_out: 3,
        dead_letter_file: null,
        by_code: { HANDLER_FAILED: { forwarded: 2 } },
      });
      expect(app.eventIds().sort()).toEqual([hr.eventId, nudge.eventId].sort());
    } finally {
      await app.close();
    }
  }, 60_000);

  it('refuses a malformed time or rate with exit 2', async () => {
    const file = writeJsonl(dir.path, 'dead.jsonl', ['{}']);
    const badTime = await runCli(['replay', file, '--dry-run', '--since', 'yesterday']);
    expect(badTime.code).toBe(2);
    expect(badTime.stderr).toContain('--since must be Unix seconds or an ISO 8601 time');
    const badRate = await runCli(['replay', file, '--forward', 'http://127.0.0.1:9/', '--rate', 'fast']);
    expect(badRate.code).toBe(2);
    expect(badRate.stderr).toContain('--rate must be a rate');
    const both = await runCli(['replay', file, '--forward', 'http://127.0.0.1:9/', '--to', 'file:x']);
    expect(both.code).toBe(2);
  });
});

describe('replay --config (the worker config file)', () => {
  const TOKEN = 'Bearer worker-internal-token-5f1c9a';
  /** A worker's config file: its app, an internal token, its dedupe store and secrets file. */
  const workerConfig = (appUrl: string) => {
    const secretsFile = join(dir.path, 'secrets.json');
    writeFileSync(secretsFile, JSON.stringify({ keys: [{ id: 'current', secret: TEST_SIGNING_SECRET }] }), {
      mode: 0o600,
    });
    const path = join(dir.path, 'worker.yaml');
    writeFileSync(
      path,
      [
        'source: http://127.0.0.1:0/events',
        'forward:',
        `  url: ${appUrl}`,
        '  timeoutMs: 5000',
        '  headers:',
        `    Authorization: ${TOKEN}`,
        '    X-Internal-Caller: partner-events',
        `dedupe: sqlite:${join(dir.path, 'worker-dedupe.db')}`,
        `secretsFile: ${secretsFile}`,
      ].join('\n'),
    );
    return path;
  };
  // Not the worker's secret: the events verify only with the config file's secrets file.
  const env = {
    PARTNER_EVENTS_SIGNING_SECRET: 'not-the-secret-of-this-worker-0123456789',
    LOG_LEVEL: 'debug',
  };

  it("sends the worker's forward headers to its app, and their values appear in no output, log or file", async () => {
    const ok = createTestEnvelope('daily.data.steps.created');
    const refused = createTestEnvelope('daily.data.weight.created');
    const file = writeJsonl(dir.path, 'dead.jsonl', [deadRecord(ok.raw), deadRecord(refused.raw)]);
    const app = await startApp((req) => (req.headers['partner-event-id'] === refused.eventId ? 500 : 204));
    try {
      const config = workerConfig(app.url);
      const args = ['replay', file, '--config', config, '--attempts', '1'];
      const result = await runCli([...args, '--json'], { env });
      expect(result.code, result.stderr).toBe(1);
      expect(app.received).toHaveLength(2);
      for (const request of app.received) {
        expect(request.headers.authorization).toBe(TOKEN);
        expect(request.headers['x-internal-caller']).toBe('partner-events');
      }
      expect(jsonLines(result.stdout).at(-1)).toMatchObject({ forwarded: 1, failed: 1 });
      // The file's dedupe store is the one used: `ok` is done there.
      const store = createSqliteDedupe({ path: join(dir.path, 'worker-dedupe.db') });
      expect(await store.peek(ok.eventId)).toBe('done');
      await store.close();
      const dryRun = await runCli(['replay', file, '--config', config, '--dry-run'], { env });
      const text = await runCli(args, { env });
      const written = readdirSync(dir.path)
        .filter((name) => name.endsWith('.jsonl'))
        .map((name) => readFileSync(join(dir.path, name), 'utf8'));
      expect(written.some((content) => content.includes('"exit_code"'))).toBe(true); // the audit log
      for (const output of [result, dryRun, text].flatMap((r) => [r.stdout, r.stderr]).concat(written)) {
        expect(output).not.toContain('worker-internal-token');
      }
    } finally {
      await app.close();
    }
  });

  it.skipIf(!HAS_REDIS)(
    "uses the file's Redis tenant, and PARTNER_EVENTS_TENANT over it as run does",
    async () => {
      const redis = await RedisServer.start();
      const app = await startApp();
      try {
        const config = join(dir.path, 'worker.yaml');
        writeFileSync(config, `forward: ${app.url}\ndedupe: ${redis.url}\ntenant: clinic-a\n`);
        const first = createTestEnvelope('daily.data.steps.created');
        const second = createTestEnvelope('daily.data.steps.created');
        const run = (event: typeof first, env: NodeJS.ProcessEnv = {}) =>
          runCli(
            ['replay', writeJsonl(dir.path, 'dead.jsonl', [deadRecord(event.raw)]), '--config', config],
            {
              env,
            },
          );
        expect((await run(first)).code).toBe(0);
        expect((await run(second, { PARTNER_EVENTS_TENANT: 'clinic-b' })).code).toBe(0);
        const tenant = (name: string) => createRedisDedupe({ url: redis.url, tenant: name });
        const [a, b] = [tenant('clinic-a'), tenant('clinic-b')];
        try {
          expect([await a.peek(first.eventId), await a.peek(second.eventId)]).toEqual(['done', 'absent']);
          expect(await b.peek(second.eventId)).toBe('done');
        } finally {
          await a.close();
          await b.close();
        }
      } finally {
        await app.close();
        await redis.stop();
      }
    },
  );

  it('PARTNER_EVENTS_DEDUPE names the store as for run: over the file, under --dedupe', async () => {
    const app = await startApp();
    try {
      const config = workerConfig(app.url); // its store: worker-dedupe.db
      const fromEnv = join(dir.path, 'env-dedupe.db');
      const fromFlag = join(dir.path, 'flag-dedupe.db');
      const replayOne = (extra: string[]) => {
        const event = createTestEnvelope('daily.data.steps.created');
        const file = writeJsonl(dir.path, 'dead.jsonl', [deadRecord(event.raw)]);
        return runCli(['replay', file, '--config', config, ...extra], {
          env: { ...env, PARTNER_EVENTS_DEDUPE: `sqlite:${fromEnv}` },
        }).then((result) => ({ result, event }));
      };
      const viaEnv = await replayOne([]);
      expect(viaEnv.result.code, viaEnv.result.stderr).toBe(0);
      const viaFlag = await replayOne(['--dedupe', `sqlite:${fromFlag}`]);
      expect(viaFlag.result.code, viaFlag.result.stderr).toBe(0);
      const peek = async (path: string, eventId: string) => {
        const store = createSqliteDedupe({ path });
        try {
          return await store.peek(eventId);
        } finally {
          await store.close();
        }
      };
      expect(await peek(fromEnv, viaEnv.event.eventId)).toBe('done');
      expect(await peek(fromFlag, viaFlag.event.eventId)).toBe('done');
      expect(existsSync(join(dir.path, 'worker-dedupe.db'))).toBe(false); // the file's store: never opened
    } finally {
      await app.close();
    }
  });

  it('PARTNER_EVENTS_FORWARD_URL names the app as for run: over the file, under --forward, unused with --to', async () => {
    const [fileApp, envApp, flagApp, ingress] = await Promise.all([
      startApp(),
      startApp(),
      startApp(),
      startApp(),
    ]);
    try {
      const config = workerConfig(fileApp.url);
      const fromEnv = { ...env, PARTNER_EVENTS_FORWARD_URL: `${envApp.url}?code=env-key` };
      const replayOne = (flags: string[]) => {
        const file = writeJsonl(dir.path, 'dead.jsonl', [
          deadRecord(createTestEnvelope('daily.data.steps.created').raw),
        ]);
        return runCli(['replay', file, '--config', config, '--dedupe', 'memory', ...flags], { env: fromEnv });
      };
      const viaEnv = await replayOne([]);
      expect(viaEnv.code, viaEnv.stderr).toBe(0);
      expect(envApp.received.map((r) => r.path)).toEqual(['/events?code=env-key']);
      const viaFlag = await replayOne(['--forward', flagApp.url]);
      expect(viaFlag.code, viaFlag.stderr).toBe(0);
      expect(flagApp.received).toHaveLength(1);
      // --to forwards nothing: the variable is not a second destination ("not both").
      const injected = await replayOne(['--to', ingress.url]);
      expect(injected.code, injected.stderr).toBe(0);
      expect(ingress.received).toHaveLength(1);
      expect(fileApp.received).toHaveLength(0);
      expect(envApp.received).toHaveLength(1);
    } finally {
      await Promise.all([fileApp.close(), envApp.close(), flagApp.close(), ingress.close()]);
    }
  });

  it("flags win over the file, but the file's headers go only to its own origin", async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const file = writeJsonl(dir.path, 'dead.jsonl', [deadRecord(event.raw)]);
    const workerApp = await startApp();
    const otherApp = await startApp(); // another port: another origin
    try {
      const config = workerConfig(workerApp.url);
      const toOther = ['replay', file, '--config', config, '--forward', otherApp.url, '--dedupe', 'memory'];
      const result = await runCli([...toOther, '--json'], { env });
      expect(result.code, result.stderr).toBe(0); // as for any replay that delivered everything
      expect(workerApp.received).toHaveLength(0);
      expect(otherApp.received).toHaveLength(1);
      expect(otherApp.received[0]?.headers.authorization).toBeUndefined();
      expect(otherApp.received[0]?.headers['x-internal-caller']).toBeUndefined();
      expect(existsSync(join(dir.path, 'worker-dedupe.db'))).toBe(false); // --dedupe memory won
      // Said once on stderr, by name and why; the summary and the replay log keep the names.
      const note = result.stderr.split('\n').filter((line) => line.includes('NOT SENT'));
      expect(note).toEqual([
        `NOT SENT: the --config file's forward.headers Authorization, X-Internal-Caller: the file's headers are for ${workerApp.origin}, not ${otherApp.origin}; give --send-config-headers to send them to ${otherApp.origin} anyway`,
      ]);
      expect(jsonLines(result.stdout).at(-1)).toMatchObject({
        forwarded: 1,
        headers_withheld: ['Authorization', 'X-Internal-Caller'],
      });
      const log = readJsonl(join(dir.path, 'partner-events-replays.jsonl'));
      expect(log.at(-1)).toMatchObject({ headers_withheld: ['Authorization', 'X-Internal-Caller'] });
      const text = await runCli(toOther, { env }); // the text report (the memory store: sent again)
      expect(text.stdout).toContain('not sent (another origin)');
      for (const output of [result.stdout, result.stderr, text.stdout, text.stderr]) {
        expect(output).not.toContain('worker-internal-token');
      }
      expect(readFileSync(join(dir.path, 'partner-events-replays.jsonl'), 'utf8')).not.toContain(
        'worker-internal-token',
      );
      // A bad file is named, and nothing is sent.
      writeFileSync(config, 'forward:\n  url: ftp://example\n');
      const bad = await runCli(['replay', file, '--config', config, '--dry-run'], { env });
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain('forward.url');
    } finally {
      await workerApp.close();
      await otherApp.close();
    }
  });

  it('sends the headers to --forward on the same origin (another path), and to another with --send-config-headers', async () => {
    const workerApp = await startApp();
    const otherApp = await startApp();
    try {
      const config = workerConfig(workerApp.url);
      const replayTo = (url: string, ...extra: string[]) => {
        const event = createTestEnvelope('daily.data.steps.created');
        const file = writeJsonl(dir.path, 'dead.jsonl', [deadRecord(event.raw)]);
        return runCli(
          ['replay', file, '--config', config, '--forward', url, '--dedupe', 'memory', ...extra],
          {
            env,
          },
        );
      };
      const samePlace = await replayTo(`${workerApp.origin}/v2/events`);
      expect(samePlace.code, samePlace.stderr).toBe(0);
      expect(workerApp.received.map((r) => [r.path, r.headers.authorization])).toEqual([
        ['/v2/events', TOKEN],
      ]);
      expect(samePlace.stderr).not.toContain('NOT SENT');
      const optedIn = await replayTo(otherApp.url, '--send-config-headers');
      expect(optedIn.code, optedIn.stderr).toBe(0);
      expect(otherApp.received.map((r) => r.headers.authorization)).toEqual([TOKEN]);
      expect(optedIn.stderr).not.toContain('NOT SENT');
      const noConfig = await runCli([
        'replay',
        writeJsonl(dir.path, 'dead.jsonl', []),
        '--forward',
        otherApp.url,
        '--send-config-headers',
      ]);
      expect(noConfig.code).toBe(2);
      expect(noConfig.stderr).toContain('--send-config-headers');
    } finally {
      await workerApp.close();
      await otherApp.close();
    }
  });

  it("sends the headers of a file without forward.url to --forward: the worker's URL is a flag too", async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const file = writeJsonl(dir.path, 'dead.jsonl', [deadRecord(event.raw)]);
    const app = await startApp();
    try {
      const config = join(dir.path, 'worker.yaml');
      writeFileSync(config, `forward:\n  headers:\n    Authorization: ${TOKEN}\n`);
      const result = await runCli(
        ['replay', file, '--config', config, '--forward', app.url, '--dedupe', 'memory'],
        {
          env: { LOG_LEVEL: 'warn' },
        },
      );
      expect(result.code, result.stderr).toBe(0);
      expect(app.received.map((r) => r.headers.authorization)).toEqual([TOKEN]);
      expect(result.stderr).not.toContain('NOT SENT');
    } finally {
      await app.close();
    }
  });
});

describe('workerSettings: which --forward URLs are the config file’s origin', () => {
  const headers = { Authorization: 'Bearer t' };
  const settingsFor = (fileUrl: string, forward: string, sendConfigHeaders = false) => {
    const path = join(dir.path, 'worker.json');
    writeFileSync(path, JSON.stringify({ forward: { url: fileUrl, headers } }));
    return workerSettings(path, {
      forward,
      to: undefined,
      dedupe: undefined,
      secretsFile: undefined,
      sendConfigHeaders,
    });
  };

  it.each([
    ['http://app.internal/events', 'http://app.internal:80/v2'],
    ['https://app.internal:443/events', 'https://APP.internal/other?x=1'],
    ['http://127.0.0.1:8080/a', 'http://127.0.0.1:8080/b'],
  ])('%s and %s: one origin, the headers are sent', (fileUrl, forward) => {
    const settings = settingsFor(fileUrl, forward);
    expect(settings.forward?.headers).toEqual(headers);
    expect(settings.withheldHeaders).toBeUndefined();
  });

  it.each([
    [
      'http://app.internal/events',
      'https://app.internal/events',
      'http://app.internal',
      'https://app.internal',
    ],
    [
      'https://app.internal/events',
      'https://app.internal:8443/events',
      'https://app.internal',
      'https://app.internal:8443',
    ],
    [
      'https://app.internal/events',
      'https://staging.internal/events',
      'https://app.internal',
      'https://staging.internal',
    ],
  ])('%s and %s: other origins, the headers are withheld', (fileUrl, forward, fileOrigin, forwardOrigin) => {
    const settings = settingsFor(fileUrl, forward);
    expect(settings.forward).toMatchObject({ url: forward, headers: {} });
    expect(settings.withheldHeaders).toEqual({ names: ['Authorization'], fileOrigin, forwardOrigin });
    expect(settingsFor(fileUrl, forward, true).forward?.headers).toEqual(headers);
  });
});

describe('replay FILE --max N', () => {
  it('replays the first N records and says the rest was not read; a second run skips the done ones as duplicates', async () => {
    const events = Array.from({ length: 5 }, () => createTestEnvelope('daily.data.steps.created'));
    const lines = events.map((e) => deadRecord(e.raw));
    lines.splice(1, 0, ''); // a blank line is not a record
    const file = writeJsonl(dir.path, 'dead.jsonl', lines);
    const app = await startApp();
    try {
      const dedupe = `sqlite:${join(dir.path, 'dedupe.db')}`;
      const first = await runReplay(file, ['--forward', app.url, '--dedupe', dedupe, '--max', '2']);
      expect(first.code, first.stderr).toBe(0);
      expect(first.summary).toMatchObject({ total: 2, forwarded: 2, stopped_at_max: true });
      expect(app.eventIds()).toEqual(events.slice(0, 2).map((e) => e.eventId));
      const dry = await runCli(['replay', file, '--dry-run', '--dedupe', dedupe, '--max', '3']);
      expect(dry.stdout).toContain('"total":3');
      expect(dry.stdout).toContain('stopped at --max: the rest of the file was not read');
      // Exactly as many records as --max: nothing was left unread.
      const rest = await runReplay(file, ['--forward', app.url, '--dedupe', dedupe, '--max', '5']);
      expect(rest.code, rest.stderr).toBe(0);
      expect(rest.summary).toMatchObject({ total: 5, forwarded: 3, duplicates: 2 });
      expect(rest.summary).not.toHaveProperty('stopped_at_max');
      expect(app.eventIds().sort()).toEqual(events.map((e) => e.eventId).sort());
    } finally {
      await app.close();
    }
  });
});

describe('replay report, --force and --rate', () => {
  it('reports by outcome and by code, and the new file holds exactly what still fails', async () => {
    const ok = createTestEnvelope('daily.data.steps.created');
    const refused = createTestEnvelope('daily.data.weight.created');
    const forged = forgedEnvelope('daily.data.hrv.created');
    const file = writeJsonl(dir.path, 'dead.jsonl', [
      deadRecord(ok.raw, { code: 'HANDLER_FAILED' }),
      deadRecord(refused.raw, { code: 'HANDLER_FAILED' }),
      deadRecord(forged.raw, { code: 'SIGNATURE_MISMATCH' }),
    ]);
    const app = await startApp((req) => (req.headers['partner-event-id'] === refused.eventId ? 500 : 204));
    try {
      const args = ['replay', file, '--forward', app.url, '--dedupe', 'memory', '--attempts', '1'];
      const result = await runCli([...args, '--json']);
      expect(result.code).toBe(1);
      const summary = jsonLines(result.stdout).at(-1);
      expect(summary).toMatchObject({
        total: 3,
        forwarded: 1,
        rejected: 1,
        failed: 1,
        by_code: {
          HANDLER_FAILED: { forwarded: 1, failed: 1, rejected: 0 },
          SIGNATURE_MISMATCH: { rejected: 1 },
        },
        failure_codes: { HANDLER_FAILED: 1, SIGNATURE_MISMATCH: 1 },
      });
      const still = readJsonl(String(summary?.dead_letter_file));
      expect(still.map((r) => r.raw).sort()).toEqual([refused.raw, forged.raw].sort());

      const text = await runCli([...args, '--dead-letter', join(dir.path, 'again.jsonl')]);
      expect(text.stdout).toMatch(/by recorded code:\n\s+RECORDED CODE\s+EVENTS\s+FORWARDED/);
      expect(text.stdout).toMatch(/HANDLER_FAILED\s+2\s+1\s+0\s+0\s+1/);
      expect(text.stdout).toMatch(/still failing, by code:/);
    } finally {
      await app.close();
    }
  });

  it('--force forwards events the store marks done again, once each, and says so loudly', async () => {
    const a = createTestEnvelope('daily.data.steps.created');
    const b = createTestEnvelope('coach.nudge.created');
    const file = writeJsonl(dir.path, 'dead.jsonl', [
      deadRecord(a.raw),
      deadRecord(b.raw),
      deadRecord(a.raw),
    ]);
    const dedupe = `sqlite:${join(dir.path, 'dedupe.db')}`;
    const app = await startApp();
    try {
      const flags = ['--forward', app.url, '--dedupe', dedupe];
      expect((await runReplay(file, flags)).summary).toMatchObject({ forwarded: 2, duplicates: 1 });
      expect((await runReplay(file, flags)).summary).toMatchObject({ forwarded: 0, duplicates: 3 });
      expect(app.received).toHaveLength(2);

      const dry = await runReplay(file, [...flags, '--dry-run', '--force']);
      expect(dry.lines[0]).toMatchObject({ action: 'forward', forced: true });

      const forced = await runReplay(file, [...flags, '--force']);
      expect(forced.code).toBe(0);
      expect(forced.stderr).toContain('WARNING --force');
      expect(forced.stderr).toContain('re-driving an event the dedupe store marks as done');
      expect(forced.summary).toMatchObject({ forwarded: 2, duplicates: 1, forced: 2 });
      expect(app.received).toHaveLength(4);
    } finally {
      await app.close();
    }
  }, 60_000);

  it('--rate spaces the events out', async () => {
    const events = Array.from({ length: 5 }, () => createTestEnvelope('daily.data.steps.created'));
    const file = writeJsonl(
      dir.path,
      'dead.jsonl',
      events.map((e) => deadRecord(e.raw)),
    );
    const arrivals: number[] = [];
    const app = await startApp(() => {
      arrivals.push(performance.now());
      return 204;
    });
    try {
      const result = await runReplay(file, ['--forward', app.url, '--rate', '5/s']);
      expect(result.code).toBe(0);
      expect(arrivals).toHaveLength(5);
      // 5 events at 5/s: slots 200 ms apart, so 800 ms from the first send to the last. The first
      // arrival may lag its send by a new connection's setup (tens of ms on a loaded machine),
      // hence 600; without pacing the five arrive within a few ms.
      expect((arrivals.at(-1) ?? 0) - (arrivals[0] ?? 0)).toBeGreaterThanOrEqual(600);
    } finally {
      await app.close();
    }
  });
});

describe('replay --to', () => {
  let fauxqs: FauxqsServer;
  beforeAll(async () => {
    fauxqs = await startFauxqs();
  });
  afterAll(async () => {
    await fauxqs.close();
  });

  it('re-injects the original envelopes byte for byte into SQS, skipping events already done unless --force', async () => {
    const client = fauxqsClient(fauxqs.endpoint);
    try {
      const queue = await createQueue(client, 'replay-to');
      const done = createTestEnvelope('daily.data.steps.created');
      // Whitespace and key order as the publisher wrote them: the bytes must survive as they are.
      const odd = createTestEnvelope('coach.nudge.created');
      const { body, ...rest } = odd.envelope;
      const oddRaw = ` ${JSON.stringify({ body, ...rest }, null, 1)}`;
      const fresh = createTestEnvelope('daily.data.hrv.created');
      const forged = forgedEnvelope('daily.data.weight.created');
      const dedupe = `sqlite:${join(dir.path, 'dedupe.db')}`;
      // The worker already handled `done` (a replay of it forwards it once and records it).
      const app = await startApp();
      const first = writeJsonl(dir.path, 'first.jsonl', [done.raw]);
      await runCli(['replay', first, '--forward', app.url, '--dedupe', dedupe]);
      await app.close();

      const file = writeJsonl(dir.path, 'dead.jsonl', [
        deadRecord(done.raw),
        deadRecord(oddRaw),
        deadRecord(fresh.raw),
        deadRecord(fresh.raw),
        deadRecord(forged.raw),
      ]);
      const to = `sqs:${queue.url}`;
      const result = await runReplay(file, ['--to', to, '--dedupe', dedupe], {
        env: fauxqsEnv(fauxqs.endpoint),
      });
      expect(result.code).toBe(1); // the forgery
      expect(result.summary).toMatchObject({
        total: 5,
        injected: 2,
        forwarded: 0,
        duplicates: 2,
        rejected: 1,
        target: `sqs:${queue.name}`,
      });
      const bodies = await drain(client, queue.url);
      expect(bodies.sort()).toEqual([oddRaw, fresh.raw].sort());

      const forced = await runReplay(
        file,
        ['--to', to, '--dedupe', dedupe, '--force', '--event-id', done.eventId],
        {
          env: fauxqsEnv(fauxqs.endpoint),
        },
      );
      expect(forced.stderr).toContain('WARNING --force');
      expect(forced.summary).toMatchObject({ injected: 1, forced: 1, filtered_out: 4 });
      expect(await drain(client, queue.url)).toEqual([done.raw]);
      // The store forgot it, so the worker handles the re-injected copy instead of acking a duplicate.
      const store = createSqliteDedupe({ path: join(dir.path, 'dedupe.db') });
      try {
        expect(await store.peek(done.eventId)).toBe('absent');
        expect(await store.peek(fresh.eventId)).toBe('absent'); // injected, not yet handled by a worker
      } finally {
        await store.close();
      }
    } finally {
      client.destroy();
    }
  }, 60_000);

  it('--to file: from an SQS dead-letter queue: a pretty-printed envelope is written as one line (and replays), then deleted; one that cannot be is refused and stays', async () => {
    const client = fauxqsClient(fauxqs.endpoint);
    try {
      const dlq = await createQueue(client, 'replay-to-file-dlq');
      const pretty = createTestEnvelope('daily.data.steps.created');
      const prettyRaw = JSON.stringify(pretty.envelope, null, 2);
      // Its compact form would be longer (1e20 written out): refused rather than written otherwise.
      const longerRaw = `{"n": 1e20,\n${JSON.stringify(createTestEnvelope('daily.data.hrv.created').envelope).slice(1)}`;
      for (const body of [prettyRaw, longerRaw]) {
        await client.send(new SendMessageCommand({ QueueUrl: dlq.url, MessageBody: body }));
      }
      const out = join(dir.path, 'replayed.jsonl');
      const flags = ['--to', `file:${out}`, '--settle-seconds', '1', '--attempts', '1'];
      flags.push('--dead-letter', join(dir.path, 'still.jsonl'));
      const result = await runReplay(`sqs:${dlq.url}`, flags, { env: fauxqsEnv(fauxqs.endpoint) });
      expect(result.code).toBe(1); // the refused one
      expect(result.summary).toMatchObject({ total: 2, injected: 1, failed: 1 });
      expect(readFileSync(out, 'utf8').split('\n')).toEqual([JSON.stringify(pretty.envelope), '']);
      expect(await drain(client, dlq.url)).toEqual([longerRaw]);

      const app = await startApp();
      try {
        const again = await runReplay(out, ['--forward', app.url]);
        expect(again.code).toBe(0);
        expect(again.summary).toMatchObject({ total: 1, forwarded: 1 });
        expect(app.received.map((r) => r.body)).toEqual([pretty.envelope.body]);
      } finally {
        await app.close();
      }
    } finally {
      client.destroy();
    }
  }, 60_000);

  it('counts a queue that cannot be reached as failed and keeps the record', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const file = writeJsonl(dir.path, 'dead.jsonl', [deadRecord(event.raw)]);
    const deadLetter = join(dir.path, 'still.jsonl');
    const missing = `sqs:${fauxqs.endpoint}/000000000000/no-such-queue`;
    const result = await runReplay(file, ['--to', missing, '--attempts', '1', '--dead-letter', deadLetter], {
      env: fauxqsEnv(fauxqs.endpoint),
    });
    expect(result.code).toBe(1);
    expect(result.summary).toMatchObject({
      failed: 1,
      failure_codes: { HANDLER_FAILED: 1 },
    });
    expect(readJsonl(deadLetter)[0]).toMatchObject({ raw: event.raw });
  });

  it('re-injects into an HTTP ingress; a 4xx verdict is final, not retried', async () => {
    const good = createTestEnvelope('daily.data.steps.created');
    const bad = createTestEnvelope('daily.data.glucose.created');
    const app = await startApp((req) => (req.body === bad.raw ? 422 : 200));
    try {
      const file = writeJsonl(dir.path, 'dead.jsonl', [deadRecord(good.raw), deadRecord(bad.raw)]);
      const result = await runReplay(file, ['--to', app.url]);
      expect(result.summary).toMatchObject({
        injected: 1,
        failed: 1,
        failure_codes: { HANDLER_REQUESTED_DEAD_LETTER: 1 },
      });
      expect(app.received.map((r) => r.body).sort()).toEqual([good.raw, bad.raw].sort());
    } finally {
      await app.close();
    }
  });

  it('re-injects into Event Hubs and a Storage queue with the same bytes', async () => {
    const broker = await EventHubsBroker.start({ hub: 'replay-hub', partitions: 1 });
    const azurite = await Azurite.start('queue');
    try {
      const event = createTestEnvelope('daily.data.sleep.created');
      const file = writeJsonl(dir.path, 'dead.jsonl', [deadRecord(event.raw)]);
      const hubs = await runCli(
        ['replay', file, '--to', 'azure-event-hubs:replay-hub', '--dedupe', 'memory'],
        {
          env: { EVENTHUBS_CONNECTION_STRING: broker.connectionString('replay-hub') },
        },
      );
      expect(hubs.code).toBe(0);
      expect(hubs.stdout).toContain('1 injected into event-hubs:replay-hub');
      const stored = broker.events('0');
      expect(stored).toHaveLength(1);
      const section = stored[0]?.body as { content?: Uint8Array } | undefined;
      expect(envelopeText(section?.content)).toBe(event.raw);

      const queue = new QueueClient(azurite.connectionString, 'replay-queue');
      await queue.create();
      const storage = await runCli(
        ['replay', file, '--to', 'azure-storage-queue:replay-queue', '--dedupe', 'memory'],
        { env: { AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString } },
      );
      expect(storage.code).toBe(0);
      const received = await queue.receiveMessages({ numberOfMessages: 5 });
      expect(received.receivedMessageItems.map((m) => m.messageText)).toEqual([event.raw]);
    } finally {
      await broker.stop();
      await azurite.stop();
    }
  }, 40_000);
});

/** Receives (and leaves in flight) every message now in the queue. */
async function drain(client: ReturnType<typeof fauxqsClient>, queueUrl: string): Promise<string[]> {
  const bodies: string[] = [];
  for (;;) {
    const { Messages = [] } = await client.send(
      new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: 300 }),
    );
    if (Messages.length === 0) return bodies;
    for (const m of Messages) bodies.push(m.Body ?? '');
  }
}
