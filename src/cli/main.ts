import { isPartnerEventsError } from '../core/errors.js';
import { redact } from '../core/redact.js';
import { SpecError } from '../core/transport.js';
import { UsageError, writeLine } from './common.js';
import { DEMO_USAGE, demoCommand } from './demo.js';
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
  replay   re-drive dead events from a JSONL file, safely (to your app or back onto a queue)
  trigger  send one signed sample event of a catalog type to a queue, an ingress or a file
  simulate the publisher, locally: signed traffic with duplicates, retries, forgeries
  demo     the whole pipeline locally, no cloud needed (what 'npm start' runs)

'partner-events <command> --help' shows a command's options.`;

async function main(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    writeLine(USAGE);
    return name ? 0 : 2;
  }
  const command = COMMANDS[name];
  if (!command) {
    process.stderr.write(`partner-events: unknown command "${name}"\n\n${USAGE}\n`);
    return 2;
  }
  try {
    return await command.run(args);
  } catch (error) {
    if (error instanceof UsageError || error instanceof SpecError) {
      process.stderr.write(
        `partner-events ${name}: ${terminalSafeLines(error.message)}\n\n${command.usage}\n`,
      );
      return 2;
    }
    if (isPartnerEventsError(error)) {
      // Config and secret problems: a clear line with the code, then what caused it, no stack.
      const causes = causeLines(error).map((line) => `\n  cause: ${terminalSafeLines(line)}`);
      process.stderr.write(
        `partner-events ${name}: [${error.code}] ${terminalSafeLines(error.message)}${causes.join('')}\n`,
      );
      return 2;
    }
    throw error;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    // Not a message of ours: it may quote a URL or a server's answer.
    const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
    process.stderr.write(`partner-events: ${terminalSafeLines(redact(text))}\n`);
    process.exitCode = 1;
  },
);
