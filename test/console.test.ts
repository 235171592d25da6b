/**
 * The console on the ops port, driven in a real browser: Debian's chromium through playwright-core
 * (no browser download). One worker (`partner-events run` with an HTTP ingress forwarding to a
 * local app) and one browser serve the whole file.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { consoleReplayCommand } from '../src/cli/run-console.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { deadLetterRecord } from '../src/core/dead-letter-record.js';
import type { ErrorCode } from '../src/core/errors.js';
import { configFromFile, resolveSidecarConfig } from '../src/sidecar/config.js';
import { postEnvelope, runCli, startApp, startCli, startRun } from './support/cli.js';
import { tempDir } from './support/harness.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SCREENSHOTS = process.env.UPDATE_SCREENSHOTS
  ? fileURLToPath(new URL('../docs/images/', import.meta.url))
  : undefined;
const TOKEN = 'console-test-token';
const NEW_SECRET = 'the-secret-of-the-next-rotation-0123456789';
const XSS_ID = '<img src=x onerror="window.__xss=1">';
// The worker's app wants an internal token: in its config file, which a console replay reads too.
const APP_TOKEN = 'Bearer console-app-token-7d2e';

const haveChromium = existsSync(CHROMIUM);
if (!haveChromium && process.env.CI) throw new Error(`${CHROMIUM} is missing: .ci/run installs chromium`);

describe.skipIf(!haveChromium)('the console, in a browser', () => {
  const dir = tempDir('phe-console-');
  const secretsFile = join(dir.path, 'secrets.json');
  const deadLetters = join(dir.path, 'dead-letters.jsonl');
  let app: Awaited<ReturnType<typeof startApp>>;
  let worker: Awaited<ReturnType<typeof startRun>>;
  let browser: Browser;
  let page: Page;
  const replayable: string[] = [];

  /** A dead-letter line as the worker writes it. */
  const letter = (raw: string, code: ErrorCode, eventId?: string, eventType?: string) =>
    JSON.stringify(
      deadLetterRecord(
        { id: `m-${Math.random()}`, body: Buffer.from(raw), attempt: 3 },
        { code, reason: `${code} in a test`, eventId, eventType },
        'http://127.0.0.1/events',
      ),
    );

  beforeAll(async () => {
    writeFileSync(secretsFile, JSON.stringify({ keys: [{ id: 'current', secret: TEST_SIGNING_SECRET }] }), {
      mode: 0o600,
    });
    const lines: string[] = [];
    for (let i = 0; i < 3; i++) {
      const e = createTestEnvelope('daily.data.steps.created');
      replayable.push(e.eventId);
      lines.push(letter(e.raw, 'HANDLER_FAILED', e.eventId, 'daily.data.steps.created'));
    }
    const nudge = createTestEnvelope('coach.nudge.created');
    lines.push(letter(nudge.raw, 'SCHEMA_INVALID', nudge.eventId, 'coach.nudge.created'));
    // Signed with a secret the worker does not have yet: fixed by the rotation below.
    lines.push(
      letter(
        createTestEnvelope('daily.data.sleep.created', { secret: NEW_SECRET }).raw,
        'SIGNATURE_MISMATCH',
      ),
    );
    // A forgery whose unsigned id is markup.
    lines.push(
      letter(
        createTestEnvelope('daily.data.weight.created', { secret: 'guessed', envelope: { event_id: XSS_ID } })
          .raw,
        'SIGNATURE_MISMATCH',
      ),
    );
    writeFileSync(deadLetters, lines.map((l) => `${l}\n`).join(''), { mode: 0o600 });
    app = await startApp();
    const config = join(dir.path, 'worker.yaml');
    writeFileSync(config, `forward:\n  url: ${app.url}\n  headers:\n    Authorization: ${APP_TOKEN}\n`);
    worker = await startRun(
      [
        '--config',
        config,
        '--source',
        'http://127.0.0.1:0/events',
        '--dedupe',
        `sqlite:${join(dir.path, 'dedupe.db')}`,
        '--dead-letter',
        deadLetters,
        '--secrets-file',
        secretsFile,
        '--ops-port',
        '0',
      ],
      { env: { PARTNER_EVENTS_CONSOLE_TOKEN: TOKEN } },
    );
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    await page.goto(`${worker.ops}/`);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await worker?.stop();
    await app?.close();
    dir.cleanup();
  });

  const handledCount = async () => Number(await page.locator('#total-handled').textContent());
  const rowsText = async () => page.locator('#letter-table tbody tr').allTextContents();

  it('the live counters rise while events flow, without a reload', async () => {
    const before = await handledCount();
    for (let i = 0; i < 5; i++) {
      const answer = await postEnvelope(worker.ingress, createTestEnvelope('daily.data.steps.created').raw);
      expect(answer.status).toBe(200);
    }
    await expect.poll(handledCount, { timeout: 15_000 }).toBeGreaterThanOrEqual(before + 5);
    expect(await page.locator('#keys').textContent()).toContain('current');
    expect(await page.locator('#readiness').textContent()).toContain('ok');
    if (SCREENSHOTS) await page.screenshot({ path: join(SCREENSHOTS, 'console-live.png'), fullPage: true });
  });

  it('lists the dead letters newest first and filters them by code and by type', async () => {
    await expect.poll(async () => (await rowsText()).length).toBe(6);
    expect((await rowsText())[0]).toContain('SIGNATURE_MISMATCH'); // the last line of the file
    await page.fill('#filter input[name=code]', 'HANDLER_FAILED');
    await page.click('#filter button[type=submit]');
    await expect.poll(async () => (await rowsText()).length).toBe(3);
    await page.fill('#filter input[name=code]', '');
    await page.fill('#filter input[name=type]', 'coach.*');
    await page.click('#filter button[type=submit]');
    await expect.poll(rowsText).toEqual([expect.stringContaining('SCHEMA_INVALID')]);
    await page.fill('#filter input[name=type]', '');
    await page.click('#filter button[type=submit]');
    await expect.poll(async () => (await rowsText()).length).toBe(6);
  });

  it('renders an unsigned field as text: markup in a forged event_id stays inert', async () => {
    const row = page.locator('#letter-table tbody tr').first();
    expect(await row.textContent()).toContain(XSS_ID);
    expect(await page.locator('#letter-table img').count()).toBe(0);
    expect(await page.evaluate(() => (globalThis as { __xss?: number }).__xss)).toBeUndefined();
  });

  it('re-verifies a letter with the current keys: a rotation turns SIGNATURE_MISMATCH into ok', async () => {
    // Line 4 (from 0): the letter signed with the next secret.
    await page.locator('#letter-table tbody tr[data-n="4"]').click();
    await expect.poll(() => page.locator('#verification').textContent()).toContain('SIGNATURE_MISMATCH');
    expect(await page.locator('#body').isHidden()).toBe(true);
    writeFileSync(
      secretsFile,
      JSON.stringify({
        keys: [
          { id: 'next', secret: NEW_SECRET },
          { id: 'current', secret: TEST_SIGNING_SECRET },
        ],
      }),
    );
    await expect
      .poll(
        async () => {
          await page.locator('#letter-table tbody tr[data-n="4"]').click();
          return page.locator('#verification').textContent();
        },
        { timeout: 15_000 },
      )
      .toContain('ok (key next)');
    await page.click('#show-body');
    await expect.poll(() => page.locator('#body').textContent()).toContain('daily.data.sleep.created');
    if (SCREENSHOTS) await page.screenshot({ path: join(SCREENSHOTS, 'console-letter.png'), fullPage: true });
  });

  it('never puts a body in the page it serves, and sends its security headers', async () => {
    const response = await fetch(`${worker.ops}/`);
    expect(response.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(response.headers.get('x-frame-options')).toBe('DENY');
    const html = await response.text();
    expect(html).not.toContain('signature');
    expect(html).not.toMatch(/<script>/);
    const list = await (await fetch(`${worker.ops}/console/api/letters`)).text();
    expect(list).not.toContain('"raw"');
    expect(list).not.toContain('signature');
  });

  it('refuses a replay without the token, from another origin, and under another host name', async () => {
    const url = new URL(worker.ops);
    const post = (headers: Record<string, string>) =>
      fetch(`${worker.ops}/console/api/replays`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ letters: [0], dryRun: true }),
      });
    expect((await post({ origin: worker.ops })).status).toBe(401);
    expect((await post({ origin: 'http://evil.example', authorization: `Bearer ${TOKEN}` })).status).toBe(
      403,
    );
    expect((await post({ authorization: `Bearer ${TOKEN}` })).status).toBe(403); // no Origin at all
    // DNS rebinding: another site's name pointed at 127.0.0.1 (fetch would not let us set Host).
    const rebound = await new Promise<number | undefined>((resolve, reject) => {
      get(`${worker.ops}/console/api/letters`, { headers: { host: `evil.example:${url.port}` } }, (res) => {
        res.resume();
        resolve(res.statusCode);
      }).on('error', reject);
    });
    expect(rebound).toBe(421);
    // In the page, without the token typed in: refused, and nothing was sent.
    const before = app.received.length;
    await page.locator('#letter-table tbody tr[data-n="0"] input').check();
    await page.click('#dry-run');
    await expect.poll(() => page.locator('#replay-status').textContent()).toContain('refused');
    expect(app.received).toHaveLength(before);
    await page.locator('#letter-table tbody tr[data-n="0"] input').uncheck();
  });

  it('dry-runs a selection, then replays it: the app gets exactly the selected events, once', async () => {
    const before = app.received.length;
    // What the page reads of its replay jobs (the job view), to check it never shows the token.
    const jobViews: Promise<string>[] = [];
    page.on('response', (response) => {
      if (response.url().includes('/console/api/replays')) jobViews.push(response.text().catch(() => ''));
    });
    await page.fill('#token', TOKEN);
    await page.fill('#filter input[name=code]', 'HANDLER_FAILED');
    await page.click('#filter button[type=submit]');
    await expect.poll(async () => (await rowsText()).length).toBe(3);
    // Lines 0 and 2: two of the three.
    for (const n of [0, 2]) await page.locator(`#letter-table tbody tr[data-n="${n}"] input`).check();
    await page.locator('#letter-table tbody tr[data-n="1"] input').uncheck();
    await page.click('#dry-run');
    await expect
      .poll(() => page.locator('#replay-status').textContent(), { timeout: 30_000 })
      .toContain('Dry run done');
    expect(await page.locator('#replay-report').textContent()).toContain('forward');
    expect(app.received.length).toBe(before); // a dry run sends nothing
    if (SCREENSHOTS) await page.screenshot({ path: join(SCREENSHOTS, 'console-replay.png'), fullPage: true });
    await page.click('#confirm');
    await expect
      .poll(() => page.locator('#replay-status').textContent(), { timeout: 30_000 })
      .toContain('Replay done');
    const replayed = app.received.slice(before);
    const ids = replayed.map((r) => decodeURIComponent(String(r.headers['partner-event-id'])));
    expect(ids.sort()).toEqual([replayable[0], replayable[2]].sort());
    // The worker's forward headers went with the replay, and the page never shows them.
    expect(replayed.map((r) => r.headers.authorization)).toEqual([APP_TOKEN, APP_TOKEN]);
    expect(await page.content()).not.toContain('console-app-token');
    const views = await Promise.all(jobViews);
    expect(views.join('\n')).toContain('"records"');
    expect(views.join('\n')).not.toContain('console-app-token');
    // Two `partner-events replay` children, each loading the CLI: seconds each on a busy machine.
  }, 120_000);
});

