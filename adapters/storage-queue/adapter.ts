import type { QueueClient, ReceivedMessageItem } from '@azure/storage-queue';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { backoff } from '../../src/core/backoff.js';
import { CallDeadline } from '../../src/core/call-deadline.js';
import { AdapterError, ConfigError } from '../../src/core/errors.js';
import { createLogger } from '../../src/core/logger.js';
import type { Outcome } from '../../src/core/outcome.js';
import type { RawMessage, SourceAdapter } from '../../src/core/source-adapter.js';
import { decodeMessageText, ENCODING_FIXES, type EncodingHint } from './encoding.js';
import { MessageLease } from './lease.js';
import { CLI_PREFIX } from './names.js';
import {
  MAX_VISIBILITY_SECONDS,
  parseStorageQueueSettings,
  type StorageQueueAdapterOptions,
  type StorageQueueSettings,
  type storageQueueOptionsSchema,
} from './options.js';
import {
  CONNECTION_STRING_ENV,
  checkQueueName,
  type QueueConnection,
  type ResolvedTarget,
  resolveTarget,
} from './queue-address.js';
import { adapterError } from './service-error.js';

/** One Storage Queue message. `body` is the envelope text the HMAC is checked on (decoded if base64). */
export interface StorageQueueMessage extends RawMessage {
  readonly body: string;
  /** The message text exactly as stored: what goes to the poison queue. */
  readonly messageText: string;
  /** Deliveries so far, this one included (also `attempt`). */
  readonly dequeueCount: number;
  /** When the queue accepted the message (also `enqueuedAt`): the reference for the age check. */
  readonly insertedOn: Date;
  /** When the queue will delete the message unhandled. */
  readonly expiresOn: Date;
}

interface Clients {
  readonly queue: QueueClient;
  readonly poison: QueueClient | undefined;
}

/** Dead-letter copies never expire on their own: an operator decides when they are done. */
const POISON_TTL_NEVER = -1;

/**
 * Consumes an Azure Storage Queue. Storage Queue has no long polling, so an empty receive waits
 * (backing off up to `maxPollIntervalMs`) before it returns, and a stop cuts the wait short.
 *
 * Outcomes: ack → delete; retry → stay invisible for the delay (updateMessage); dead → copy of the
 * original text to the poison queue, then delete. Every call uses the message's newest popReceipt.
 *
 * long: the popReceipt of each message changes with every call, so receive, settle, heartbeat
 * and the poison copy share one map of receipts and one connection; the address parsing and
 * options live beside it (queue-address.ts, options.ts).
 */
export class StorageQueueAdapter implements SourceAdapter<StorageQueueMessage> {
  readonly name: string;
  readonly maxBatchSize: number;
  /** The longest empty-queue pause: the sidecar's watchdog reports a receive hung well beyond it. */
  readonly maxReceiveWaitMs: number;
  readonly heartbeatIntervalMs: number;
  readonly queueName: string;
  /** The dead-letter queue's name, or undefined when dead events only go to the dead-letter file. */
  readonly deadLetterQueueName: string | undefined;
  readonly #settings: StorageQueueSettings;
  readonly #target: ResolvedTarget;
  readonly #poisonOption: string | false | QueueClient;
  readonly #logger: Logger;
  readonly #leases = new WeakMap<StorageQueueMessage, MessageLease>();
  readonly #hintsSeen = new Set<EncodingHint>();
  #clients: Promise<Clients> | undefined;
  #emptyReceives = 0;
  #closed = false;
  #endPause: (() => void) | undefined;

