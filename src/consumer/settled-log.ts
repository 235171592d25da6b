import type { Logger } from 'pino';
import type { RawMessage } from '../core/source-adapter.js';
import type { ProcessResult } from './pipeline.js';

/** One log line per settled message: info for an ack, warn for a retry, error for a dead event. */
export function logSettled(logger: Logger, result: ProcessResult, message: RawMessage): void {
  const { outcome } = result;
  const level = outcome.kind === 'ack' ? 'info' : outcome.kind === 'retry' ? 'warn' : 'error';
  if (!logger.isLevelEnabled(level)) return; // build nothing for a quiet logger
  const fields = {
    event_id: result.eventId,
    event_type: result.eventType,
    key_id: result.keyId,
    message_id: message.id,
    attempt: result.attempt,
    latency_ms: Math.round(result.durationMs * 100) / 100,
  };
  if (outcome.kind === 'ack') {
    logger.info({ ...fields, outcome: outcome.result }, 'event acked');
  } else if (outcome.kind === 'retry') {
    const { code, reason, delayMs } = outcome;
    logger.warn({ ...fields, outcome: 'retry', code, reason, delay_ms: delayMs }, 'event will be retried');
  } else {
    const { code, reason } = outcome;
    logger.error({ ...fields, outcome: 'dead', code, reason }, 'event dead-lettered');
  }
}
