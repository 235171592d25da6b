/**
 * The container image cannot be built here (no Docker engine on the CI machine), so what the
 * Dockerfile relies on is checked against the tree instead: the optional peers it installs are
 * the ones the sidecar can load, at ranges that hold the versions this suite ran with; its entry
 * point is a file the build writes; its Node is the one CI runs the suite on besides 20.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const dockerfile = readFileSync(new URL('../Dockerfile', import.meta.url), 'utf8');
const ciRun = readFileSync(new URL('../.ci/run', import.meta.url), 'utf8');
const tsupConfig = readFileSync(new URL('../tsup.config.ts', import.meta.url), 'utf8');
const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
  type: string;
  peerDependencies: Record<string, string>;
};

/**
 * Peers the image does without: those the sidecar never loads (the Azure Functions host, Lambda's
 * types), and `ws`, which Event Hubs over WebSockets loads only where Node has no WebSocket of its own.
 */
const NOT_IN_THE_IMAGE = new Set(['@azure/functions', '@types/aws-lambda', 'ws']);

/** `name@range` of the image's runtime install (the RUN line that installs with --omit=dev). */
function imagePeers(): Map<string, string> {
  const run = dockerfile.split(/\n(?=RUN |COPY |FROM |ENV |WORKDIR |USER |EXPOSE |ENTRYPOINT |CMD )/);
  const install = run.find((step) => step.includes('--omit=dev'));
  if (!install) throw new Error('no runtime install step (npm install --omit=dev) in the Dockerfile');
  const peers = new Map<string, string>();
  for (const [, name, range] of install.matchAll(/\s((?:@[\w.-]+\/)?[\w.-]+)@([\^~]?\d[\w.]*)/g)) {
    peers.set(name as string, range as string);
  }
  return peers;
}

function installedVersion(name: string): string {
  const url = new URL(`../node_modules/${name}/package.json`, import.meta.url);
  return (JSON.parse(readFileSync(url, 'utf8')) as { version: string }).version;
}

/** npm's meaning of `^x.y.z`, `~x.y.z` and `x.y.z`, the only forms the Dockerfile uses. */
function satisfies(version: string, range: string): boolean {
  const parts = (v: string) => v.split('.').map((n) => Number.parseInt(n, 10));
  const [major = 0, minor = 0, patch = 0] = parts(version);
  const [rMajor = 0, rMinor = 0, rPatch = 0] = parts(range.replace(/^[\^~]/, ''));
  const atLeast =
    major > rMajor || (major === rMajor && (minor > rMinor || (minor === rMinor && patch >= rPatch)));
  if (!atLeast) return false;
  if (range.startsWith('~') || (range.startsWith('^') && rMajor === 0)) {
    return major === rMajor && minor === rMinor;
  }
  if (range.startsWith('^')) return major === rMajor;
  return major === rMajor && minor === rMinor && patch === rPatch;
}

describe('the Dockerfile, checked against the tree (no Docker engine here to build it)', () => {
  it('the range checker reads ^, ~ and exact versions as npm does', () => {
    expect(satisfies('6.0.0', '^6')).toBe(true);
    expect(satisfies('7.0.0', '^6')).toBe(false);
    expect(satisfies('12.30.4', '~12.30.0')).toBe(true);
    expect(satisfies('12.31.0', '~12.30.0')).toBe(false);
    expect(satisfies('0.223.5', '^0.223.1')).toBe(true);
    expect(satisfies('0.224.0', '^0.223.1')).toBe(false);
    expect(satisfies('0.223.0', '^0.223.1')).toBe(false);
    expect(satisfies('2.0.0', '2.0.0')).toBe(true);
    expect(satisfies('2.0.1', '2.0.0')).toBe(false);
  });

  it('installs every optional peer the sidecar can load, and only declared peers', () => {
    const peers = imagePeers();
    const wanted = Object.keys(pkg.peerDependencies).filter((name) => !NOT_IN_THE_IMAGE.has(name));
    expect([...peers.keys()].sort()).toEqual(wanted.sort());
  });

  it("pins each peer to a range that holds the version this suite ran with (the lock's)", () => {
    const outside = [...imagePeers()]
      .map(([name, range]) => ({ name, range, installed: installedVersion(name) }))
      .filter(({ range, installed }) => !satisfies(installed, range));
    expect(outside).toEqual([]);
  });

  it('starts the CLI the build writes', () => {
    const entry = /ENTRYPOINT \["node", "\/app\/dist\/([\w/-]+)\.js"\]/.exec(dockerfile)?.[1];
    expect(entry).toBe('cli/main');
    // tsup writes the entry `cli/main` as ESM, which is `.js` in a "type": "module" package.
    expect(tsupConfig).toContain(`entry: { '${entry}': 'src/cli/main.ts' }`);
    expect(pkg.type).toBe('module');
  });

  it("runs on the Node that CI tests besides the machine's (both FROM lines)", () => {
    const froms = [...dockerfile.matchAll(/^FROM node:(\d+)-slim/gm)].map((m) => m[1]);
    const tested = /scripts\/test-on-node\.sh (\d+)/.exec(ciRun)?.[1];
    expect(froms).toHaveLength(2);
    expect(new Set(froms)).toEqual(new Set([tested]));
  });
});
