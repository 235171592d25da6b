import { setTimeout as sleep } from 'node:timers/promises';
import {
  type BatchResultErrorEntry,
  ChangeMessageVisibilityBatchCommand,
  ChangeMessageVisibilityCommand,
  DeleteMessageBatchCommand,
  DeleteMessageCommand,
  type MessageSystemAttributeName,
  ReceiveMessageCommand,
  type ReceiveMessageCommandOutput,
  SQSClient,
} from '@aws-sdk/client-sqs';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { definedOnly } from '../../src/core/defined.js';
import { ConfigError, errorMessage } from '../../src/core/errors.js';
import { silentLogger } from '../../src/core/logger.js';
import { type DeadOutcome, NOT_HANDLED, type Outcome } from '../../src/core/outcome.js';
import type { SourceAdapter } from '../../src/core/source-adapter.js';
import { Batcher, type EntryResults } from './batcher.js';
import { DeadLetterQueue } from './dead-letter-queue.js';
import { BatchEntryError, isNotInFlight, isRetryableFailure, sqsFailure } from './errors.js';
import { type SqsMessage, toSqsMessage } from './message.js';
import {
  isFifoQueue,
  queueNameOf,
  type ResolvedSqsOptions,
  resolveSqsOptions,
  SQS_MAX_VISIBILITY_SECONDS,
  type SqsAdapterOptions,
  type sqsOptionsSchema,
} from './options.js';
import { cliClientConfig, queueUrlOfSpec } from './url.js';

interface VisibilityChange {
  readonly receiptHandle: string;
  readonly seconds: number;
}

const ABORTED = Symbol('aborted');

/** W3C trace context message attributes a producer may set; the delivery span links to them. */
const TRACE_ATTRIBUTES = ['traceparent', 'tracestate'];
/** How long `close()` waits for an abandoned poll that may bring back released messages. */
const CLOSE_GRACE_MS = 1000;

/**
 * Consumes one SQS queue: long-polls `ReceiveMessage` (SentTimestamp is the age reference,
 * ApproximateReceiveCount the attempt), and settles each message: ack → `DeleteMessageBatch`
 * (acks of concurrent handlers gathered for a few ms), retry → visibility set to the delay,
 * dead → optional DLQ `SendMessage` (dead-letter-queue.ts), then delete. A heartbeat keeps a
 * message invisible while its handler runs.
 *
 * long: each private method is one SQS call (batch and single forms) with its own error mapping,
 * all on the same client, queue URL and close state; the batching (batcher.ts), retries
 * (retry.ts), options and URL parsing already live beside it.
 */
export class SqsAdapter implements SourceAdapter<SqsMessage> {
  readonly name: string;
  readonly maxBatchSize: number;
  readonly maxConcurrentReceives: number;
  /** One long poll: the sidecar's watchdog reports a receive hung well beyond this. */
  readonly maxReceiveWaitMs: number;
  readonly heartbeatIntervalMs: number;
  readonly queueUrl: string;
  readonly client: SQSClient;
  readonly #options: ResolvedSqsOptions;
  readonly #queueName: string;
  readonly #ownsClient: boolean;
  readonly #logger: Logger;
  readonly #systemAttributes: MessageSystemAttributeName[];
  readonly #deletes: Batcher<string>;
  readonly #visibility: Batcher<VisibilityChange>;
  readonly #deadLetterQueue: DeadLetterQueue | undefined;
  /** Received, not yet settled, by receipt handle; with the heartbeat under way, if any. */
  readonly #open = new Map<string, Promise<void> | undefined>();
  /** Aborts every `ReceiveMessage` still under way; fired by `close()`. */
  readonly #polls = new AbortController();
  /** Polls abandoned by a stop, still open at SQS (see `receive`). */
  readonly #abandoned = new Set<Promise<void>>();
  /** A message was made visible while an abandoned poll was open (it may catch it). */
  #releasedSinceStop = false;
  #closed = false;

