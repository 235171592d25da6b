import { defineConfig } from 'tsup';

export default defineConfig([
  {
    entry: {
      index: 'src/index.ts',
      testing: 'src/consumer/testing.ts',
      sidecar: 'src/sidecar/index.ts',
      'adapters/memory': 'adapters/memory/index.ts',
      'adapters/file': 'adapters/file/index.ts',
      'adapters/http': 'adapters/http/index.ts',
      'adapters/sqs': 'adapters/sqs/index.ts',
      'adapters/storage-queue': 'adapters/storage-queue/index.ts',
      'adapters/event-hubs': 'adapters/event-hubs/index.ts',
      'dedupe/redis': 'src/dedupe/redis.ts',
    },
    // Optional peers stay imports: the core never loads them.
    external: [
      'ioredis',
      '@aws-sdk/client-sqs',
      '@azure/storage-queue',
      '@azure/identity',
      '@azure/event-hubs',
      '@azure/eventhubs-checkpointstore-blob',
      '@azure/storage-blob',
    ],
    format: ['esm', 'cjs'],
    dts: true,
    clean: true,
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
