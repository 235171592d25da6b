/**
 * fauxqs for the SQS benches (bench:sqs, bench:scale): the server in its own process, as a real
 * broker is remote (and so that its CPU is counted apart), and fresh queues preloaded untimed.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { SendMessageBatchCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { createQueue, type FauxqsServer } from '../test/support/fauxqs.js';

export interface FauxqsChild extends FauxqsServer {
  /** The child's pid, for its CPU figures. */
  readonly pid: number;
}

/** fauxqs in a child process (bench/fauxqs-child.ts), stopped when we disconnect from it. */
export function startFauxqsChild(): Promise<FauxqsChild> {
  return new Promise((resolve, reject) => {
    const child = fork(fileURLToPath(new URL('./fauxqs-child.ts', import.meta.url)), [], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`fauxqs child exited (${code}) before it was ready`)));
    child.once('message', (m) => {
      const { endpoint } = m as { endpoint: string };
      resolve({
        endpoint,
        pid: child.pid as number,
        close: () =>
          new Promise<void>((done) => {
            child.once('exit', () => done());
            child.disconnect();
          }),
      });
    });
  });
}

/** A fresh queue holding `bodies`, sent before a run (untimed) in batches of 10, 16 at a time. */
export async function preloadedQueue(
  client: SQSClient,
  name: string,
  bodies: readonly string[],
): Promise<{ url: string; name: string }> {
  const queue = await createQueue(client, name);
  const chunks: string[][] = [];
  for (let i = 0; i < bodies.length; i += 10) chunks.push(bodies.slice(i, i + 10));
  const sendChunk = async (chunk: string[]) => {
    const out = await client.send(
      new SendMessageBatchCommand({
        QueueUrl: queue.url,
        Entries: chunk.map((MessageBody, j) => ({ Id: String(j), MessageBody })),
      }),
    );
    if ((out.Failed ?? []).length > 0) throw new Error(`preload failed: ${JSON.stringify(out.Failed)}`);
  };
  let next = 0;
  const sender = async () => {
    while (next < chunks.length) await sendChunk(chunks[next++] as string[]);
  };
  await Promise.all(Array.from({ length: 16 }, sender));
  return queue;
}
