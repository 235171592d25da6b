import { defineConfig } from 'tsup';
import { tsupEntries } from './subpaths.js';

export default defineConfig([
  {
    // One entry per subpath of the package (subpaths.ts).
    entry: tsupEntries(),
    // Optional peers stay imports: the core never loads them.
    external: [
      'ioredis',
      '@aws-sdk/client-sqs',
      '@azure/storage-queue',
      '@azure/identity',
      '@azure/event-hubs',
      '@azure/eventhubs-checkpointstore-blob',
      '@azure/storage-blob',
      '@azure/functions',
      // Loaded with require / import() when present: never bundled.
      '@opentelemetry/api',
      '@opentelemetry/sdk-trace-base',
      '@opentelemetry/exporter-trace-otlp-http',
      '@opentelemetry/resources',
      'ws',
    ],
    format: ['esm', 'cjs'],
    // import.meta.url in the CommonJS build (src/core/sqlite-driver.ts loads better-sqlite3 with createRequire).
    shims: true,
    dts: true,
    clean: true,
    // Maps with the TypeScript inside them (esbuild's sourcesContent): src/ is not shipped, and
    // `node --enable-source-maps` or a debugger still shows the kit's own lines.
    sourcemap: true,
    target: 'node20',
  },
  {
    entry: { 'cli/main': 'src/cli/main.ts' },
    format: ['esm'],
    sourcemap: true,
    target: 'node20',
    banner: { js: '#!/usr/bin/env node' },
  },
]);
