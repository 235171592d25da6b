/**
 * The package's subpaths, once: `import … from 'partner-health-events<subpath>'` resolves to
 * `source` in this repository and to `dist/<dist>.{js,cjs,d.ts,d.cts}` once built. tsup's entries
 * and vitest's aliases are derived from this table; package.json `exports` and tsconfig.json
 * `paths` are JSON, so test/subpaths.test.ts checks them against it (and prints what to paste).
 */
export const SUBPATHS = {
  '.': { source: 'src/index.ts', dist: 'index' },
  './testing': { source: 'src/consumer/testing.ts', dist: 'testing' },
  './sidecar': { source: 'src/sidecar/index.ts', dist: 'sidecar' },
  './memory': { source: 'adapters/memory/index.ts', dist: 'adapters/memory' },
  './file': { source: 'adapters/file/index.ts', dist: 'adapters/file' },
  './http': { source: 'adapters/http/index.ts', dist: 'adapters/http' },
  './sqs': { source: 'adapters/sqs/index.ts', dist: 'adapters/sqs' },
  './storage-queue': { source: 'adapters/storage-queue/index.ts', dist: 'adapters/storage-queue' },
  './event-hubs': { source: 'adapters/event-hubs/index.ts', dist: 'adapters/event-hubs' },
  './redis': { source: 'src/dedupe/redis.ts', dist: 'dedupe/redis' },
  './lambda': { source: 'src/serverless/lambda.ts', dist: 'serverless/lambda' },
  './azure-functions': { source: 'src/serverless/azure-functions.ts', dist: 'serverless/azure-functions' },
} as const satisfies Record<string, { readonly source: string; readonly dist: string }>;

export const PACKAGE_NAME = 'partner-health-events';

export type Subpath = keyof typeof SUBPATHS;

/** The import specifier of a subpath: `.` → `partner-health-events`, `./sqs` → `partner-health-events/sqs`. */
export function specifierOf(subpath: string): string {
  return `${PACKAGE_NAME}${subpath.slice(1)}`;
}

/** tsup's `entry`: output name (under dist/) → source file. */
export function tsupEntries(): Record<string, string> {
  return Object.fromEntries(Object.values(SUBPATHS).map(({ source, dist }) => [dist, source]));
}
