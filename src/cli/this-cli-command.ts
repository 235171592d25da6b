/**
 * The command line that starts this same CLI again, for the console's replay child: this Node
 * binary with its own flags (from source, `--import tsx`) and this entry script. Undefined when
 * the process has no entry script (`node -e`, a REPL).
 */
export function thisCliCommand(): readonly string[] | undefined {
  const main = process.argv[1];
  return main ? [process.execPath, ...process.execArgv, main] : undefined;
}

/** What the console says instead of a replay button when `thisCliCommand()` is undefined. */
export const NO_CLI_COMMAND = 'cannot tell how this process was started';
