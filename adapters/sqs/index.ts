/**
 * Amazon SQS as a source: `import { createSqsAdapter } from 'partner-health-events/sqs'`; the
 * CLI's `sqs:QUEUE_URL` or an AWS queue URL. Needs `@aws-sdk/client-sqs`.
 */
export { createSqsAdapter, type SqsAdapter, sqsSourceFromCli } from './adapter.js';
export { BatchEntryError } from './errors.js';
export type { SqsMessage } from './message.js';
export type { SqsAdapterOptions } from './options.js';
export { isSqsSourceSpec } from './url.js';
