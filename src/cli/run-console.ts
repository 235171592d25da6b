import { isIP } from 'node:net';
import type { Consumer } from '../consumer/consumer.js';
import type { SidecarConfig } from '../sidecar/config.js';
import { CONSOLE_TOKEN_ENV, ConsoleServer, type LiveStats, ReplayJobs } from '../sidecar/console/index.js';
import { describeUrl } from '../sidecar/forward.js';
import type { ReadinessCheck } from '../sidecar/ops-server.js';
import { describeSpec } from '../transports.js';
import { NO_CLI_COMMAND, thisCliCommand } from './this-cli-command.js';

export interface ConsoleParts {
  readonly consumer: Consumer;
  readonly live: LiveStats;
  readonly readiness: () => Record<string, ReadinessCheck>;
}

/**
 * The console of `run`: its replays run this same CLI's `replay` in a child process, forwarding
 * to the worker's app with the worker's dedupe store and secrets, so a replay from the page has
 * every guarantee of one from the terminal.
 */
export function consoleFor(parts: ConsoleParts, config: SidecarConfig): ConsoleServer {
  const replay = replayCommand(config);
  return new ConsoleServer({
    stats: parts.live,
    deadLetterPath: config.deadLetter,
    keyring: parts.consumer.keyring,
    readiness: parts.readiness,
    status: () => parts.consumer.status,
    source: describeSpec(config.source, 'source'),
    replay: typeof replay === 'string' ? undefined : new ReplayJobs(replay, config.deadLetter),
    replayUnavailable: typeof replay === 'string' ? replay : undefined,
    token: process.env[CONSOLE_TOKEN_ENV] || undefined,
    loopback: isLoopback(config.ops.host),
  });
}

/** The replay child's command line, or why this worker cannot replay from its console. */
function replayCommand(config: SidecarConfig) {
  if (!config.forward) {
    return 'this worker runs --handlers: replay with `partner-events replay FILE --to SOURCE` from a terminal';
  }
  if (config.dedupe === 'memory') {
    return "the worker's dedupe store is in memory: a replay could not tell which events are done";
  }
  if (Object.keys(config.forward.headers).length > 0) {
    return 'the worker sends extra headers to the app, which `partner-events replay` cannot send yet';
  }
  const command = thisCliCommand();
  if (!command) return NO_CLI_COMMAND;
  return {
    command,
    args: [
      '--forward',
      config.forward.url,
      '--dedupe',
      config.dedupe,
      ...(config.secretsFile ? ['--secrets-file', config.secretsFile] : []),
    ],
    description: describeUrl(config.forward.url),
  };
}

function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1';
}
