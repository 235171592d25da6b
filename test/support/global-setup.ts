import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { build, type Options } from 'tsup';
import type { TestProject } from 'vitest/node';
import tsupConfig from '../../tsup.config.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The CLI bundle built for this run (`inject('cliMain')`; test/support/cli.ts reads it). */
    cliMain: string;
  }
}

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
// One level under the root, as dist/ is: the CLI reads `../../package.json` from its own file.
// One directory per run, so that two runs in one checkout never build over each other's CLI.
const OUT_DIR = `${ROOT}.tmp/cli-${process.pid}`;

/** tsup.config.ts's CLI entry (the published `bin`), as it is. */
function cliOptions(): Options {
  const configs = Array.isArray(tsupConfig) ? tsupConfig : [];
  const cli = configs.find((c: Options) => !Array.isArray(c.entry) && c.entry?.['cli/main'] !== undefined);
  if (cli === undefined) throw new Error('tsup.config.ts has no cli/main entry');
  return cli;
}

/**
 * Builds the CLI once per test run (under a second) with the options of the published one: the
 * tests that spawn `partner-events` then start it in about half the time tsx takes (0.45 against
 * 1.0 s here, and some files spawn it dozens of times), and they run what users run.
 */
async function buildCli(): Promise<string> {
  rmSync(OUT_DIR, { recursive: true, force: true });
  await build({
    ...cliOptions(),
    entry: { main: 'src/cli/main.ts' },
    outDir: OUT_DIR,
    config: false,
    silent: true,
  });
  return `${OUT_DIR}/main.js`;
}

export default async function setup(project: TestProject) {
  project.provide('cliMain', await buildCli());
  // In watch mode the source may have changed since: build again before each rerun.
  project.onTestsRerun(async () => {
    await buildCli();
  });
  return () => rmSync(OUT_DIR, { recursive: true, force: true });
}
