/**
 * The adapter contract (test/support/adapter-contract.ts) for the transports without a broker:
 * memory, file and HTTP ingress. The brokers' runs have a file each, with their server:
 * adapter.contract.{sqs,storage-queue,event-hubs}.test.ts.
 */
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createFileSource, type FileSource } from '../adapters/file/index.js';
import { createHttpIngress, type HttpIngressSource } from '../adapters/http/index.js';
import { createMemorySource, type MemorySource } from '../adapters/memory/index.js';
import { adapterContract } from './support/adapter-contract.js';
import { tempDir } from './support/harness.js';

adapterContract('memory', {
  declares: {
    redelivery: 'adapter',
    unsettledAtClose: 'lost-with-instance',
    concurrentReceives: false,
    outage: { notApplicable: 'in process: there is no broker to lose' },
  },
  async setup() {
    // The source is the queue: published into before it is "opened", and the same instance after.
    const source: MemorySource = createMemorySource();
    return {
      publish: async (body) => void source.send(body),
      open: async () => source,
      holds: async () => source.pending,
      cleanup: () => source.close(),
    };
  },
});

adapterContract('file', {
  declares: {
    redelivery: 'adapter',
    unsettledAtClose: 'everything',
    concurrentReceives: false,
    outage: { notApplicable: 'a local file: there is no broker to lose' },
  },
  async setup() {
    const dir = tempDir('phe-contract-file-');
    const path = join(dir.path, 'events.jsonl');
    writeFileSync(path, '');
    const opened: FileSource[] = [];
    const lines = () =>
      readFileSync(path, 'utf8')
        .split('\n')
        .filter((line) => line !== '').length;
    return {
      async publish(body) {
        // A file source reads what the file holds when it opens.
        if (opened.length > 0) throw new Error('the file harness publishes before the first open only');
        appendFileSync(path, Buffer.concat([body, Buffer.from('\n')]));
      },
      async open() {
        const source = createFileSource({ path });
        opened.push(source);
        return source;
      },
      // The file never changes: what the newest reader has not settled is what it still holds.
      async holds() {
        const stats = opened.at(-1)?.stats ?? { acked: 0, dead: 0 };
        return lines() - stats.acked - stats.dead;
      },
      async cleanup() {
        for (const source of opened) await source.close();
        dir.cleanup();
      },
    };
  },
});

/** One POST as a sender made it, and its answer once it came (status 0: the connection failed). */
interface Sent {
  readonly body: Buffer;
  readonly answer: Promise<void>;
  status?: number;
  retryAfter?: string | null;
}

/** The statuses after which a sender is done with a message: 200 acked, 413/422 rejected. */
const FINAL = new Set([200, 413, 422]);

adapterContract('HTTP ingress', {
  declares: {
    redelivery: 'sender',
    unsettledAtClose: 'sender',
    concurrentReceives: false,
    outage: {
      notApplicable: 'the ingress is the server: senders see it stop, not an outage it could report',
    },
  },
  async setup() {
    const ingresses: HttpIngressSource[] = [];
    const waiting: Buffer[] = [];
    const sent: Sent[] = [];
    const post = (url: string, body: Buffer) => {
      const request: { -readonly [K in keyof Sent]: Sent[K] } = { body, answer: Promise.resolve() };
      request.answer = fetch(url, { method: 'POST', body }).then(
        async (response) => {
          await response.arrayBuffer();
          request.retryAfter = response.headers.get('retry-after');
          request.status = response.status;
        },
        () => {
          request.status = 0;
        },
      );
      sent.push(request);
    };
    return {
      // Before the ingress listens, the sender waits for it.
      async publish(body) {
        const ingress = ingresses.at(-1);
        if (ingress) post(ingress.url, Buffer.from(body));
        else waiting.push(Buffer.from(body));
      },
      async open() {
        const ingress = await createHttpIngress({ port: 0 });
        ingresses.push(ingress);
        for (const body of waiting.splice(0)) post(ingress.url, body);
        return ingress;
      },
      async holds() {
        return sent.filter((r) => r.status === undefined || !FINAL.has(r.status)).length;
      },
      async answered(body) {
        await Promise.all(sent.filter((r) => r.body.equals(body)).map((r) => r.answer));
      },
      async retryAfterMs(body) {
        const answered = sent.filter((r) => r.body.equals(body) && r.status !== undefined).at(-1);
        return Number(answered?.retryAfter ?? Number.NaN) * 1000;
      },
      async cleanup() {
        for (const ingress of ingresses) await ingress.close();
        await Promise.all(sent.map((r) => r.answer));
      },
    };
  },
});
