import { readFileSync } from 'node:fs';
import { isPartnerEventsError } from '../core/errors.js';
import { redact } from '../core/redact.js';
import { SpecError } from '../core/transport.js';
import { UsageError, writeLine } from './common.js';
import { DEMO_USAGE, demoCommand } from './demo.js';
import { didYouMean } from './did-you-mean.js';
import { causeLines } from './error-chain.js';
import { REPLAY_USAGE, replayCommand } from './replay.js';
import { RUN_USAGE, runCommand } from './run.js';
import { SIMULATE_USAGE, simulateCommand } from './simulate.js';
import { terminalSafeLines } from './terminal-safe.js';
import { TRIGGER_USAGE, triggerCommand } from './trigger.js';
import { VERIFY_USAGE, verifyCommand } from './verify.js';

const COMMANDS: Record<string, { run: (args: string[]) => Promise<number>; usage: string }> = {
  run: { run: runCommand, usage: RUN_USAGE },
  verify: { run: verifyCommand, usage: VERIFY_USAGE },
  replay: { run: replayCommand, usage: REPLAY_USAGE },
  trigger: { run: triggerCommand, usage: TRIGGER_USAGE },
  simulate: { run: simulateCommand, usage: SIMULATE_USAGE },
  demo: { run: demoCommand, usage: DEMO_USAGE },
};

const USAGE = `Usage: partner-events <command> [options]

Commands:
  run      consume a queue and hand verified, de-duplicated events to your app
  verify   check envelopes from a file or stdin (signature, age, schema)
  replay   re-drive dead events from a file, a dead-letter queue or a hub, safely (to your app or a queue)
  trigger  send one signed sample event of a catalog type to a queue, an ingress or a file
  simulate the publisher, locally: signed traffic with duplicates, retries, forgeries
  demo     the whole pipeline locally, no cloud needed (what 'npm start' runs)

'partner-events <command> --help' (or 'partner-events help <command>') shows a command's options;
'partner-events --version' (-v) prints the version.`;

async function main(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  if (name === '--version' || name === '-v') {
    writeLine(packageVersion());
    return 0;
  }
  if (name === 'help' && args[0] !== undefined) return helpFor(args[0]);
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    writeLine(USAGE);
    return name ? 0 : 2;
  }
  const command = COMMANDS[name];
  if (!command) {
    unknownCommand(name);
    return 2;
  }
  try {
    return await command.run(args);
  } catch (error) {
    if (error instanceof UsageError || error instanceof SpecError) {
      // One line and where to read more: the whole usage would bury the line that matters.
      process.stderr.write(
        `partner-events ${name}: ${printable(error.message)}\nsee 'partner-events ${name} --help'\n`,
      );
      return 2;
    }
    if (isPartnerEventsError(error)) {
      // Config and secret problems: a clear line with the code, then what caused it, no stack.
      const causes = causeLines(error).map((line) => `\n  cause: ${printable(line)}`);
      process.stderr.write(
        `partner-events ${name}: [${error.code}] ${printable(error.message)}${causes.join('')}\n`,
      );
      return 2;
    }
    throw error;
  }
}

/**
 * Any text of an error as it may reach the terminal: credentials removed (`redact`), then control
 * characters escaped. Every error line goes through it, usage errors too: they quote what was
 * typed or set in the environment (`--dedupe`, a stray argument), which may be a Redis URL with
 * its password or a URL with a `?code=` key.
 */
function printable(text: string): string {
  return terminalSafeLines(redact(text));
}

/** `help COMMAND`: the command's usage, as `COMMAND --help` prints it. */
function helpFor(topic: string): number {
  const command = COMMANDS[topic];
  if (!command) {
    unknownCommand(topic);
    return 2;
  }
  writeLine(command.usage);
  return 0;
}

function unknownCommand(name: string): void {
  const hint = didYouMean(name, Object.keys(COMMANDS), (c) => `"${c}"`);
  process.stderr.write(
    `partner-events: unknown command "${printable(name)}"${hint}\nsee 'partner-events --help'\n`,
  );
}

/** This package's version, from its package.json (two folders up from src/cli/ and from dist/cli/). */
function packageVersion(): string {
  const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return manifest.version;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    // Not a message of ours: it may quote a URL or a server's answer.
    const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
    process.stderr.write(`partner-events: ${printable(text)}\n`);
    process.exitCode = 1;
  },
);
