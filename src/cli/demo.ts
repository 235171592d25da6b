import { mkdtempSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { styleText } from 'node:util';
// The demo feeds its own in-process queue, so it holds the memory source itself rather than a
// source a spec names: not through the transport registry (no SDK either way).
import { createMemorySource, type MemorySource } from '../../adapters/memory/index.js';
import { createConsumer, type SettledReport } from '../consumer/consumer.js';
import { createTestEnvelope } from '../consumer/testing.js';
import { EVENT_TYPES } from '../core/events/schemas.js';
import { silentLogger } from '../core/logger.js';
import type { Outcome } from '../core/outcome.js';
import { createSqliteDedupe } from '../dedupe/sqlite.js';
import { LiveStats } from '../sidecar/console/index.js';
import { createForwarder, describeUrl } from '../sidecar/forward.js';
import { ConsumerMetrics } from '../sidecar/metrics.js';
import { parse, parsePositiveInt, writeLine } from './common.js';
import { runDemoConsole } from './demo-console.js';
import { terminalSafe } from './terminal-safe.js';

const DEMO_SECRET = 'demo-signing-secret-for-the-local-demo-only';

export const DEMO_USAGE = `Usage: partner-events demo [--events N] [--console [--ops-port N]]

Runs the whole kit locally with no cloud and no Docker: a publisher signs catalog events (some
delivered twice, one forged, one stale) into an in-process queue; the worker verifies,
de-duplicates (SQLite) and forwards them to a stand-in app on 127.0.0.1; each outcome is shown.

  --events N     events to publish (default ${EVENT_TYPES.length}: every catalog type once)
  --console      keep running, publishing a round of events every 2 s, with the console of
                 \`run\` open on a printed URL (docs/console.md); ^C stops
  --ops-port N   the console's port with --console (default: any free port)`;

/** The `npm start` job: shows events flowing through every stage of the pipeline. */
export async function demoCommand(args: string[]): Promise<number> {
  const { values } = parse(args, {
    events: { type: 'string', default: String(EVENT_TYPES.length) },
    console: { type: 'boolean', default: false },
    'ops-port': { type: 'string', default: '0' },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (values.help) {
    writeLine(DEMO_USAGE);
    return 0;
  }
  const count = parsePositiveInt('--events', values.events, EVENT_TYPES.length);
  const dir = mkdtempSync(join(tmpdir(), 'partner-events-demo-'));
  const app = await startApp();
  const source = createMemorySource({ name: 'demo-queue', endWhenEmpty: !values.console });
  const live = values.console ? new LiveStats() : undefined;
  const metrics = values.console ? new ConsumerMetrics() : undefined;
  const deadLetterPath = join(dir, 'dead-letters.jsonl');
  const stats: DemoStats = { handled: 0, duplicates: 0, dead: 0, retries: 0 };
  printSetup(join(dir, 'dedupe.db'), app.url, deadLetterPath);

  const consumer = demoConsumer(source, dir, deadLetterPath, (report) => {
    if (!live) return printOutcome(report, stats);
    live.observe(report);
    metrics?.observe(report);
  });
  const forward = createForwarder({ url: app.url, connections: 4 });
  consumer.on('*', forward);
  const sent = publish(source, count);
  if (live && metrics) {
    await runDemoConsole({
      consumer,
      source,
      live,
      metrics,
      appUrl: app.url,
      dedupePath: join(dir, 'dedupe.db'),
      deadLetterPath,
      signingSecret: DEMO_SECRET,
      publish: () => publish(source, count),
      opsPort: Number(values['ops-port']),
    });
    await forward.close();
    await app.close();
    return 0;
  }

  await consumer.start();
  await consumer.stopped;
  await forward.close();
  await app.close();
  const once = sent.every((id) => app.received.get(id) === 1);
  printTotals(stats, app.received.size, once, deadLetterPath);
  return once && stats.handled === sent.length ? 0 : 1;
}

/** The worker of the demo: SQLite dedupe in `dir`, quick retries so the forged event dies within the demo. */
function demoConsumer(
  source: MemorySource,
  dir: string,
  deadLetterPath: string,
  onSettled: (report: SettledReport) => void,
) {
  return createConsumer({
    source,
    secrets: [{ id: 'current', secret: DEMO_SECRET }],
    dedupe: createSqliteDedupe({ path: join(dir, 'dedupe.db') }),
    deadLetter: deadLetterPath,
    logger: silentLogger(),
    concurrency: 4,
    retry: { maxAttempts: 3, baseDelayMs: 100, maxDelayMs: 400 },
    onSettled,
  });
}

interface DemoStats {
  handled: number;
  duplicates: number;
  dead: number;
  retries: number;
}

function printSetup(dedupePath: string, appUrl: string, deadLetterPath: string): void {
  writeLine(styleText('bold', 'partner-health-events demo'));
  writeLine(`  queue      in-process (stands in for SQS / Event Hubs / Storage Queue)`);
  writeLine(`  dedupe     SQLite ${dedupePath}`);
  writeLine(`  your app   ${describeUrl(appUrl)} (a stand-in HTTP service)`);
  writeLine(`  dead       ${deadLetterPath}`);
  writeLine('');
}

/**
 * The publisher: every catalog type once (`count` events in all), then the kinds of trouble a
 * real queue brings. Returns the ids of the genuine events, each of which the app must get once.
 */
function publish(source: MemorySource, count: number): string[] {
  const sent: string[] = [];
  for (let i = 0; i < count; i++) {
    const type = EVENT_TYPES[i % EVENT_TYPES.length] ?? 'daily.data.heart_rate.created';
    const event = createTestEnvelope(type, { secret: DEMO_SECRET });
    source.send(event.raw);
    sent.push(event.eventId);
    if (i % 5 === 0) source.send(event.raw); // at-least-once: the broker delivers a copy
    if (i % 7 === 3) {
      // The publisher retries: same event_id, signed again later.
      source.send(createTestEnvelope(type, { secret: DEMO_SECRET, fields: { ...event.event } }).raw);
    }
  }
  source.send(createTestEnvelope('daily.data.steps.created', { secret: 'a-guessed-secret' }).raw); // forged
  source.send(
    createTestEnvelope('daily.data.weight.created', {
      secret: DEMO_SECRET,
      signedAt: Math.floor(Date.now() / 1000) - 3600,
    }).raw,
  ); // an old capture, re-sent: fresh enqueue time, stale signature
  return sent;
}

function printTotals(stats: DemoStats, distinct: number, once: boolean, deadLetterPath: string): void {
  writeLine('');
  writeLine(
    styleText(
      'bold',
      `${stats.handled} handled, ${stats.duplicates} duplicates skipped, ${stats.retries} retries, ${stats.dead} dead-lettered`,
    ),
  );
  writeLine(
    `your app received ${distinct} distinct events${once ? ', each exactly once' : ' (some more than once!)'}; ` +
      `nothing forged or stale reached it.`,
  );
  writeLine(`dead letters: ${deadLetterPath}`);
  writeLine(
    `  inspect them: PARTNER_EVENTS_SIGNING_SECRET=${DEMO_SECRET} ${cliCommand()} verify ${deadLetterPath}`,
  );
}

/**
 * How to run the CLI where the demo runs: from this repository's sources (`npm start`), or from
 * an installed package. Never `npx partner-events`: outside a project that has the package, npx
 * would fetch the registry's unrelated package of that name.
 */
function cliCommand(): string {
  return import.meta.url.endsWith('.ts') ? 'npm run partner-events --' : 'npx partner-health-events';
}

function printOutcome(report: SettledReport, stats: DemoStats) {
  const { outcome } = report;
  // Escaped piece by piece: the label's own colours are escape sequences too.
  const type = terminalSafe(report.eventType ?? '(unverified)').padEnd(36);
  const id = report.eventId ? `${terminalSafe(report.eventId.slice(0, 16))}…` : '';
  const label = labelOf(outcome);
  if (outcome.kind === 'ack') {
    if (outcome.result === 'duplicate') stats.duplicates++;
    else stats.handled++;
    const detail =
      outcome.result === 'duplicate' ? 'already handled: acked, not forwarded' : `key=${report.keyId}`;
    writeLine(`  ${label} ${type} ${id.padEnd(18)} ${detail}`);
  } else if (outcome.kind === 'retry') {
    stats.retries++;
    writeLine(
      `  ${label} ${type} ${id.padEnd(18)} ${outcome.code} (attempt ${report.attempt}): ${terminalSafe(outcome.reason)}`,
    );
  } else {
    stats.dead++;
    writeLine(`  ${label} ${type} ${id.padEnd(18)} ${outcome.code}: ${terminalSafe(outcome.reason)}`);
  }
}

function labelOf(outcome: Outcome): string {
  if (outcome.kind === 'ack') {
    return outcome.result === 'duplicate' ? styleText('cyan', 'duplicate') : styleText('green', 'handled  ');
  }
  return outcome.kind === 'retry' ? styleText('yellow', 'retry    ') : styleText('red', 'dead     ');
}

async function startApp(): Promise<{ url: string; received: Map<string, number>; close(): Promise<void> }> {
  const received = new Map<string, number>();
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      // The forwarder percent-encodes the id (docs/sidecar.md#forward-to-your-app).
      const id = decodeURIComponent(String(req.headers['partner-event-id']));
      received.set(id, (received.get(id) ?? 0) + 1);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/events`,
    received,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
