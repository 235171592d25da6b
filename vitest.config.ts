import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { SUBPATHS, specifierOf } from './subpaths.js';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

export default defineConfig({
  resolve: {
    // Each subpath of the package to its source (subpaths.ts); the longest first, so that the
    // root's alias does not take `partner-health-events/testing` by its prefix.
    alias: Object.entries(SUBPATHS)
      .sort(([a], [b]) => b.length - a.length)
      .map(([subpath, { source }]) => ({ find: specifierOf(subpath), replacement: here(`./${source}`) })),
  },
  test: {
    // examples/ holds partner-facing example tests: they run too, so they keep working.
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    // Type tests (`*.test-d.ts`) run through tsc: a wrong handler type fails `npm test`.
    typecheck: { enabled: true, include: ['test/**/*.test-d.ts'], tsconfig: './tsconfig.json' },
    // Vitest's default is one file at a time on 2 cores (cores − 1). Most files wait on child
    // processes and local servers, not the CPU: two at once roughly halve the suite's time on a
    // 2-vCPU machine (docs/testing.md has the figures).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // Builds the CLI once for the suites that spawn it (test/support/global-setup.ts).
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 20_000,
    hookTimeout: 30_000,
  },
});