  constructor(options: StorageQueueAdapterOptions) {
    this.#settings = parseStorageQueueSettings(options);
    this.#target = resolveTarget(options);
    this.queueName = this.#target.queueName;
    this.name = options.name ?? `azure-storage-queue:${this.queueName}`;
    this.maxBatchSize = this.#settings.numberOfMessages;
    this.maxReceiveWaitMs = this.#settings.maxPollIntervalMs;
    this.heartbeatIntervalMs = this.#settings.heartbeatIntervalMs;
    const poison = options.deadLetterQueue ?? `${this.queueName}-poison`;
    if (typeof poison === 'string') checkQueueName(poison, 'poison queue name');
    this.#poisonOption = poison;
    this.deadLetterQueueName =
      poison === false ? undefined : typeof poison === 'string' ? poison : poison.name;
    this.#logger = (options.logger ?? createLogger()).child({ source: this.name });
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly StorageQueueMessage[] | null> {
    if (this.#closed) return null;
    if (signal.aborted) return [];
    const { queue } = await this.#connect();
    let items: ReceivedMessageItem[];
    try {
      const response = await this.#call(
        `receive from queue "${this.queueName}"`,
        (abortSignal) =>
          queue.receiveMessages({
            numberOfMessages: Math.max(1, Math.min(max, this.#settings.numberOfMessages)),
            visibilityTimeout: this.#settings.visibilityTimeoutSeconds,
            abortSignal,
          }),
        signal,
      );
      items = response.receivedMessageItems;
    } catch (error) {
      // Aborted mid-request: whatever the service handed out reappears after the visibility timeout.
      if (signal.aborted) return [];
      throw error;
    }
    if (items.length === 0) {
      this.#emptyReceives++;
      await this.#pause(this.#emptyWait(), signal);
      return [];
    }
    this.#emptyReceives = 0;
    return items.map((item) => this.#toMessage(item));
  }

  async settle(message: StorageQueueMessage, outcome: Outcome): Promise<void> {
    const lease = this.#leases.get(message);
    if (!lease || lease.settled) {
      throw new AdapterError(`message ${message.id} was not received by ${this.name}, or is already settled`);
    }
    const { queue, poison } = await this.#connect();
    lease.markSettled(); // from here on, heartbeats have nothing left to keep
    switch (outcome.kind) {
      case 'ack':
        return lease.run(async (popReceipt) => this.#delete(queue, message, popReceipt));
      case 'retry':
        // A retry brings the message back soon: poll at the short interval again, not the idle one.
        this.#emptyReceives = 0;
        return lease.run(async (popReceipt) => {
          const seconds = this.#retryVisibility(message, outcome.delayMs);
          return this.#call(
            `retry of message ${message.id} (visibility ${seconds}s)`,
            async (abortSignal) => {
              const response = await queue.updateMessage(message.id, popReceipt, undefined, seconds, {
                abortSignal,
              });
              return response.popReceipt;
            },
          );
        });
      case 'dead':
        return lease.run(async (popReceipt) => {
          // The copy first: if it fails, the message stays and comes back after its visibility timeout.
          if (poison) await this.#sendToPoison(poison, message);
          return this.#delete(queue, message, popReceipt);
        });
    }
  }

  /** Extends the message's visibility; throws when it cannot (the worker then aborts the handler). */
  async heartbeat(message: StorageQueueMessage): Promise<void> {
    const lease = this.#leases.get(message);
    if (!lease || lease.settled) return;
    const { queue } = await this.#connect();
    await lease.run(async (popReceipt) => {
      if (lease.settled) return undefined; // a settle got in first: nothing left to keep
      const seconds = this.#settings.visibilityTimeoutSeconds;
      const receipt = await this.#call(
        `visibility heartbeat for message ${message.id}`,
        async (abortSignal) => {
          const response = await queue.updateMessage(message.id, popReceipt, undefined, seconds, {
            abortSignal,
          });
          return response.popReceipt;
        },
      );
      if (!receipt) {
        throw new AdapterError(`visibility heartbeat for message ${message.id}: no popReceipt returned`);
      }
      return receipt;
    });
  }

  /** The popReceipt the next call on `message` will use (for diagnostics and tests). */
  popReceiptOf(message: StorageQueueMessage): string | undefined {
    return this.#leases.get(message)?.popReceipt;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#endPause?.();
  }

  #toMessage(item: ReceivedMessageItem): StorageQueueMessage {
    const decoded = decodeMessageText(item.messageText, this.#settings.encoding);
    if (decoded.hint) this.#warnEncoding(decoded.hint, item.messageId);
    const message: StorageQueueMessage = {
      id: item.messageId,
      body: decoded.text,
      attempt: item.dequeueCount,
      enqueuedAt: item.insertedOn.getTime(),
      messageText: item.messageText,
      dequeueCount: item.dequeueCount,
      insertedOn: item.insertedOn,
      expiresOn: item.expiresOn,
      metadata: {
        queue: this.queueName,
        dequeue_count: item.dequeueCount,
        expires_on: item.expiresOn.toISOString(),
        encoding: decoded.applied,
        ...(decoded.hint ? { encoding_hint: decoded.hint } : {}),
      },
      ...(decoded.hint
        ? { rejection: { code: 'ENCODING_MISMATCH', reason: ENCODING_FIXES[decoded.hint] } }
        : {}),
    };
    this.#leases.set(message, new MessageLease(item.popReceipt));
    return message;
  }

  /** A misconfigured encoding fails every message alike: warn once per kind, then at debug. */
  #warnEncoding(hint: EncodingHint, messageId: string): void {
    const fields = { message_id: messageId, encoding: this.#settings.encoding, encoding_hint: hint };
    if (this.#hintsSeen.has(hint)) {
      this.#logger.debug(fields, ENCODING_FIXES[hint]);
      return;
    }
    this.#hintsSeen.add(hint);
    this.#logger.warn(fields, `message encoding mismatch: ${ENCODING_FIXES[hint]}`);
  }

  async #delete(queue: QueueClient, message: StorageQueueMessage, popReceipt: string): Promise<undefined> {
    await this.#call(`delete of message ${message.id}`, (abortSignal) =>
      queue.deleteMessage(message.id, popReceipt, { abortSignal }),
    );
    return undefined;
  }

  async #sendToPoison(poison: QueueClient, message: StorageQueueMessage): Promise<void> {
    const send = (abortSignal: AbortSignal) =>
      poison.sendMessage(message.messageText, { messageTimeToLive: POISON_TTL_NEVER, abortSignal });
    try {
      await this.#call(`copy of message ${message.id} to poison queue "${poison.name}"`, send);
      return;
    } catch (error) {
      if ((error as AdapterError).details.service_code !== 'QueueNotFound') throw error;
    }
    await this.#call(
      `creating poison queue "${poison.name}" for message ${message.id}`,
      async (abortSignal) => {
        await poison.createIfNotExists({ abortSignal });
        await send(abortSignal);
      },
    );
    this.#logger.info({ poison_queue: poison.name }, 'created the poison queue');
  }

  /**
   * One call to the service within `requestTimeoutMs` (or `signal`, if it aborts sooner); a
   * failure becomes an `AdapterError` naming `operation`.
   */
  async #call<T>(
    operation: string,
    run: (abortSignal: AbortSignal) => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T> {
    const deadline = new CallDeadline(this.#settings.requestTimeoutMs, signal);
    try {
      return await run(deadline.signal);
    } catch (error) {
      throw adapterError(operation, error, deadline.signal);
    } finally {
      deadline.end();
    }
  }

  /** The retry delay in whole seconds (rounded up), within the 7-day limit and the message's life. */
  #retryVisibility(message: StorageQueueMessage, delayMs: number): number {
    const wanted = Math.min(MAX_VISIBILITY_SECONDS, Math.ceil(Math.max(0, delayMs) / 1000));
    // The service refuses a visibility past the message's expiry.
    const lifeLeft = Math.floor((message.expiresOn.getTime() - Date.now()) / 1000) - 1;
    if (wanted <= lifeLeft) return wanted;
    const seconds = Math.max(0, lifeLeft);
    this.#logger.warn(
      { message_id: message.id, delay_s: wanted, expires_on: message.expiresOn.toISOString() },
      'retry delay runs past the message’s expiry: retrying sooner; the queue deletes it at expiry',
    );
    return seconds;
  }

  #emptyWait(): number {
    const { pollIntervalMs, maxPollIntervalMs } = this.#settings;
    return backoff(this.#emptyReceives, { baseMs: pollIntervalMs, maxMs: maxPollIntervalMs, jitter: 'none' });
  }

  /** Sleeps `ms`, ended early by the signal (stop) or `close()`. */
  #pause(ms: number, signal: AbortSignal): Promise<void> {
    if (signal.aborted || this.#closed || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        if (this.#endPause === done) this.#endPause = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
      this.#endPause = done;
    });
  }

  #connect(): Promise<Clients> {
    this.#clients ??= this.#target.connect().then(
      (connection) => ({ queue: connection.queue, poison: this.#poisonClient(connection) }),
      (error: unknown) => {
        this.#clients = undefined; // e.g. @azure/identity missing: say so again on the next call
        throw error;
      },
    );
    return this.#clients;
  }

  #poisonClient(connection: QueueConnection): QueueClient | undefined {
    const option = this.#poisonOption;
    if (option === false) return undefined;
    return typeof option === 'string' ? connection.sibling(option) : option;
  }
}

