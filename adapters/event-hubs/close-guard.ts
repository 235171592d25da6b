import type { Logger } from 'pino';
import { errorMessage } from '../../src/core/errors.js';

/**
 * How long after a close the guard stays: the SDK's stray promise can reject once the close
 * itself has resolved (a link attach answered after it).
 */
export const CLOSE_GUARD_GRACE_MS = 2000;

let guards = 0;
let guardLogger: Logger | undefined;

/**
 * Closing an Event Hubs client while one of its links is being attached (a partition the
 * service just refused, a reader the SDK is re-creating) can leave a promise inside the SDK
 * rejected with nobody to handle it: rhea-promise's `createReceiver`, which the SDK stopped
 * waiting for (Azure/azure-sdk-for-js#36230, open). Node then ends the process: a replay that
 * was finishing cleanly exits without its summary, a worker that was draining dies.
 *
 * While `close` runs, and `CLOSE_GUARD_GRACE_MS` after, such a rejection (an AMQP error, see
 * `isAmqpError`) is logged as a warning instead. Any other unhandled rejection is thrown on, as
 * Node would have: the guard hides nothing of the kit's own.
 */
export async function closeGuarded<T>(logger: Logger, close: () => Promise<T>): Promise<T> {
  if (guards++ === 0) process.on('unhandledRejection', onUnhandled);
  guardLogger = logger;
  try {
    return await close();
  } finally {
    setTimeout(release, CLOSE_GUARD_GRACE_MS).unref();
  }
}

function release(): void {
  if (--guards === 0) {
    process.off('unhandledRejection', onUnhandled);
    guardLogger = undefined;
  }
}

function onUnhandled(reason: unknown): void {
  if (!isAmqpError(reason)) throw reason;
  guardLogger?.warn(
    { err: amqpErrorText(reason) },
    'the Event Hubs SDK left a failed link unhandled while closing: ignored',
  );
}

/**
 * An error of the AMQP layer: the SDK's own (a `MessagingError`, with its `condition`), rhea's
 * `{ condition, description }`, or rhea's error list not decoded (`value: [condition,
 * description]`, the condition a symbol such as `amqp:link:stolen`).
 */
export function isAmqpError(reason: unknown): boolean {
  if (typeof reason !== 'object' || reason === null) return false;
  const { condition, value, name } = reason as { condition?: unknown; value?: unknown; name?: unknown };
  if (typeof condition === 'string' && /^(amqp|com\.microsoft):/.test(condition)) return true;
  if (name === 'MessagingError' || name === 'OperationTimeoutError') return true;
  return Array.isArray(value) && /^(amqp|com\.microsoft):/.test(String(symbolText(value[0])));
}

function symbolText(item: unknown): unknown {
  return typeof item === 'object' && item !== null && 'value' in item ? item.value : item;
}

function amqpErrorText(reason: unknown): string {
  const { value, condition, description } = reason as {
    value?: unknown;
    condition?: unknown;
    description?: unknown;
  };
  if (reason instanceof Error) return errorMessage(reason);
  if (Array.isArray(value)) return value.map(symbolText).map(String).join(': ');
  return `${String(condition)}: ${String(description)}`;
}
