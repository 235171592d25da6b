/**
 * `partner-health-events`: the library. A consumer that verifies, de-duplicates, types and
 * dispatches the Partner Health API's signed events, with the core it is built on. What only the
 * sidecar needs (config files, forwarding, the ops server, metrics) is under
 * `partner-health-events/sidecar`, so importing this entry never loads prom-client or yaml.
 */
export {
  type Consumer,
  type ConsumerOptions,
  type ConsumerState,
  type ConsumerStatus,
  createConsumer,
  type SettledReport,
} from './consumer/consumer.js';
export {
  createJsonlDeadLetters,
  type DeadLetterSink,
  type JsonlDeadLetterSink,
} from './consumer/dead-letter-sink.js';
export type { ProcessResult, StoreContact } from './consumer/pipeline.js';
export type { EventPattern, EventsFor, Handler, HandlerContext } from './consumer/router.js';
export {
  type ConsumerSettings,
  type ConsumerSettingsInput,
  consumerSettingsSchema,
} from './consumer/settings.js';
export {
  type DeadLetterRecord,
  isDeadLetterRecord,
  isTruncatedDeadLetter,
  rawOfDeadLetter,
} from './core/dead-letter-record.js';
export { DEFAULT_MAX_ENVELOPE_BYTES, type Envelope, parseEnvelope } from './core/envelope.js';
export {
  AdapterError,
  ConfigError,
  DeadLetterError,
  DedupeUnavailableError,
  ERROR_CODES,
  type ErrorCode,
  isPartnerEventsError,
  PartnerEventsError,
  RetryLaterError,
  VERIFICATION_CODES,
  type VerificationCode,
  VerificationError,
} from './core/errors.js';
export {
  EVENT_TYPES,
  type EventMap,
  type EventType,
  eventSchemas,
  isKnownEventType,
  type PartnerEvent,
  type UnknownEvent,
} from './core/events/index.js';
export { createLogger, silentLogger } from './core/logger.js';
export { type AckResult, DEFAULT_RETRY_POLICY, type Outcome, type RetryPolicy } from './core/outcome.js';
export {
  Keyring,
  type ReadSecretsFileOptions,
  readSecretsFile,
  type SecretsReloadOptions,
  type SigningSecret,
  secretsFromEnv,
  watchSecrets,
} from './core/secrets.js';
export { matchSignature, sign } from './core/signature.js';
export type { RawMessage, SourceAdapter } from './core/source-adapter.js';
export { type VerifiedMessage, type VerifyOptions, verifyMessage } from './core/verify.js';
export {
  type BatchCallOptions,
  type ClaimResult,
  createMemoryDedupe,
  createSqliteDedupe,
  DEFAULT_LEASE_MS,
  DEFAULT_RETENTION_MS,
  type DedupePersistence,
  type DedupeState,
  type DedupeStore,
  type HeldClaim,
  type MemoryDedupeOptions,
  type MemoryDedupeStore,
  type SqliteDedupeOptions,
  type SqliteDedupeStore,
} from './dedupe/index.js';
