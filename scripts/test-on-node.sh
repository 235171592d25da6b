#!/usr/bin/env bash
# Runs the README's test command (`npm test`) on another Node version, e.g.
#
#   scripts/test-on-node.sh 24                      # the whole suite on the newest Node 24
#   scripts/test-on-node.sh 24 test/dedupe.test.ts  # arguments after the version go to vitest
#
# Node comes from the npm registry's build of Node itself (`node-<os>-<cpu>@VERSION`: bin/node and
# the include/node headers), cached under $PHE_NODE_CACHE (default ~/.cache/partner-health-events).
# The checkout (tracked and untracked files, as they are on disk, without node_modules, dist and
# .git) is copied to a work directory and installed there with that Node, native modules rebuilt
# against its headers: this checkout's node_modules is never touched, and neither run sees the
# other's binaries. The work directory is temporary, unless PHE_NODE_WORKDIR names one to keep
# (then `npm ci` runs again only when the lock file or the Node version changed).
# .ci/run runs the suite this way; so can a developer, with the same result.
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 NODE_VERSION [vitest arguments...]   (e.g. $0 24)" >&2
  exit 2
fi
version="$1"
shift
repo="$(cd "$(dirname "$0")/.." && pwd)"

case "$(uname -s)" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  *) echo "$0: no registry build of Node for $(uname -s)" >&2; exit 2 ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) cpu=x64 ;;
  aarch64 | arm64) cpu=arm64 ;;
  *) echo "$0: no registry build of Node for $(uname -m)" >&2; exit 2 ;;
esac

# Node itself: `npm pack` resolves the version (24 → the newest 24.x) and fetches the tarball.
cache="${PHE_NODE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/partner-health-events}"
mkdir -p "$cache"
tarball="$(cd "$cache" && npm pack --silent "node-$os-$cpu@$version" | tail -n 1)"
if [ -z "$tarball" ] || [ ! -f "$cache/$tarball" ]; then
  echo "$0: could not fetch node-$os-$cpu@$version from the npm registry" >&2
  exit 1
fi
node_dir="$cache/${tarball%.tgz}"
if [ ! -x "$node_dir/bin/node" ]; then
  rm -rf "$node_dir.partial"
  mkdir -p "$node_dir.partial"
  tar -xzf "$cache/$tarball" -C "$node_dir.partial" --strip-components=1
  mv "$node_dir.partial" "$node_dir"
fi
rm -f "$cache/$tarball"

# The copy of the checkout.
if [ -n "${PHE_NODE_WORKDIR:-}" ]; then
  work="$PHE_NODE_WORKDIR"
  mkdir -p "$work"
  find "$work" -mindepth 1 -maxdepth 1 ! -name node_modules ! -name .installed -exec rm -rf {} +
else
  work="$(mktemp -d "${TMPDIR:-/tmp}/phe-node$version.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
fi
(
  cd "$repo"
  # Tracked and untracked (not ignored) files that exist: a test run sees uncommitted edits too.
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar -cf - --null -T -
) | tar -xf - -C "$work"

export PATH="$node_dir/bin:$PATH"
# node-gyp builds native modules (better-sqlite3) against these headers, without a download.
export npm_config_nodedir="$node_dir"
cd "$work"
echo "[test-on-node] node $(node --version) ($node_dir), npm $(npm --version), in $work"

stamp="$(node --version) $(sha256sum package-lock.json | cut -d' ' -f1)"
if [ ! -d node_modules ] || [ "$(cat .installed 2>/dev/null)" != "$stamp" ]; then
  rm -rf node_modules .installed
  # As in .ci/run: `npm install` (locked versions) when a mirror's lock file makes `npm ci` refuse.
  npm ci --no-audit --no-fund || npm install --no-audit --no-fund
  echo "$stamp" >.installed
fi
npm test -- "$@"
