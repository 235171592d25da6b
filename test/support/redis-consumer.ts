/**
 * A worker process for the multi-process Redis tests: consumes the same deterministic set of
 * signed events as its siblings (in its own order, with duplicates), de-duplicating in Redis.
 * Its handler records each event in Redis lists: `started` on entry, `handled` on success; with
 * `--stdout`, in lines `started <id>` / `handled <id>` on stdout instead (a cluster test restarts
 * masters under it), beside the consumer's warnings and errors as JSON lines.
 *
 *   tsx test/support/redis-consumer.ts URL COUNT SEED [--crash-at EVENT_ID] [--lease-ms N] [--stdout]
 *
 * URL may be `redis-cluster://HOST:PORT,…` (then only with --stdout).
 */
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { createMemorySource } from '../../adapters/memory/index.js';
import { createConsumer } from '../../src/consumer/consumer.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../../src/consumer/testing.js';
import { silentLogger } from '../../src/core/logger.js';
import { createRedisDedupe } from '../../src/dedupe/redis.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    'crash-at': { type: 'string' },
    'lease-ms': { type: 'string' },
    prefix: { type: 'string' },
    stdout: { type: 'boolean', default: false },
  },
});
const [url = '', countText = '1000', seedText = '1'] = positionals;
const count = Number(countText);
let seed = Number(seedText);
const random = () => {
  seed = (seed * 1103515245 + 12345) % 2 ** 31;
  return seed / 2 ** 31;
};

const ids = Array.from({ length: count }, (_, i) => `evt_${String(i).padStart(5, '0')}`);
const order = [...ids, ...ids.filter((_, i) => i % 10 === 0)]; // every tenth delivered twice
for (let i = order.length - 1; i > 0; i--) {
  const j = Math.floor(random() * (i + 1));
  [order[i], order[j]] = [order[j] as string, order[i] as string];
}

const prefix = values.prefix ?? 'test';
const toStdout = values.stdout;
const lists = toStdout ? undefined : new Redis(url);
const record = async (list: 'started' | 'handled', id: string) => {
  if (lists) await lists.rpush(`${prefix}:${list}`, id);
  else process.stdout.write(`${list} ${id}\n`);
};
const logger = toStdout ? pino({ level: 'warn' }, pino.destination({ fd: 1, sync: true })) : silentLogger();
const source = createMemorySource({ endWhenEmpty: true });
for (const id of order) {
  source.send(createTestEnvelope('daily.data.steps.created', { fields: { event_id: id } }).raw);
}
const consumer = createConsumer({
  source,
  secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
  dedupe: createRedisDedupe({ url, prefix, logger }),
  deadLetter: '/dev/null',
  logger,
  concurrency: 8,
  leaseMs: Number(values['lease-ms'] ?? 5000),
  retry: { maxAttempts: 1000, baseDelayMs: 20, maxDelayMs: 200 },
});
consumer.on('daily.data.steps.created', async (event) => {
  await record('started', event.event_id);
  if (event.event_id === values['crash-at']) {
    process.kill(process.pid, 'SIGKILL'); // dies mid-handler: claimed, never completed
  }
  await new Promise((r) => setTimeout(r, random() * 2));
  await record('handled', event.event_id);
});
await consumer.start();
await consumer.stopped;
await lists?.quit();
process.stdout.write(`done ${process.pid}\n`);
