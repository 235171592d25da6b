/**
 * What the CLI prints, run as a user runs it: no credential of a source, target or forward URL in
 * any output (text, --json, logs, errors, /readyz), no line of a config file in its syntax error,
 * no control character from an unsigned field reaching the terminal, and usage errors for a
 * directory given as a file.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { terminalSafe } from '../src/cli/terminal-safe.js';
import { createTestEnvelope, forgedEnvelope } from '../src/consumer/testing.js';
import { REDACTED, redact, redactUrl } from '../src/core/redact.js';
import { runCli, startApp, startCli } from './support/cli.js';
import { fauxqsEnv, startFauxqs } from './support/fauxqs.js';
import { tempDir } from './support/harness.js';
import { deadRecord, jsonLines, writeJsonl } from './support/records.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-printing-');
});
afterEach(() => dir.cleanup());

/** Neither credential may appear anywhere in what a command printed. */
function expectNoCredentials(...outputs: string[]) {
  for (const output of outputs) {
    expect(output).not.toContain('S3cr3tSig');
    expect(output).not.toContain('Hunt3r2pw');
  }
}

// An Azure Storage queue URL with a SAS, as the portal hands it out, and userinfo on top.
const SAS_QUERY = 'sv=2024-11-04&se=2030-01-01T00%3A00%3A00Z&sp=raup&skoid=abc&sig=S3cr3tSig%2Bsig%3D';
const SAS_URL = `https://user:Hunt3r2pw@account.queue.core.windows.net/partner-events?${SAS_QUERY}`;

describe('redact', () => {
  it('removes userinfo, the whole query and the fragment of every URL in a text, and blanks credential pairs', () => {
    expect(redact(SAS_URL)).toBe('https://account.queue.core.windows.net/partner-events');
    expect(redact(`sqs:http://user:Hunt3r2pw@127.0.0.1:9/000000000000/q?sig=S3cr3tSig#x`)).toBe(
      'sqs:http://127.0.0.1:9/000000000000/q',
    );
    // What fetch reads as credentials, whatever the spelling.
    expect(redact('http:user:Hunt3r2pw@host/x')).toBe('http://host/x');
    expect(redact('HTTPS:\\\\user:Hunt3r2pw@host\\x?sig=S3cr3tSig')).toBe('HTTPS://host\\x');
    expect(redact('redis://:Hunt3r2pw@127.0.0.1:6379/0')).toBe('redis://127.0.0.1:6379/0');
    expect(
      redact(
        'Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=S3cr3tSig=;EntityPath=h',
      ),
    ).toBe(
      `Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=${REDACTED};EntityPath=h`,
    );
    expect(
      redact(
        'DefaultEndpointsProtocol=https;AccountName=a;AccountKey=S3cr3tSig==;EndpointSuffix=core.windows.net',
      ),
    ).toBe(
      `DefaultEndpointsProtocol=https;AccountName=a;AccountKey=${REDACTED};EndpointSuffix=core.windows.net`,
    );
    expect(
      redact('BlobEndpoint=https://a.blob.core.windows.net/;SharedAccessSignature=sv=1&sig=S3cr3tSig'),
    ).not.toContain('S3cr3tSig');
    // Prose and placeholders stay as they are.
    for (const text of [
      'file:/tmp/dead letters.jsonl',
      'use https (http only for a local emulator)',
      'https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE',
    ]) {
      expect(redact(text)).toBe(text);
    }
  });

  it('prints one URL from its parsed form, or (invalid url)', () => {
    expect(redactUrl('http://user:Hunt3r2pw@127.0.0.1:8080?code=S3cr3tSig')).toBe('http://127.0.0.1:8080/');
    expect(redactUrl('http:\\\\user:Hunt3r2pw@host')).toBe('http://host/');
    expect(redactUrl('not a url')).toBe('(invalid url)');
  });
});

describe('terminalSafe', () => {
  it('escapes C0 and C1 controls, DEL and bidi controls, and keeps every other character', () => {
    expect(terminalSafe('evt_\u001b]0;owned\u0007\u001b[2J\r\u009b31m\u007f')).toBe(
      'evt_\\x1b]0;owned\\x07\\x1b[2J\\x0d\\x9b31m\\x7f',
    );
    expect(terminalSafe('a\u202eb\u2066c\u200fd\u2028')).toBe('a\\u202eb\\u2066c\\u200fd\\u2028');
    expect(terminalSafe('évènement 心拍 😀 tab-free')).toBe('évènement 心拍 😀 tab-free');
  });
});

