import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

export default defineConfig({
  resolve: {
    alias: {
      'partner-health-events/testing': here('./src/consumer/testing.ts'),
      'partner-health-events/sidecar': here('./src/sidecar/index.ts'),
      'partner-health-events/memory': here('./adapters/memory/index.ts'),
      'partner-health-events/file': here('./adapters/file/index.ts'),
      'partner-health-events/http': here('./adapters/http/index.ts'),
      'partner-health-events/redis': here('./src/dedupe/redis.ts'),
      'partner-health-events/sqs': here('./adapters/sqs/index.ts'),
      'partner-health-events/storage-queue': here('./adapters/storage-queue/index.ts'),
      'partner-health-events/event-hubs': here('./adapters/event-hubs/index.ts'),
      'partner-health-events': here('./src/index.ts'),
    },
  },
  test: {
    // examples/ holds partner-facing example tests: they run too, so they keep working.
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    // Type tests (`*.test-d.ts`) run through tsc: a wrong handler type fails `npm test`.
    typecheck: { enabled: true, include: ['test/**/*.test-d.ts'], tsconfig: './tsconfig.json' },
    testTimeout: 20_000,
    hookTimeout: 30_000,
  },
});
