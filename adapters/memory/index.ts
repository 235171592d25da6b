/**
 * The in-process queue: `import { createMemorySource } from 'partner-health-events/memory'` (also
 * in `partner-health-events/testing`). For tests, benchmarks, demos and library users' own unit
 * tests; no CLI spec names it (it lives in one process).
 */
export { createMemorySource, type MemoryMessage, type MemorySource, type SettledMessage } from './adapter.js';
export type { MemorySourceOptions } from './options.js';
