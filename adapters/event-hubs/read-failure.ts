import { AdapterError, errorMessage } from '../../src/core/errors.js';

/**
 * Errors of one partition's reader in a row, with no call of `processEvents` between them, after
 * which a replay stops reading. The SDK reports a retryable error only once its own retries ran
 * out (`retryOptions`: by default 3, 30 s apart), so three in a row mean minutes without a read.
 */
export const MAX_READ_ERRORS_IN_A_ROW = 3;

/** What a replay's reader was reading when the error came. */
export interface ReadPlace {
  /** `event-hubs:HUB` */
  readonly source: string;
  readonly consumerGroup: string;
  readonly partitionId: string;
}

/**
 * Whether an error of a partition's reader comes back however often the read is tried again: the
 * SDK marks it so (`MessagingError.retryable === false`: a partition held by a reader with an
 * owner level, a hub or consumer group that does not exist, …). The SDK stops that partition's
 * reader and starts it again ten seconds later, to fail the same way, for ever; a worker's load
 * balancing wants that, a replay that must end does not.
 */
export function isPermanentReadError(error: unknown): boolean {
  return (
    typeof error === 'object' && error !== null && (error as { retryable?: unknown }).retryable === false
  );
}

/**
 * Counts each partition's reader errors since it last read (`processEvents` was called, with
 * events or none) and says when they end the read: at once for a permanent error, else at the
 * `MAX_READ_ERRORS_IN_A_ROW`th in a row.
 */
export class ReadErrors {
  readonly #inARow = new Map<string, number>();

  /** The partition is being read. */
  read(partitionId: string): void {
    this.#inARow.delete(partitionId);
  }

  /** The failure that ends the read, or undefined while the SDK's retries may still get through. */
  failed(error: unknown, place: ReadPlace): AdapterError | undefined {
    const inARow = (this.#inARow.get(place.partitionId) ?? 0) + 1;
    this.#inARow.set(place.partitionId, inARow);
    if (!isPermanentReadError(error) && inARow < MAX_READ_ERRORS_IN_A_ROW) return undefined;
    return readFailure(error, place, inARow);
  }

  /** Errors of the partition since it last read. */
  inARow(partitionId: string): number {
    return this.#inARow.get(partitionId) ?? 0;
  }
}

/** The error a replay ends with: where, why, and what to change for the causes a partner can fix. */
export function readFailure(error: unknown, place: ReadPlace, inARow: number): AdapterError {
  const code = (error as { code?: unknown } | null)?.code;
  const named = typeof code === 'string' ? `${code}: ` : '';
  const why = isPermanentReadError(error)
    ? `${named}${errorMessage(error)}`
    : `${inARow} errors in a row, the last ${named}${errorMessage(error)}`;
  return new AdapterError(
    `cannot read ${place.source} (consumer group ${place.consumerGroup}, partition ${place.partitionId}): ${why}${hintFor(code, place)}`,
    { cause: error, details: { code, partition_id: place.partitionId, consumer_group: place.consumerGroup } },
  );
}

function hintFor(code: unknown, place: ReadPlace): string {
  if (code === 'ReceiverDisconnectedError') {
    // Event Hubs refuses a plain reader while one with an owner level (a worker's) reads the partition.
    return `. A worker reads the hub with consumer group ${place.consumerGroup}: give the replay a consumer group of its own (--consumer-group NAME)`;
  }
  if (code === 'MessagingEntityNotFoundError') {
    return `. Check the hub's name, and that consumer group ${place.consumerGroup} exists on it (--consumer-group NAME)`;
  }
  if (code === 'UnauthorizedError') {
    return '. The identity needs the role Azure Event Hubs Data Receiver on the hub';
  }
  return '';
}
