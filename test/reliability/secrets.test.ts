/**
 * Secrets suite: the sidecar as deployed (`partner-events run` as a child process, HTTP ingress,
 * a handlers module, SQLite dedupe, a JSONL dead-letter file, ops endpoints, LOG_LEVEL=trace)
 * receives every kind of message — valid under the current and the previous key, forged,
 * tampered, stale, early, malformed, oversize, mismatched, invalid, unknown, failing and
 * dead-lettered by the handler — goes through a secret rotation by SIGHUP and a broken secrets
 * file, and is stopped with SIGTERM. Then every output is searched for the three signing secrets:
 * stdout and stderr (all logs), every HTTP answer (reasons included), the dead-letter file,
 * /metrics, /readyz and /healthz. A second run fails at start-up on a malformed secret; its error
 * output is searched as well.
 *
 * The other suites search their own outputs the same way (each reports `secret_hits`).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTestEnvelope } from '../../src/consumer/testing.js';
import { runCli, SOURCE_MAIN, startCli } from '../support/cli.js';
import { tempDir } from '../support/harness.js';
import { jsonLines } from '../support/records.js';
import { report, timeout } from './support/profile.js';
import { SecretScan, suiteSecret } from './support/secrets.js';

const HANDLERS = fileURLToPath(new URL('./support/secrets-handlers.ts', import.meta.url));
const TYPE = 'daily.data.heart_rate.created';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-secrets-');
});
afterEach(() => dir.cleanup());

type LogLine = { msg?: string; [k: string]: unknown };

describe('secrets never leave the process', () => {
  it(
    'no log line, error, HTTP answer, metric label or dead-letter record holds a signing secret',
    async () => {
      const current = suiteSecret('secrets-current');
      const previous = suiteSecret('secrets-previous');
      const next = suiteSecret('secrets-next');
      const scan = new SecretScan([current, previous, next]);
      const secretsFile = join(dir.path, 'secrets.json');
      const deadLetters = join(dir.path, 'dead.jsonl');
      const writeKeys = (keys: object[]) => writeFileSync(secretsFile, JSON.stringify({ keys }));
      writeKeys([
        { id: 'current', secret: current },
        { id: 'previous', secret: previous, not_after: new Date(Date.now() + 3_600_000).toISOString() },
      ]);

      const cli = startCli(
        [
          'run',
          '--source',
          'http://127.0.0.1:0/events',
          '--handlers',
          HANDLERS,
          '--dedupe',
          `sqlite:${join(dir.path, 'dedupe.db')}`,
          '--dead-letter',
          deadLetters,
          '--ops-port',
          '0',
          '--secrets-file',
          secretsFile,
          '--log-level',
          'trace',
        ],
        {
          env: { PARTNER_EVENTS_RETRY_BASE_DELAY_MS: '10', PARTNER_EVENTS_RETRY_MAX_DELAY_MS: '20' },
          main: SOURCE_MAIN, // the handlers module is TypeScript: the CLI runs through tsx
        },
      );
      const logs = () => jsonLines(cli.output()) as LogLine[];
      const find = (msg: string) => logs().find((l) => l.msg?.startsWith(msg));
      const answers: string[] = [];
      try {
        await vi.waitFor(() => expect(find('consumer started')).toBeDefined(), {
          timeout: 20_000,
          interval: 25,
        });
        const ingress = String(find('listening for envelopes')?.ingress);
        const ops = String(find('operations endpoints')?.ops);
        const post = async (label: string, body: string, expected: number) => {
          const res = await fetch(ingress, {
            method: 'POST',
            body,
            headers: { 'content-type': 'application/json' },
          });
          const text = await res.text();
          answers.push(text);
          expect(res.status, `${label}: ${text}`).toBe(expected);
        };
        const now = Math.floor(Date.now() / 1000);
        const valid = (secret: string, fields: Record<string, unknown> = {}) =>
          createTestEnvelope(TYPE, { secret, fields }).raw;

        await post('valid, current key', valid(current), 200);
        await post('valid, previous key', valid(previous), 200);
        await post('forged', valid('not-the-secret-at-all'), 503);
        const tampered = createTestEnvelope(TYPE, { secret: current });
        await post(
          'tampered body',
          JSON.stringify({
            ...tampered.envelope,
            body: tampered.envelope.body.replace('"value":62', '"value":63'),
          }),
          503,
        );
        await post('stale', createTestEnvelope(TYPE, { secret: current, signedAt: now - 3600 }).raw, 422);
        await post('early', createTestEnvelope(TYPE, { secret: current, signedAt: now + 3600 }).raw, 503);
        await post('not JSON', '{"event_id": "x", ', 422);
        await post('not an envelope', '{"hello":"world"}', 422);
        await post('oversize', `{"pad":"${'x'.repeat(1024 * 1024)}"}`, 413);
        await post('body not JSON', createTestEnvelope(TYPE, { secret: current, body: 'not json' }).raw, 422);
        await post(
          'envelope mismatch',
          createTestEnvelope(TYPE, { secret: current, envelope: { event_id: 'evt-other' } }).raw,
          422,
        );
        await post('schema invalid', valid(current, { value: 'sixty-two' }), 422);
        await post('unknown type', createTestEnvelope('partner.future.event', { secret: current }).raw, 200);
        await post('handler throws', valid(current, { event_id: 'fail-1' }), 503);
        await post('handler dead-letters', valid(current, { event_id: 'dead-1' }), 422);

        // Rotation: `next` becomes current, `current` previous, `previous` is gone.
        writeKeys([
          { id: 'next', secret: next },
          { id: 'current', secret: current },
        ]);
        cli.child.kill('SIGHUP');
        await vi.waitFor(() => expect(find('signing secrets reloaded')).toBeDefined(), { timeout: 10_000 });
        await post('valid, new key', valid(next), 200);
        await post('retired key', valid(previous), 503);
        // A broken file keeps the old keys, and says so.
        writeFileSync(secretsFile, `{"keys":[{"id":"next","secret":"${next}"`);
        cli.child.kill('SIGHUP');
        await vi.waitFor(() => expect(find('secrets reload failed')).toBeDefined(), { timeout: 10_000 });
        await post('valid after a failed reload', valid(next), 200);

        const metrics = await (await fetch(`${ops}/metrics`)).text();
        const readyz = await (await fetch(`${ops}/readyz`)).text();
        const healthz = await (await fetch(`${ops}/healthz`)).text();
        expect(metrics).toContain('partner_events_verified_total{key_id="current"}');
        expect(metrics).toContain('partner_events_verified_total{key_id="previous"}');
        expect(metrics).toContain('partner_events_verified_total{key_id="next"}');
        scan.scan('/metrics', metrics);
        scan.scan('/readyz', readyz);
        scan.scan('/healthz', healthz);
      } finally {
        cli.child.kill('SIGTERM');
      }
      const result = await cli.done;
      expect(result.code, result.stderr).toBe(0);
      for (const answer of answers) scan.scan('HTTP answer', answer);
      scan.scan('stdout (logs)', result.stdout);
      scan.scan('stderr', result.stderr);
      scan.scanFile('dead letters', deadLetters);
      const deadLetterCount = readFileSync(deadLetters, 'utf8').split('\n').filter(Boolean).length;

      // A start-up failure on a malformed secret (trailing newline): its message must not echo it.
      const failed = await runCli(
        ['run', '--source', 'http://127.0.0.1:0/events', '--forward', 'http://127.0.0.1:9/x'],
        {
          env: { PARTNER_EVENTS_SIGNING_SECRET: `${current}\n`, PARTNER_EVENTS_DEDUPE: 'memory' },
        },
      );
      expect(failed.code).toBe(2);
      expect(failed.stderr).toContain('SECRET_INVALID');
      scan.scan('start-up error (stderr)', failed.stderr);
      scan.scan('start-up error (stdout)', failed.stdout);

      const logLines = result.stdout.split('\n').filter((l) => l.startsWith('{')).length;
      report('secrets', {
        secrets: 3,
        log_lines: logLines,
        http_answers: answers.length,
        dead_letter_records: deadLetterCount,
        ...scan.figures,
      });
      expect(logLines).toBeGreaterThan(20);
      expect(deadLetterCount).toBeGreaterThanOrEqual(6);
      expect(scan.hits).toEqual([]);
    },
    timeout(60_000, 120_000),
  );
});