  constructor(options: SqsAdapterOptions) {
    const resolved = resolveSqsOptions(options);
    this.#options = resolved;
    this.name = resolved.name;
    this.queueUrl = resolved.queueUrl;
    this.#queueName = queueNameOf(resolved.queueUrl);
    this.maxBatchSize = resolved.batchSize;
    this.maxConcurrentReceives = resolved.maxConcurrentReceives;
    this.maxReceiveWaitMs = resolved.waitTimeSeconds * 1000;
    this.heartbeatIntervalMs = Math.round(resolved.heartbeatIntervalSeconds * 1000);
    this.#ownsClient = options.client === undefined;
    this.client = options.client ?? new SQSClient({});
    this.#logger = options.logger ?? silentLogger();
    this.#deadLetterQueue = resolved.deadLetterQueue
      ? new DeadLetterQueue(this.client, resolved.deadLetterQueue, resolved.settleAttempts)
      : undefined;
    // AWSTraceHeader: the X-Ray trace context, linked from the delivery span.
    this.#systemAttributes = ['SentTimestamp', 'ApproximateReceiveCount', 'AWSTraceHeader'];
    if (isFifoQueue(resolved.queueUrl)) this.#systemAttributes.push('MessageGroupId');
    const common = {
      delayMs: resolved.deleteBatchDelayMs,
      attempts: resolved.settleAttempts,
      retryable: isRetryableFailure,
    };
    this.#deletes = new Batcher<string>({
      ...common,
      batch: (handles) => this.#deleteBatch(handles),
      single: (handle) => this.#deleteOne(handle),
      onRetry: (error, attempt) =>
        this.#logger.warn({ source: this.name, err: error.message, attempt }, 'SQS delete failed: retrying'),
    });
    this.#visibility = new Batcher<VisibilityChange>({
      ...common,
      batch: (changes) => this.#visibilityBatch(changes),
      single: (change) => this.#visibilityOne(change),
      onRetry: (error, attempt) =>
        this.#logger.warn(
          { source: this.name, err: error.message, attempt },
          'SQS visibility change failed: retrying',
        ),
    });
  }

  async receive(max: number, signal: AbortSignal): Promise<readonly SqsMessage[] | null> {
    if (this.#closed) return null;
    if (signal.aborted) return [];
    const poll = this.#poll(Math.max(1, Math.min(max, this.maxBatchSize)));
    const result = await untilAborted(poll, signal);
    if (result !== ABORTED) return result;
    // SQS keeps serving a long poll whose client went away: messages arriving now would sit
    // invisible for a whole visibility timeout. So the request stays open (until close()), and
    // whatever it still receives is handed straight back.
    const abandoned = poll.then(
      (messages) => this.#release(messages),
      () => undefined,
    );
    this.#abandoned.add(abandoned);
    void abandoned.finally(() => this.#abandoned.delete(abandoned));
    return [];
  }

  async settle(message: SqsMessage, outcome: Outcome): Promise<void> {
    const beat = this.#open.get(message.receiptHandle);
    this.#open.delete(message.receiptHandle);
    // A heartbeat landing after our own visibility change would undo it: let it finish first.
    if (beat) await beat.catch(() => undefined);
    switch (outcome.kind) {
      case 'ack':
        return this.#deletes.add(message.receiptHandle);
      case 'retry':
        return this.#makeVisibleIn(message, outcome.delayMs);
      case 'dead':
        if (this.#deadLetterQueue) await this.#copyDead(this.#deadLetterQueue, message, outcome);
        return this.#deletes.add(message.receiptHandle);
    }
  }

  /**
   * The dead-letter queue copy of a dead message; throws when it failed (the message is kept).
   * A copy SQS can never take is given up, and the message deleted all the same: kept, it would
   * come back after every visibility timeout, be dead again and write a new dead-letter record
   * each time (a failed handler would even run again). The consumer wrote the dead-letter record
   * before this settle, so it holds the message.
   */
  async #copyDead(queue: DeadLetterQueue, message: SqsMessage, outcome: DeadOutcome): Promise<void> {
    const copy = await queue.send(message, outcome, { source: this.name, logger: this.#logger });
    if (copy.sent) return;
    this.#logger.error(
      { source: this.name, message_id: message.id, code: outcome.code, err: copy.why },
      'dead-letter queue can never take this message: deleted without a copy there (its dead-letter record holds it)',
    );
  }

  /** Extends the message's invisibility to `visibilityTimeoutSeconds` from now; throws if it cannot. */
  async heartbeat(message: SqsMessage): Promise<void> {
    if (!this.#open.has(message.receiptHandle)) return; // settled meanwhile: nothing to keep
    const beat = this.#visibility.add({
      receiptHandle: message.receiptHandle,
      seconds: this.#options.visibilityTimeoutSeconds,
    });
    this.#open.set(message.receiptHandle, beat);
    await beat;
  }

  /** Ends polling, hands back what an abandoned poll received, sends pending settles. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#abandoned.size > 0 && this.#releasedSinceStop) {
      // What a stop released is likely on its way to the abandoned poll: let it arrive to be
      // handed back, rather than abort it and leave those messages invisible at SQS.
      await Promise.race([
        Promise.allSettled([...this.#abandoned]),
        sleep(CLOSE_GRACE_MS, undefined, { ref: false }),
      ]);
    }
    this.#polls.abort();
    await Promise.allSettled([...this.#abandoned]);
    await Promise.all([this.#deletes.drain(), this.#visibility.drain()]);
    this.#open.clear();
    if (this.#ownsClient) this.client.destroy();
  }

  async #poll(max: number): Promise<SqsMessage[]> {
    let output: ReceiveMessageCommandOutput;
    try {
      output = await this.client.send(
        new ReceiveMessageCommand({
          QueueUrl: this.queueUrl,
          MaxNumberOfMessages: max,
          WaitTimeSeconds: this.#options.waitTimeSeconds,
          VisibilityTimeout: this.#options.visibilityTimeoutSeconds,
          MessageSystemAttributeNames: this.#systemAttributes,
          MessageAttributeNames: TRACE_ATTRIBUTES,
        }),
        { abortSignal: this.#polls.signal },
      );
    } catch (error) {
      if (this.#polls.signal.aborted) return [];
      throw sqsFailure('ReceiveMessage', this.name, error);
    }
    const messages = output.Messages;
    if (!messages || messages.length === 0) return [];
    const receivedAt = Date.now();
    const out = messages.map((m) => toSqsMessage(m, this.#queueName, receivedAt));
    for (const m of out) this.#open.set(m.receiptHandle, undefined);
    return out;
  }

  /** Makes messages nobody will handle visible again at once. */
  async #release(messages: readonly SqsMessage[]): Promise<void> {
    if (messages.length === 0) return;
    this.#logger.info(
      { source: this.name, count: messages.length },
      'messages received after stop: handing them back',
    );
    await Promise.allSettled(messages.map((m) => this.settle(m, NOT_HANDLED)));
  }

  async #makeVisibleIn(message: SqsMessage, delayMs: number): Promise<void> {
    // The 12 h limit counts from this receive, not from now.
    const left = SQS_MAX_VISIBILITY_SECONDS - Math.ceil((Date.now() - message.receivedAt) / 1000);
    const seconds = Math.max(0, Math.min(Math.ceil(delayMs / 1000), left));
    if (seconds === 0 && this.#abandoned.size > 0) this.#releasedSinceStop = true;
    try {
      await this.#visibility.add({ receiptHandle: message.receiptHandle, seconds });
    } catch (error) {
      // Visible already (its visibility ran out, or a heartbeat had failed): what a retry wants.
      if (!isNotInFlight(error)) throw error;
      this.#logger.debug(
        { source: this.name, message_id: message.id, err: errorMessage(error) },
        'retry: message was no longer in flight',
      );
    }
  }

  async #deleteBatch(handles: readonly string[]): Promise<EntryResults> {
    try {
      const output = await this.client.send(
        new DeleteMessageBatchCommand({
          QueueUrl: this.queueUrl,
          Entries: handles.map((ReceiptHandle, i) => ({ Id: String(i), ReceiptHandle })),
        }),
      );
      return entryResults('DeleteMessageBatch', this.name, handles.length, output);
    } catch (error) {
      throw sqsFailure('DeleteMessageBatch', this.name, error);
    }
  }

  async #deleteOne(handle: string): Promise<void> {
    try {
      await this.client.send(new DeleteMessageCommand({ QueueUrl: this.queueUrl, ReceiptHandle: handle }));
    } catch (error) {
      throw sqsFailure('DeleteMessage', this.name, error);
    }
  }

  async #visibilityBatch(changes: readonly VisibilityChange[]): Promise<EntryResults> {
    try {
      const output = await this.client.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: this.queueUrl,
          Entries: changes.map((c, i) => ({
            Id: String(i),
            ReceiptHandle: c.receiptHandle,
            VisibilityTimeout: c.seconds,
          })),
        }),
      );
      return entryResults('ChangeMessageVisibilityBatch', this.name, changes.length, output);
    } catch (error) {
      throw sqsFailure('ChangeMessageVisibilityBatch', this.name, error);
    }
  }

  async #visibilityOne(change: VisibilityChange): Promise<void> {
    try {
      await this.client.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: this.queueUrl,
          ReceiptHandle: change.receiptHandle,
          VisibilityTimeout: change.seconds,
        }),
      );
    } catch (error) {
      throw sqsFailure('ChangeMessageVisibility', this.name, error);
    }
  }
}

