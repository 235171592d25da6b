import type { Consumer } from '../consumer/consumer.js';
import type { SourceAdapter } from '../core/source-adapter.js';
import { CONSOLE_TOKEN_ENV, ConsoleServer, type LiveStats, ReplayJobs } from '../sidecar/console/index.js';
import { describeUrl } from '../sidecar/forward.js';
import type { ConsumerMetrics } from '../sidecar/metrics.js';
import { startOpsServer } from '../sidecar/ops-server.js';
import { readiness } from '../sidecar/readiness.js';
import { onStopSignals, writeLine } from './common.js';
import { NO_CLI_COMMAND, thisCliCommand } from './this-cli-command.js';

export interface DemoConsoleParts {
  readonly consumer: Consumer;
  readonly source: SourceAdapter;
  readonly live: LiveStats;
  readonly metrics: ConsumerMetrics;
  readonly appUrl: string;
  readonly dedupePath: string;
  readonly deadLetterPath: string;
  readonly signingSecret: string;
  /** Sends one more round of events (with duplicates, a forgery and a stale one). */
  readonly publish: () => void;
  readonly opsPort: number;
}

/** How often the demo's publisher sends another round while the console is open. */
const PUBLISH_EVERY_MS = 2000;

/**
 * `demo --console`: the demo keeps running, its publisher sending a round of events every two
 * seconds, with the console of `run` on a printed URL, until ^C.
 */
export async function runDemoConsole(parts: DemoConsoleParts): Promise<void> {
  const { consumer, source } = parts;
  const command = thisCliCommand();
  const consoleServer = new ConsoleServer({
    stats: parts.live,
    deadLetterPath: parts.deadLetterPath,
    keyring: consumer.keyring,
    readiness: () => readiness(consumer, source, 120_000).checks,
    status: () => consumer.status,
    source: 'demo-queue (in-process)',
    replay:
      command &&
      new ReplayJobs(
        {
          command,
          args: ['--forward', parts.appUrl, '--dedupe', `sqlite:${parts.dedupePath}`],
          description: describeUrl(parts.appUrl),
          env: { PARTNER_EVENTS_SIGNING_SECRET: parts.signingSecret },
        },
        parts.deadLetterPath,
      ),
    replayUnavailable: command ? undefined : NO_CLI_COMMAND,
    token: process.env[CONSOLE_TOKEN_ENV] || undefined,
    loopback: true,
  });
  const ops = await startOpsServer({
    host: '127.0.0.1',
    port: parts.opsPort,
    registry: parts.metrics.registry,
    alive: () => consumer.status.state !== 'stopped',
    readiness: () => readiness(consumer, source, 120_000).checks,
    console: consoleServer,
  });
  const publisher = setInterval(parts.publish, PUBLISH_EVERY_MS);
  writeLine(`console: ${ops.url}/  (events keep coming every ${PUBLISH_EVERY_MS / 1000} s; ^C to stop)`);
  // A second ^C exits at once, as in `run`.
  const unhookSignals = onStopSignals(() => {
    clearInterval(publisher);
    void consumer.stop();
  });
  await consumer.start();
  await consumer.stopped;
  clearInterval(publisher);
  unhookSignals();
  await ops.close();
}
