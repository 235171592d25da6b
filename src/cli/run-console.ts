import { isIP } from 'node:net';
import type { Consumer } from '../consumer/consumer.js';
import { envName, type SidecarConfig } from '../sidecar/config.js';
import { CONSOLE_TOKEN_ENV, ConsoleServer, type LiveStats, ReplayJobs } from '../sidecar/console/index.js';
import { describeUrl } from '../sidecar/forward.js';
import type { ReadinessCheck } from '../sidecar/ops-server.js';
import { describeSpec } from '../transports.js';
import { ENV_DEDUPE, ENV_FORWARD_URL, workerSettings } from './replay-config.js';
import { NO_CLI_COMMAND, thisCliCommand } from './this-cli-command.js';

export interface ConsoleParts {
  readonly consumer: Consumer;
  readonly live: LiveStats;
  readonly readiness: () => Record<string, ReadinessCheck>;
}

/**
 * The console of `run`: its replays run this same CLI's `replay` in a child process, forwarding
 * to the worker's app with the worker's dedupe store and secrets (and, with the worker's config
 * file, its forward headers), so a replay from the page has every guarantee of one from the terminal.
 */
export function consoleFor(parts: ConsoleParts, config: SidecarConfig, configFile?: string): ConsoleServer {
  const replay = consoleReplayCommand(config, configFile);
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

/**
 * The replay child's command line, or why this worker cannot replay from its console. Secrets
 * never go on it (`ps` shows a command line): header values come from the worker's config file
 * (`--config`); the forward URL (its query may hold a Functions `?code=` key) and the dedupe
 * store (a Redis URL may hold a password) from the environment.
 */
export function consoleReplayCommand(config: SidecarConfig, configFile: string | undefined) {
  if (!config.forward) {
    return 'this worker runs --handlers: replay with `partner-events replay FILE --to SOURCE` from a terminal';
  }
  if (config.dedupe === 'memory') {
    return "the worker's dedupe store is in memory: a replay could not tell which events are done";
  }
  const headersProblem = headersNotFromFile(config.forward, configFile);
  if (headersProblem) return headersProblem;
  const command = thisCliCommand();
  if (!command) return NO_CLI_COMMAND;
  return {
    command,
    args: [
      '--timeout-ms',
      String(config.forward.timeoutMs),
      ...(config.secretsFile ? ['--secrets-file', config.secretsFile] : []),
      ...(configFile ? ['--config', configFile] : []),
      // The child forwards to the worker's own URL, where the worker sends these same headers
      // (checked above), also when `run --forward` or the environment moved it off the file's
      // forward.url: a replay to another origin than the file's would otherwise withhold them.
      ...(configFile && Object.keys(config.forward.headers).length > 0 ? ['--send-config-headers'] : []),
    ],
    description: describeUrl(config.forward.url),
    // The URL and the store through the environment, not the command line, which any user of
    // the host can read: the URL's query may hold a key, a Redis URL a password.
    env: { [ENV_FORWARD_URL]: config.forward.url, [ENV_DEDUPE]: config.dedupe },
  };
}

/**
 * Why a replay reading the worker's config file would not send the headers the worker sends, or
 * undefined when it would: none, or exactly the file's (the environment,
 * PARTNER_EVENTS_FORWARD_HEADERS, is the only other way to set them).
 */
function headersNotFromFile(
  forward: NonNullable<SidecarConfig['forward']>,
  configFile: string | undefined,
): string | undefined {
  const names = Object.keys(forward.headers);
  if (names.length === 0) return undefined;
  const fromEnv = `the worker's forward headers are set by ${envName(['forward', 'headers'])}, and \`partner-events replay\` reads them only from a config file (--config): put forward.headers in the worker's config file`;
  if (!configFile) return fromEnv;
  let inFile: Readonly<Record<string, string>>;
  try {
    const flags = {
      forward: forward.url,
      to: undefined,
      dedupe: undefined,
      secretsFile: undefined,
      sendConfigHeaders: true, // the file's headers, wherever its forward.url points
    };
    inFile = workerSettings(configFile, flags).forward?.headers ?? {};
  } catch {
    // Valid only with the environment's values on top, which a replay would not read.
    return `the worker's config file ${configFile} is not valid on its own (the environment completes it), and \`partner-events replay --config\` reads only the file`;
  }
  const same =
    names.length === Object.keys(inFile).length && names.every((n) => inFile[n] === forward.headers[n]);
  return same ? undefined : fromEnv;
}

function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1';
}
