/**
 * A JSONL file as a source: `import { createFileSource } from 'partner-health-events/file'`; the
 * CLI's `file:PATH` (`run --source`, and `--to` appends to one).
 */
export {
  createFileSource,
  FILE_RETRY_BOUND,
  type FileMessage,
  type FileSource,
  type FileSourceStats,
} from './adapter.js';
export type { FileSourceOptions } from './options.js';