describe('credentials in source, target and forward URLs are never printed', () => {
  it('replay --dry-run --to: per line and in the summary, text and --json', async () => {
    const file = writeJsonl(dir.path, 'dead.jsonl', [createTestEnvelope('daily.data.steps.created').raw]);
    const dryRun = (...args: string[]) =>
      runCli(['replay', file, '--dry-run', '--dedupe', 'memory', ...args]);
    // The five runs are independent: at once, so that a loaded machine costs this test one start-up.
    const [text, json, withKey, withUser] = await Promise.all([
      dryRun('--to', SAS_URL),
      dryRun('--to', SAS_URL, '--json'),
      // A Functions key in the query is a credential too; userinfo is refused outright (exit 2).
      dryRun('--forward', 'http://127.0.0.1:9/api/events?code=S3cr3tSig'),
      dryRun('--forward', 'http://user:Hunt3r2pw@127.0.0.1:9/api/events?code=S3cr3tSig'),
    ]);
    for (const result of [text, json]) {
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toContain('https://account.queue.core.windows.net/partner-events');
    }
    expect(jsonLines(json.stdout).at(-1)).toMatchObject({
      target: 'https://account.queue.core.windows.net/partner-events',
    });
    expect(withKey.stdout).toContain('-> http://127.0.0.1:9/api/events');
    expect(withUser.code).toBe(2);
    expectNoCredentials(
      ...[text, json, withKey, withUser].flatMap((result) => [result.stdout, result.stderr]),
    );
  });

  it('unknown --to and --source values are echoed redacted (replay, trigger, simulate, run)', async () => {
    const file = writeJsonl(dir.path, 'dead.jsonl', [createTestEnvelope('daily.data.steps.created').raw]);
    const values = [
      'amqps://user:Hunt3r2pw@broker.example/q?sig=S3cr3tSig',
      'Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=S3cr3tSig',
    ];
    for (const value of values) {
      const runs = await Promise.all([
        runCli(['replay', file, '--dedupe', 'memory', '--to', value]),
        runCli(['trigger', 'daily.data.steps.created', '--to', value]),
        runCli(['simulate', '--to', value, '--duration', '1']),
        runCli(['run', '--source', value, '--forward', 'http://127.0.0.1:9/', '--dedupe', 'memory']),
      ]);
      for (const result of runs) {
        expect(result.code).toBe(2);
        expect(result.stderr).toMatch(/unknown --(to|source) "(amqps:\/\/broker\.example\/q|Endpoint=sb:)/);
        expectNoCredentials(result.stdout, result.stderr);
      }
    }
  });

  it('usage errors never echo a credential typed or set in the environment (--dedupe, a stray argument)', async () => {
    const source = ['--source', `file:${join(dir.path, 'none.jsonl')}`, '--forward', 'http://127.0.0.1:9/'];
    writeFileSync(join(dir.path, 'none.jsonl'), '');
    const store = 'mongodb://default:Hunt3r2pw@127.0.0.1:9/0';
    const stray = 'https://app.example/hook?code=S3cr3tSig';
    const runs = await Promise.all([
      runCli(['run', ...source], { env: { PARTNER_EVENTS_DEDUPE: store } }),
      runCli(['run', ...source, '--dedupe', store]),
      runCli(['replay', join(dir.path, 'none.jsonl'), '--forward', 'http://127.0.0.1:9/'], {
        env: { PARTNER_EVENTS_DEDUPE: store },
      }),
      runCli(['run', ...source, '--dedupe', 'memory', stray]),
      runCli(['simulate', '--to', 'http://127.0.0.1:9/', stray]),
      // A message built without redact: main.ts redacts every error it prints.
      runCli(['run', ...source, '--dedupe', 'memory', '--concurrency', stray]),
    ]);
    const [fromEnv, fromFlag, replay, run, simulate, concurrency] = runs;
    for (const result of [fromEnv, fromFlag, replay]) {
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toContain('unknown --dedupe "mongodb://127.0.0.1:9/0"');
    }
    for (const result of [run, simulate]) {
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toContain('unexpected argument "https://app.example/hook"');
    }
    expect(concurrency.code, concurrency.stderr).toBe(2);
    expect(concurrency.stderr).toContain(
      '--concurrency must be a positive integer, got "https://app.example/hook"',
    );
    for (const result of runs) expectNoCredentials(result.stdout, result.stderr);
  });

  it('replay --to http(s): the summary, --json lines and the failure reasons (fetch quotes the URL whole)', async () => {
    const app = await startApp();
    try {
      const file = writeJsonl(dir.path, 'dead.jsonl', [
        deadRecord(createTestEnvelope('daily.data.steps.created').raw),
      ]);
      const target = `${app.url.replace('http://', 'http://user:Hunt3r2pw@')}?sig=S3cr3tSig`;
      for (const json of [[], ['--json']]) {
        const result = await runCli(
          ['replay', file, '--to', target, '--dedupe', 'memory', '--attempts', '1', ...json],
          { env: { LOG_LEVEL: 'info' } },
        );
        expect(result.stdout + result.stderr).toContain(app.url);
        expectNoCredentials(result.stdout, result.stderr);
        for (const name of readdirSync(dir.path).filter((n) => n.includes('.failed-'))) {
          expectNoCredentials(readFileSync(join(dir.path, name), 'utf8'));
        }
      }
    } finally {
      await app.close();
    }
  });

  it('run: startup and receive-failure logs and /readyz', async () => {
    const fauxqs = await startFauxqs();
    const app = await startApp();
    // A queue that does not exist, so receives fail and /readyz reports why.
    const source = `sqs:${fauxqs.endpoint.replace('http://', 'http://user:Hunt3r2pw@')}/000000000000/missing?sig=S3cr3tSig`;
    const cli = startCli(
      ['run', '--source', source, '--forward', `${app.url}?code=S3cr3tSig`, '--dedupe', 'memory'],
      { env: { ...fauxqsEnv(fauxqs.endpoint), LOG_LEVEL: 'info', PARTNER_EVENTS_OPS_PORT: '0' } },
    );
    try {
      const ops = await vi.waitFor(
        () => {
          const line = jsonLines(cli.output()).find(
            (l) => l.msg === 'operations endpoints: /healthz /readyz /metrics',
          );
          if (!line) throw new Error('ops not up yet');
          return String(line.ops);
        },
        { timeout: 15_000 },
      );
      const readyz = await vi.waitFor(
        async () => {
          const response = await fetch(`${ops}/readyz`);
          const body = await response.text();
          expect(response.status).toBe(503);
          expect(body).toContain('QueueDoesNotExist');
          return body;
        },
        { timeout: 15_000 },
      );
      expect(cli.output()).toContain(`"forward":"${app.url}"`);
      expectNoCredentials(readyz);
    } finally {
      cli.child.kill('SIGTERM');
      const result = await cli.done;
      expectNoCredentials(result.stdout, result.stderr);
      await app.close();
      await fauxqs.close();
    }
  });
});

describe('a syntax error in --config names the place and the kind, never the line', () => {
  it('YAML: the broken line holds a bearer token', async () => {
    const config = join(dir.path, 'worker.yaml');
    writeFileSync(
      config,
      [
        'source: file:events.jsonl',
        'forward:',
        '  url: http://127.0.0.1:9/',
        '  headers:',
        '    authorization: "Bearer S3cr3tSig-token',
        '',
      ].join('\n'),
    );
    const result = await runCli(['run', '--config', config]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/is not valid YAML: [A-Z_]+ at line \d+, column \d+/);
    expectNoCredentials(result.stderr, result.stdout);
  });

  it('YAML: a warning (an unknown tag) does not print the line either', async () => {
    const config = join(dir.path, 'worker.yaml');
    writeFileSync(
      config,
      ['forward:', '  headers:', '    authorization: !!int Bearer S3cr3tSig-token', ''].join('\n'),
    );
    const result = await runCli(['run', '--config', config]);
    expect(result.code).toBe(2); // no source: the configuration is invalid
    expectNoCredentials(result.stderr, result.stdout);
  });

  it('JSON: an unquoted token and an unterminated string', async () => {
    const unquoted = join(dir.path, 'unquoted.json');
    writeFileSync(
      unquoted,
      '{"source": "file:x", "forward": {"headers": {"authorization": Bearer S3cr3tSig}}}',
    );
    const unterminated = join(dir.path, 'unterminated.json');
    writeFileSync(
      unterminated,
      '{"source": "file:x",\n "forward": {"headers": {"authorization": "Bearer S3cr3tSig}}}\n',
    );
    const [a, b] = await Promise.all([
      runCli(['run', '--config', unquoted]),
      runCli(['run', '--config', unterminated]),
    ]);
    expect(a.code).toBe(2);
    expect(a.stderr).toContain('is not valid JSON');
    expect(b.code).toBe(2);
    expect(b.stderr).toMatch(/is not valid JSON: .* at line 2, column \d+/);
    expectNoCredentials(a.stderr, b.stderr);
  });
});

// What an attacker who can write to the queue (or a dead-letter file) puts in unsigned fields.
const HOSTILE = 'evt_\u001b]0;owned\u0007\u001b[2J\r\u009b2Jok \u202e';

function expectTerminalSafe(output: string) {
  // Tab and newline are the output's own; nothing else below U+0020, no C1, no bidi control.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding them is the point
  expect(output).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/);
}

