// `npm test` runs every suite, and the Redis suites need a real redis-server. On a fresh
// Debian-like machine where we are root, install it; otherwise say how (the suites then skip
// locally, and fail in CI, where .ci/run installs it).
import { spawnSync } from 'node:child_process';

const has = (cmd) => spawnSync(cmd, ['--version'], { stdio: 'ignore' }).status === 0;

if (!has('redis-server')) {
  const root = process.getuid?.() === 0;
  if (root && has('apt-get')) {
    console.error('[pretest] redis-server is missing: installing it with apt-get for the Redis suites…');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    const update = spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    const install =
      update.status === 0
        ? spawnSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'redis-server'], {
            stdio: 'inherit',
            env,
          })
        : undefined;
    if (install?.status !== 0) {
      console.error('[pretest] could not install redis-server; Redis suites will be skipped');
    }
  } else {
    console.error(
      '[pretest] redis-server is not installed: the Redis suites will be skipped. Install it (e.g. apt-get install redis-server) to run them.',
    );
  }
}
