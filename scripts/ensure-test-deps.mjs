// `npm test` runs every suite: the Redis suites need a real redis-server, the runbook test runs
// the runbook's commands, which use jq, the observability test checks the alert rules with
// promtool (Debian's prometheus package), the Event Hubs replay test makes a TLS certificate with
// openssl. On a fresh Debian-like machine where we are root, install what is missing; otherwise
// say how (those suites then skip locally, and CI, whose .ci/run installs them, fails instead).
import { spawnSync } from 'node:child_process';

// openssl has no --version flag: its `version` command answers instead.
const VERSION_ARGS = { openssl: ['version'] };
const has = (cmd) => spawnSync(cmd, VERSION_ARGS[cmd] ?? ['--version'], { stdio: 'ignore' }).status === 0;
const missing = ['redis-server', 'jq', 'promtool', 'openssl'].filter((cmd) => !has(cmd));
const PACKAGE_OF = { promtool: 'prometheus' };
const packages = missing.map((cmd) => PACKAGE_OF[cmd] ?? cmd);

if (missing.length > 0) {
  const root = process.getuid?.() === 0;
  if (root && has('apt-get')) {
    console.error(
      `[pretest] missing ${missing.join(', ')}: installing with apt-get for the suites that need them…`,
    );
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    const update = spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    const install =
      update.status === 0
        ? spawnSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...packages], {
            stdio: 'inherit',
            env,
          })
        : undefined;
    if (install?.status !== 0) {
      console.error(
        `[pretest] could not install ${missing.join(', ')}; the suites that need them will be skipped`,
      );
    }
  } else {
    console.error(
      `[pretest] ${missing.join(', ')} not installed: the suites that need them will be skipped. Install them (e.g. apt-get install ${packages.join(' ')}) to run them.`,
    );
  }
}
