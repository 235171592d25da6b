/**
 * The stand-in transport, laid out as every adapter is (docs/adapters/writing-an-adapter.md):
 * index.ts (this public face), adapter.ts, options.ts, sender.ts, cli.ts (the descriptor).
 */
export { createStandInSource, type StandInMessage, type StandInSource } from './adapter.js';
export type { StandInOptions } from './options.js';
export { standInTarget } from './sender.js';
