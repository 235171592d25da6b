/**
 * Handlers for the `partner-events run --handlers` child of the secrets suite. They log through
 * the handler's logger and fail on purpose for some events, so that every kind of output — info
 * and error logs, handler errors, retries, dead letters — is produced and can be searched.
 *
 *   event ids starting with `fail-`: the handler throws (HANDLER_FAILED, retried)
 *   event ids starting with `dead-`: the handler asks for a dead letter (DeadLetterError)
 */

import type { Consumer } from '../../../src/consumer/consumer.js';
import { DeadLetterError } from '../../../src/core/errors.js';

export default function register(consumer: Consumer): void {
  consumer.on('*', (event, context) => {
    context.logger.info({ key_id: context.keyId, attempt: context.attempt }, 'handler got the event');
    if (event.event_id.startsWith('fail-'))
      throw new Error(`handler failed on purpose for ${event.event_id}`);
    if (event.event_id.startsWith('dead-')) throw new DeadLetterError(`handler gave up on ${event.event_id}`);
  });
  consumer.onUnknown((event, context) => {
    context.logger.warn({ event_type: event.event_type }, 'unknown event type handled');
  });
}