describe('console replay and forward headers', () => {
  it('refuses to replay for a worker whose forward headers come from the environment, and says why', async () => {
    const dir = tempDir('phe-console-env-');
    const app = await startApp();
    const worker = await startRun(
      [
        '--source',
        'http://127.0.0.1:0/events',
        '--forward',
        app.url,
        '--dedupe',
        `sqlite:${join(dir.path, 'dedupe.db')}`,
        '--dead-letter',
        join(dir.path, 'dead-letters.jsonl'),
        '--ops-port',
        '0',
      ],
      { env: { PARTNER_EVENTS_FORWARD_HEADERS: JSON.stringify({ authorization: APP_TOKEN }) } },
    );
    try {
      const live = (await (await fetch(`${worker.ops}/console/api/live`)).json()) as {
        replay: { unavailable?: string };
      };
      expect(live.replay.unavailable).toContain('PARTNER_EVENTS_FORWARD_HEADERS');
      expect(live.replay.unavailable).toContain('--config');
      expect(JSON.stringify(live)).not.toContain('console-app-token');
    } finally {
      await worker.stop();
      await app.close();
      dir.cleanup();
    }
  }, 60_000);
});

describe("the console's replay child", () => {
  it('gets the dedupe store through its environment, never on its command line (a Redis URL may hold a password)', () => {
    const store = 'redis://:s3cret-redis-password@127.0.0.1:6390';
    const config = resolveSidecarConfig({
      flags: { source: 'http://127.0.0.1:0/events', forward: 'http://127.0.0.1:9/hook', dedupe: store },
    });
    const replay = consoleReplayCommand(config, undefined);
    if (typeof replay === 'string') throw new Error(replay);
    expect([...replay.command, ...replay.args].join(' ')).not.toContain('s3cret');
    expect(replay.env).toMatchObject({ PARTNER_EVENTS_DEDUPE: store });
  });

  it("gets the worker's forward URL through its environment, never on its command line (its query may hold a key)", async () => {
    const dir = tempDir('phe-console-child-');
    const app = await startApp();
    try {
      const url = `${app.url}?code=S3cr3tFunctionsKey`;
      const config = resolveSidecarConfig({
        flags: {
          source: 'http://127.0.0.1:0/events',
          forward: url,
          dedupe: `sqlite:${join(dir.path, 'dedupe.db')}`,
        },
      });
      const replay = consoleReplayCommand(config, undefined);
      if (typeof replay === 'string') throw new Error(replay);
      expect([...replay.command, ...replay.args].join(' ')).not.toContain('S3cr3tFunctionsKey');
      expect(replay.env).toEqual({ PARTNER_EVENTS_FORWARD_URL: url, PARTNER_EVENTS_DEDUPE: config.dedupe });
      // The child, run as ReplayJobs runs it, forwards to that URL, key and all.
      const event = createTestEnvelope('daily.data.steps.created');
      const letters = join(dir.path, 'dead-letters.jsonl');
      writeFileSync(letters, `${event.raw}\n`);
      const result = await runCli(['replay', letters, ...replay.args, '--json'], { env: replay.env });
      expect(result.code, result.stderr).toBe(0);
      expect(app.received.map((r) => r.path)).toEqual(['/events?code=S3cr3tFunctionsKey']);
      expect(result.stdout + result.stderr).not.toContain('S3cr3tFunctionsKey');
    } finally {
      await app.close();
      dir.cleanup();
    }
  }, 60_000);

  it("sends the worker's config-file headers to the worker's own URL, also when run --forward moved it off the file's", async () => {
    const dir = tempDir('phe-console-child-');
    const fileApp = await startApp();
    const workerApp = await startApp(); // another port: another origin than the file's forward.url
    try {
      const configFile = join(dir.path, 'worker.yaml');
      writeFileSync(
        configFile,
        `forward:\n  url: ${fileApp.url}\n  headers:\n    Authorization: ${APP_TOKEN}\n`,
      );
      const config = resolveSidecarConfig({
        file: configFromFile(configFile),
        flags: {
          source: 'http://127.0.0.1:0/events',
          forward: workerApp.url,
          dedupe: `sqlite:${join(dir.path, 'dedupe.db')}`,
        },
      });
      const replay = consoleReplayCommand(config, configFile);
      if (typeof replay === 'string') throw new Error(replay);
      const event = createTestEnvelope('daily.data.steps.created');
      const letters = join(dir.path, 'dead-letters.jsonl');
      writeFileSync(letters, `${event.raw}\n`);
      // The child's command line as ReplayJobs runs it, after `replay FILE`.
      const result = await runCli(['replay', letters, ...replay.args, '--json'], { env: replay.env });
      expect(result.code, result.stderr).toBe(0);
      expect(fileApp.received).toHaveLength(0);
      expect(workerApp.received.map((r) => r.headers.authorization)).toEqual([APP_TOKEN]);
    } finally {
      await fileApp.close();
      await workerApp.close();
      dir.cleanup();
    }
  }, 60_000);
});

describe('demo --console', () => {
  it('keeps publishing with the console on a printed URL, and stops on ^C', async () => {
    const demo = startCli(['demo', '--console'], { killAfterMs: 90_000 });
    let url = '';
    await vi.waitFor(
      () => {
        url = /console: (http:\/\/127\.0\.0\.1:\d+\/)/.exec(demo.output())?.[1] ?? '';
        expect(url).not.toBe('');
      },
      { timeout: 30_000, interval: 100 },
    );
    const live = async () =>
      (await (await fetch(`${url}console/api/live`)).json()) as { stats: { totals: Record<string, number> } };
    // Rounds keep coming: handled events, and dead letters (the forged and stale ones).
    await vi.waitFor(async () => expect((await live()).stats.totals.handled).toBeGreaterThan(20), {
      timeout: 30_000,
      interval: 200,
    });
    const letters = (await (await fetch(`${url}console/api/letters`)).json()) as { matching: number };
    expect(letters.matching).toBeGreaterThan(0);
    demo.child.kill('SIGINT');
    expect((await demo.done).code).toBe(0);
  }, 120_000);
});

if (SCREENSHOTS) mkdirSync(SCREENSHOTS, { recursive: true });
