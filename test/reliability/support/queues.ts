/**
 * Events for the reliability suites (signed with the suite's own secret) and the queue chores:
 * filling a queue, and asking whether it is empty (nothing visible, in flight or delayed).
 */
import { SendMessageBatchCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { QueueClient } from '@azure/storage-queue';
import { createTestEnvelope } from '../../../src/consumer/testing.js';
import { sqsCounts } from '../../support/fauxqs.js';

export const EVENT_TYPE = 'daily.data.steps.created';

/** Distinct event ids `<prefix>-00000…`. */
export function eventIds(prefix: string, n: number): string[] {
  const width = String(n - 1).length;
  return Array.from({ length: n }, (_, i) => `${prefix}-${String(i).padStart(width, '0')}`);
}

/** A correctly signed envelope for `id`, signed now (or at `signedAt`). */
export function envelopeFor(id: string, secret: string, signedAt?: number): string {
  return createTestEnvelope(EVENT_TYPE, {
    secret,
    fields: { event_id: id },
    ...(signedAt === undefined ? {} : { signedAt }),
  }).raw;
}

/** Runs `work` over `items` with at most `parallel` at once. */
export async function inParallel<T>(
  items: readonly T[],
  parallel: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(parallel, items.length) }, async () => {
      while (next < items.length) {
        const item = items[next++] as T;
        await work(item);
      }
    }),
  );
}

/** Sends bodies to SQS, 10 per SendMessageBatch, 8 batches at once; fails on any failed entry. */
export async function sendToSqs(
  client: SQSClient,
  queueUrl: string,
  bodies: readonly string[],
): Promise<void> {
  const batches: string[][] = [];
  for (let i = 0; i < bodies.length; i += 10) batches.push(bodies.slice(i, i + 10));
  await inParallel(batches, 8, async (batch) => {
    const out = await client.send(
      new SendMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: batch.map((MessageBody, j) => ({ Id: String(j), MessageBody })),
      }),
    );
    if ((out.Failed ?? []).length > 0)
      throw new Error(`SendMessageBatch failed: ${JSON.stringify(out.Failed)}`);
  });
}

export async function sqsEmpty(client: SQSClient, queueUrl: string): Promise<boolean> {
  const c = await sqsCounts(client, queueUrl);
  return c.visible === 0 && c.inFlight === 0 && c.delayed === 0;
}

/** Sends texts to a Storage Queue, 16 at once (the API takes one message per call). */
export async function sendToStorageQueue(queue: QueueClient, texts: readonly string[]): Promise<void> {
  await inParallel(texts, 16, async (text) => {
    await queue.sendMessage(text);
  });
}

/** Messages in a Storage Queue, visible or not. */
export async function storageQueueCount(queue: QueueClient): Promise<number> {
  return (await queue.getProperties()).approximateMessagesCount ?? -1;
}

export interface Feeder {
  /** Events sent so far. */
  readonly sent: () => number;
  /** Throws what a send threw, if any (call it from wait conditions). */
  readonly check: () => void;
  /** Stops feeding; resolves once the loop has ended. */
  readonly stop: () => Promise<void>;
}

/**
 * A publisher that keeps at most `backlog` events waiting: it sends `backlog / 2` more whenever
 * fewer than half are left (`handled()` says how many were consumed), and holds off while
 * `paused()` (the broker is down). Sends run in order; the first failure ends the feeding.
 */
export function feed(options: {
  readonly bodies: readonly string[];
  readonly backlog: number;
  readonly send: (batch: string[]) => Promise<void>;
  readonly handled: () => number;
  readonly paused?: () => boolean;
}): Feeder {
  const { bodies, backlog } = options;
  let sent = 0;
  let running = true;
  let failure: unknown;
  const loop = (async () => {
    while (running && sent < bodies.length) {
      if (!options.paused?.() && (sent === 0 || sent - options.handled() < backlog / 2)) {
        const batch = bodies.slice(sent, sent + (sent === 0 ? backlog : backlog / 2));
        await options.send(batch);
        sent += batch.length;
      } else {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  })().catch((error: unknown) => {
    failure = error;
  });
  return {
    sent: () => sent,
    check: () => {
      if (failure) throw failure;
    },
    stop: async () => {
      running = false;
      // A send to a broker that stopped answering never returns: do not wait for it forever.
      await Promise.race([loop, new Promise((resolve) => setTimeout(resolve, 5000).unref())]);
    },
  };
}

/** Polls `check` every `intervalMs` until it holds; throws `describe()` after `timeoutMs`. */
export async function until(
  check: () => boolean | Promise<boolean>,
  options: { timeoutMs: number; intervalMs?: number; describe?: () => string | Promise<string> },
): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) {
      throw new Error(
        `condition not met in ${options.timeoutMs} ms${options.describe ? `: ${await options.describe()}` : ''}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 10));
  }
}