describe('unsigned fields are escaped before they reach a terminal', () => {
  it('verify: the table shows the claimed ids of a forged envelope escaped', async () => {
    const forged = forgedEnvelope('daily.data.steps.created', {
      envelope: { event_id: HOSTILE, event_type: HOSTILE },
    });
    const result = await runCli(['verify'], { input: `${forged.raw}\n` });
    expect(result.code).toBe(1);
    expectTerminalSafe(result.stdout);
    expect(result.stdout).toContain('evt_\\x1b]0;owned\\x07\\x1b[2J\\x0d\\x9b2Jok \\u202e');
    // --json was safe already: JSON escapes them, and the value reads back intact.
    const json = await runCli(['verify', '--json'], { input: `${forged.raw}\n` });
    expect(jsonLines(json.stdout)[0]).toMatchObject({ event_id: HOSTILE });
  });

  it('replay: dry-run lines, the summary and the table by recorded code', async () => {
    const event = createTestEnvelope('daily.data.steps.created', { fields: { event_id: HOSTILE } });
    const record = JSON.parse(deadRecord(event.raw)) as Record<string, unknown>;
    const file = writeJsonl(dir.path, 'dead.jsonl', [JSON.stringify({ ...record, code: HOSTILE })]);
    const dry = await runCli(['replay', file, '--dry-run', '--dedupe', 'memory', '--to', 'file:/dev/null']);
    expect(dry.stdout).toContain('\\x1b[2J');
    expectTerminalSafe(dry.stdout);
    const out = join(dir.path, 'out.jsonl');
    const result = await runCli(['replay', file, '--dedupe', 'memory', '--to', `file:${out}`]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('by recorded code:');
    expectTerminalSafe(result.stdout);
    expectTerminalSafe(result.stderr);
  });

  it('trigger: the event id and the target’s answer', async () => {
    // An ingress (or anything at that URL) answers with a code of its choosing.
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(400).end(JSON.stringify({ code: HOSTILE })));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      const result = await runCli([
        'trigger',
        'daily.data.steps.created',
        '--set',
        `event_id=${HOSTILE}`,
        '--to',
        `http://127.0.0.1:${port}/events`,
      ]);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('HTTP 400 evt_\\x1b]0;owned');
      expectTerminalSafe(result.stdout);
      expectTerminalSafe(result.stderr);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('simulate and usage errors: a target named with control characters', async () => {
    const path = join(dir.path, `out${HOSTILE}.jsonl`);
    const simulate = await runCli([
      'simulate',
      '--to',
      `file:${path}`,
      '--duration',
      '1',
      '--rate',
      '2/s',
      '--drain',
      '0',
    ]);
    expect(simulate.code).toBe(0);
    expect(simulate.stdout).toContain('\\x1b[2J');
    expectTerminalSafe(simulate.stdout);
    const usage = await runCli(['replay', path, '--to', `nowhere:${HOSTILE}`]);
    expect(usage.code).toBe(2);
    expectTerminalSafe(usage.stderr);
  });
});

describe('replay DIR', () => {
  it('is a usage error (exit 2), like verify DIR, not EISDIR with a stack', async () => {
    const folder = join(dir.path, 'dead-letters');
    mkdirSync(folder);
    for (const flags of [['--to', `file:${join(dir.path, 'out.jsonl')}`], ['--dry-run']]) {
      const result = await runCli(['replay', folder, '--dedupe', 'memory', ...flags]);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(`${folder} is a directory`);
      expect(result.stderr).not.toContain('EISDIR');
    }
    expect((await runCli(['verify', folder])).code).toBe(2);
  });
});
