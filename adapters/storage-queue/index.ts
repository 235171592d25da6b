/**
 * Azure Storage Queue as a source:
 * `import { createStorageQueueAdapter } from 'partner-health-events/storage-queue'`; the CLI's
 * `azure-storage-queue:QUEUE` or a queue URL. Needs `@azure/storage-queue` (and `@azure/identity`
 * to sign in without a SAS or connection string).
 */
export {
  createStorageQueueAdapter,
  type StorageQueueAdapter,
  type StorageQueueMessage,
  storageQueueSourceFromCli,
} from './adapter.js';
export { isStorageQueueSpec } from './cli.js';
export { type DecodedText, decodeMessageText, type EncodingHint, type MessageEncoding } from './encoding.js';
export {
  MAX_MESSAGES_PER_RECEIVE,
  MAX_VISIBILITY_SECONDS,
  type StorageQueueAdapterOptions,
} from './options.js';
export { CONNECTION_STRING_ENV, type StorageQueueTarget, type TokenCredential } from './queue-address.js';