export function createStorageQueueAdapter(options: StorageQueueAdapterOptions): StorageQueueAdapter {
  return new StorageQueueAdapter(options);
}

/**
 * The adapter for a CLI `--source`: `azure-storage-queue:QUEUE_NAME` (connection string from
 * `AZURE_STORAGE_CONNECTION_STRING`), or `https://ACCOUNT.queue.core.windows.net/QUEUE[?SAS]`
 * (without a SAS, `@azure/identity`'s DefaultAzureCredential). Defaults for everything else.
 */
export function storageQueueSourceFromCli(
  spec: string,
  { logger, options = {} }: { logger?: Logger; options?: z.input<typeof storageQueueOptionsSchema> } = {},
): StorageQueueAdapter {
  const common = { ...options, ...(logger ? { logger } : {}) };
  if (spec.startsWith(CLI_PREFIX)) {
    const queueName = spec.slice(CLI_PREFIX.length);
    if (!queueName) throw new ConfigError(`--source ${CLI_PREFIX}QUEUE_NAME needs a queue name`);
    return new StorageQueueAdapter({ ...common, queueName });
  }
  if (/^https?:\/\//i.test(spec)) return new StorageQueueAdapter({ ...common, queueUrl: spec });
  throw new ConfigError(
    `not a Storage Queue source: use ${CLI_PREFIX}QUEUE_NAME (with ${CONNECTION_STRING_ENV}) or https://ACCOUNT.queue.core.windows.net/QUEUE`,
  );
}
