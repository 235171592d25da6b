import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The layers of docs/concepts.md ("Map of the code"): each may import only from itself and the
// layers listed for it. An import that points up (or sideways into a layer not listed) fails.
const ROOT = fileURLToPath(new URL('..', import.meta.url));

const MAY_IMPORT: Readonly<Record<string, readonly string[]>> = {
  'src/core': ['src/core'],
  'src/dedupe': ['src/dedupe', 'src/core'],
  'src/consumer': ['src/consumer', 'src/dedupe', 'src/core'],
  'src/sidecar': ['src/sidecar', 'src/transports.ts', 'src/consumer', 'src/dedupe', 'src/core'],
  'src/cli': ['src/cli', 'src/transports.ts', 'src/sidecar', 'src/consumer', 'src/dedupe', 'src/core'],
  // The serverless wrappers (the ./lambda and ./azure-functions subpaths) sit on the library and
  // reuse an adapter's sender for a dead-letter queue or poison copy.
  'src/serverless': ['src/serverless', 'adapters', 'src/consumer', 'src/dedupe', 'src/core'],
  adapters: ['adapters', 'src/core'],
  // The registry: one descriptor (adapters/<name>/cli.ts) per transport, which loads its adapter
  // only when opened.
  'src/transports.ts': ['adapters', 'src/core'],
};

/** Packages that only the layers named may load (the root entry must stay light). */
const PACKAGE_HOMES: Readonly<Record<string, readonly string[]>> = {
  'prom-client': ['src/sidecar'],
  yaml: ['src/sidecar'],
  ioredis: ['src/dedupe'],
  // The OpenTelemetry SDK: only the sidecar's exporter loads it (the kit never does for a library).
  '@opentelemetry/sdk-trace-base': ['src/sidecar'],
  '@opentelemetry/exporter-trace-otlp-http': ['src/sidecar'],
  '@opentelemetry/resources': ['src/sidecar'],
};

/**
 * Imports of adapters/ from src/ outside the transport registry (src/transports.ts, the one way
 * in), each for a reason written at the import: the in-process memory queue of the demo and of
 * `./testing`. None loads an SDK. This list may only shrink.
 */
const ADAPTER_IMPORTS_OUTSIDE_REGISTRY = new Set(['src/cli/demo.ts', 'src/consumer/testing.ts']);

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => relative(ROOT, join(entry.parentPath, entry.name)));
}

function importsOf(file: string): string[] {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const specs: string[] = [];
  for (const match of text.matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)) {
    if (match[1]) specs.push(match[1]);
  }
  return specs;
}

function layerOf(path: string): string | undefined {
  if (path === 'src/transports.ts') return 'src/transports.ts';
  return Object.keys(MAY_IMPORT).find((layer) => path === layer || path.startsWith(`${layer}/`));
}

describe('the layers of the tree', () => {
  const files = [...sourceFiles('src'), ...sourceFiles('adapters')];

  it('finds the code (a positive control)', () => {
    expect(files).toContain('src/core/verify.ts');
    expect(files).toContain('src/consumer/consumer.ts');
    expect(files.length).toBeGreaterThan(50);
  });

  it('every relative import points down or within its layer', () => {
    const wrong: string[] = [];
    for (const file of files) {
      const from = layerOf(file);
      if (!from) continue; // entries (src/index.ts) and the registry may import any layer
      for (const spec of importsOf(file)) {
        if (!spec.startsWith('.')) continue;
        const target = normalize(join(dirname(file), spec));
        const to = layerOf(target);
        if (to === undefined) continue;
        if (to === 'adapters' && from !== 'adapters' && ADAPTER_IMPORTS_OUTSIDE_REGISTRY.has(file)) continue;
        if (!MAY_IMPORT[from]?.includes(to)) wrong.push(`${file} → ${target}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('heavy packages load only where they belong', () => {
    const wrong: string[] = [];
    for (const file of files) {
      for (const spec of importsOf(file)) {
        const homes = PACKAGE_HOMES[spec];
        if (homes && !homes.some((home) => file.startsWith(`${home}/`))) wrong.push(`${file} → ${spec}`);
      }
    }
    expect(wrong).toEqual([]);
  });
});
