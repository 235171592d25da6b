export { CONSOLE_TOKEN_ENV, type ConsoleOptions, ConsoleServer } from './console-server.js';
export {
  DeadLetterIndex,
  type LetterFilter,
  type LetterPage,
  type LetterSummary,
} from './dead-letter-index.js';
export { type LetterDetail, letterDetail } from './letter-detail.js';
export { type LiveSnapshot, LiveStats } from './live-stats.js';
export { type ConsoleReplayCommand, type ReplayJob, ReplayJobs } from './replay-jobs.js';
