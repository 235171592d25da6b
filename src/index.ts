export type { RawMessage, SourceAdapter } from './adapter.js';
export {
  type ConsumerSettings,
  type ConsumerSettingsInput,
  consumerSettingsSchema,
  parseSettings,
} from './config.js';
export {
  type DeadLetterRecord,
  type DeadLetterRecordOptions,
  type DeadLetterSink,
  deadLetterRecord,
  isDeadLetterRecord,
  isTruncatedDeadLetter,
  JsonlDeadLetterSink,
  jsonlDeadLetters,
  rawOfDeadLetter,
} from './dead-letter.js';
export {
  type ClaimResult,
  DEFAULT_LEASE_MS,
  DEFAULT_RETENTION_MS,
  type DedupeState,
  type DedupeStore,
  MemoryDedupeStore,
  memoryDedupe,
  type SqliteDedupeOptions,
  SqliteDedupeStore,
  sqliteDedupe,
} from './dedupe/index.js';
export { DEFAULT_MAX_ENVELOPE_BYTES, type Envelope, parseEnvelope } from './envelope.js';
export {
  AdapterError,
  ConfigError,
  DeadLetterError,
  DedupeUnavailableError,
  ERROR_CODES,
  type ErrorCode,
  isPartnerEventsError,
  PartnerEventsError,
  PayloadValidationError,
  RetryLaterError,
  VERIFICATION_CODES,
  type VerificationCode,
  VerificationError,
} from './errors.js';
export {
  EVENT_TYPES,
  type EventMap,
  type EventType,
  eventSchemas,
  isKnownEventType,
  type PartnerEvent,
  type UnknownEvent,
} from './events/index.js';
export { createForwarder, type ForwardOptions } from './forward.js';
export { createLogger, silentLogger } from './logger.js';
export { ConsumerMetrics } from './metrics.js';
export { type OpsServer, type OpsServerOptions, type ReadinessCheck, startOpsServer } from './ops.js';
export {
  type AckResult,
  backoffDelay,
  DEFAULT_RETRY_POLICY,
  decide,
  isPermanent,
  type Outcome,
  type RetryPolicy,
} from './outcome.js';
export type { ProcessResult } from './pipeline.js';
export type { EventPattern, EventsFor, Handler, HandlerContext } from './router.js';
export {
  Keyring,
  type ReadSecretsFileOptions,
  readSecretsFile,
  type SecretsReloadOptions,
  type SigningSecret,
  secretsFromEnv,
  watchSecrets,
} from './secrets.js';
export { matchSignature, sign } from './signature.js';
export { type VerifiedMessage, type VerifyOptions, verifyMessage } from './verify.js';
export {
  Consumer,
  type ConsumerOptions,
  type ConsumerState,
  type ConsumerStatus,
  createConsumer,
  type SettledReport,
} from './worker.js';
export {
  configFromEnv,
  configFromFile,
  envName,
  resolveWorkerConfig,
  type WorkerConfig,
  type WorkerConfigInput,
  workerConfigSchema,
} from './worker-config.js';