/** Each entry's failure by batch entry Id (its index); an entry SQS did not report is retried. */
function entryResults(
  action: string,
  queue: string,
  count: number,
  output: {
    readonly Successful?: readonly { readonly Id?: string | undefined }[] | undefined;
    readonly Failed?: readonly BatchResultErrorEntry[] | undefined;
  },
): EntryResults {
  const results: (Error | undefined)[] = new Array(count).fill(undefined);
  const reported = new Set<string>();
  for (const ok of output.Successful ?? []) if (ok.Id !== undefined) reported.add(ok.Id);
  for (const failed of output.Failed ?? []) {
    const i = Number(failed.Id);
    if (Number.isInteger(i) && i >= 0 && i < count) {
      results[i] = new BatchEntryError(action, queue, failed);
      reported.add(String(i));
    }
  }
  for (let i = 0; i < count; i++) {
    if (!reported.has(String(i))) {
      results[i] = new BatchEntryError(action, queue, {
        Id: String(i),
        Code: 'MissingResult',
        Message: 'SQS reported neither success nor failure for this entry',
        SenderFault: false,
      });
    }
  }
  return results;
}

function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T | typeof ABORTED> {
  return new Promise((resolve, reject) => {
    const onAbort = () => resolve(ABORTED);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

export function createSqsAdapter(options: SqsAdapterOptions): SqsAdapter {
  return new SqsAdapter(options);
}

/**
 * The adapter for `partner-events run --source QUEUE_URL` (or `sqs:QUEUE_URL`). Everything else
 * comes from the SDK's standard configuration: credentials, `AWS_REGION`, `AWS_ENDPOINT_URL_SQS`.
 */
export function sqsSourceFromCli(
  spec: string,
  { logger, options = {} }: { logger?: Logger; options?: z.input<typeof sqsOptionsSchema> } = {},
): SqsAdapter {
  const queueUrl = queueUrlOfSpec(spec);
  if (!queueUrl) throw new ConfigError('--source sqs: needs a queue URL');
  const clientConfig = cliClientConfig(queueUrl);
  return createSqsAdapter({
    ...definedOnly(options),
    queueUrl,
    ...(Object.keys(clientConfig).length > 0 ? { client: new SQSClient(clientConfig) } : {}),
    ...(logger ? { logger } : {}),
  });
}
