/**
 * An empty project with this package's packed tarball installed in it, as a partner would have it
 * before the package is published, and without the network: `npm ci --offline` from a lock file
 * written here. An empty project's `npm install --offline ./x.tgz` fails (ENOTCACHED): npm would
 * need the registry's package documents to resolve `pino@^10`, and `npm ci` caches only tarballs.
 * So the lock names the tarball, plus this repository's locked versions of the package's
 * dependencies with their registry URLs and integrity, which npm then takes from its cache by
 * integrity (the cache that `npm ci` filled on this machine, or on a fresh CI machine).
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

interface LockEntry {
  name?: string;
  version?: string;
  resolved?: string;
  integrity?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  link?: boolean;
  [field: string]: unknown;
}

interface PackedFile {
  readonly filename: string;
  readonly integrity: string;
  readonly files: readonly { path: string }[];
}

export interface PackedProject {
  /** The project's directory: package.json, package-lock.json, the tarball, node_modules. */
  readonly dir: string;
  /** Where the package was installed: node_modules/partner-health-events. */
  readonly packageDir: string;
  /** The files in the tarball, as `npm pack` listed them. */
  readonly packedFiles: readonly string[];
  /** The environment to run npm and npx in there: offline, without this repository's npm_* variables. */
  readonly env: NodeJS.ProcessEnv;
}

/**
 * Packs `root` (its dist/ must be built: `--ignore-scripts` skips prepack) into `dir`, then
 * installs the tarball there from the npm cache only.
 */
export function installPackedTarball(root: string, dir: string): PackedProject {
  const env = offlineNpmEnv();
  const [packed] = JSON.parse(
    execFileSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], {
      cwd: root,
      env,
      encoding: 'utf8',
    }),
  ) as PackedFile[];
  if (!packed) throw new Error('npm pack printed no tarball');
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as LockEntry & {
    name: string;
  };
  const tarball = `file:${packed.filename}`;
  writeFileSync(
    join(dir, 'package.json'),
    `${JSON.stringify({ name: 'packed-install-probe', private: true, type: 'module', dependencies: { [manifest.name]: tarball } }, null, 2)}\n`,
  );
  writeFileSync(
    join(dir, 'package-lock.json'),
    `${JSON.stringify(lockFor(root, manifest, tarball, packed.integrity), null, 2)}\n`,
  );
  // Scripts are skipped: the package has none to run on install (package.test.ts), and
  // better-sqlite3 12's would build from source (minutes) or download (no network here).
  execFileSync('npm', ['ci', '--offline', '--ignore-scripts', '--no-audit', '--no-fund'], {
    cwd: dir,
    env,
    stdio: 'pipe',
  });
  const packageDir = join(dir, 'node_modules', manifest.name);
  copySqliteBinding(root, dir);
  return { dir, packageDir, packedFiles: packed.files.map((f) => f.path), env };
}

/** The lock of a project whose one dependency is the tarball. */
function lockFor(root: string, manifest: LockEntry & { name: string }, tarball: string, integrity: string) {
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, LockEntry>;
  };
  const registry = execFileSync('npm', ['config', 'get', 'registry'], {
    env: offlineNpmEnv(),
    encoding: 'utf8',
  })
    .trim()
    .replace(/\/?$/, '/');
  const packages: Record<string, LockEntry> = {
    '': { name: 'packed-install-probe', dependencies: { [manifest.name]: tarball } },
    [`node_modules/${manifest.name}`]: {
      resolved: tarball,
      integrity,
      ...pick(manifest, [
        'version',
        'license',
        'dependencies',
        'optionalDependencies',
        'peerDependencies',
        'peerDependenciesMeta',
        'bin',
        'engines',
      ]),
    },
  };
  // The dependencies' closure, at the same paths as in this repository's tree: each requirement
  // resolves as Node resolves it, from the requiring package's folder upwards.
  const pending: [from: string, entry: LockEntry][] = [['', manifest]];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [from, entry] = next;
    const optionalPeers = entry.peerDependenciesMeta ?? {};
    const wanted = [
      ...Object.keys(entry.dependencies ?? {}),
      ...Object.keys(entry.optionalDependencies ?? {}),
      ...Object.keys(entry.peerDependencies ?? {}).filter((name) => !optionalPeers[name]?.optional),
    ];
    for (const name of wanted) {
      const at = resolveIn(lock.packages, from, name);
      if (at === undefined || packages[at]) continue; // an optional one this platform lacks
      const locked = lock.packages[at] as LockEntry;
      const { dev: _dev, devOptional: _devOptional, optional: _optional, peer: _peer, ...kept } = locked;
      const realName = locked.name ?? name;
      packages[at] = {
        ...kept,
        resolved: locked.resolved ?? `${registry}${realName}/-/${basename(realName)}-${locked.version}.tgz`,
      };
      pending.push([at, locked]);
    }
  }
  return { name: 'packed-install-probe', lockfileVersion: 3, requires: true, packages };
}

function pick(entry: LockEntry, fields: readonly string[]): LockEntry {
  return Object.fromEntries(fields.filter((f) => entry[f] !== undefined).map((f) => [f, entry[f]]));
}

function resolveIn(packages: Record<string, LockEntry>, from: string, name: string): string | undefined {
  let dir = from;
  for (;;) {
    const candidate = `${dir ? `${dir}/` : ''}node_modules/${name}`;
    if (packages[candidate]) return candidate;
    if (!dir) return undefined;
    const up = dir.lastIndexOf('node_modules/');
    dir = up <= 0 ? '' : dir.slice(0, up - 1);
  }
}

/**
 * better-sqlite3 12 (the kit's SQLite on Node 20) has its binding built by an install script,
 * which `--ignore-scripts` skipped: take the one this checkout's install built, for the same
 * version. (better-sqlite3 13, for Node >= 22, ships prebuilt bindings and needs nothing.)
 */
function copySqliteBinding(root: string, dir: string): void {
  const relative = join('node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
  const built = join(root, relative);
  const target = join(dir, relative);
  if (!existsSync(built) || !existsSync(dirname(dirname(dirname(target))))) return;
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(built, target);
}

/**
 * This process's environment without npm's variables (under `npm test` they name this
 * repository's project and config), offline, and with no prompt to install a missing package.
 */
export function offlineNpmEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^npm_/i.test(key) && key !== 'INIT_CWD') env[key] = value;
  }
  return {
    ...env,
    npm_config_offline: 'true',
    npm_config_yes: 'false',
    npm_config_update_notifier: 'false',
    ...extra,
  };
}
