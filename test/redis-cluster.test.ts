/**
 * The Redis dedupe store on a real Redis Cluster: 3 masters started from `redis-server` on
 * loopback ports (one cluster for the whole file), AOF with `appendfsync always`, so a master
 * killed and started again comes back with its slots and keys; master 0 has a replica (node 3),
 * for a failover.
 */
import { spawn } from 'node:child_process';
import { connect, createServer, type Server } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Cluster, Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ConfigError, DedupeUnavailableError } from '../src/core/errors.js';
import { silentLogger } from '../src/core/logger.js';
import { createRedisDedupe, hashTag } from '../src/dedupe/redis.js';
import {
  clusterOptions,
  createCluster,
  parseClusterNodes,
  parseClusterUrl,
} from '../src/dedupe/redis-cluster.js';
import { realTimeContract } from './support/dedupe-realtime-contract.js';
import { HAS_REDIS, RedisCluster } from './support/redis-server.js';

const WORKER = fileURLToPath(new URL('./support/redis-consumer.ts', import.meta.url));

let cluster: RedisCluster | undefined;
beforeAll(async () => {
  if (HAS_REDIS) cluster = await RedisCluster.start({ masters: 3, replicaOf: [0] });
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
});

const url = () => cluster?.url ?? 'redis-cluster://127.0.0.1:1';

function capturingLogger() {
  const lines: { level: number; msg: string; [k: string]: unknown }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { logger, lines };
}

describe('Redis Cluster settings', () => {
  it('redis-cluster:// and a list of nodes become seed nodes; a bad node is a ConfigError', () => {
    expect(parseClusterUrl('redis-cluster://u:p%40ss@10.0.0.1:7000,[::1]:7001,cache.internal:7002')).toEqual({
      nodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: '::1', port: 7001 },
        { host: 'cache.internal', port: 7002 },
      ],
      username: 'u',
      password: 'p@ss',
    });
    expect(parseClusterNodes([' h:1 '])).toEqual([{ host: 'h', port: 1 }]);
    for (const bad of [['h'], ['h:0'], ['h:70000'], []]) {
      expect(() => parseClusterNodes(bad)).toThrow(ConfigError);
    }
  });

  it('the hash tag is never empty and one-to-one', () => {
    expect(hashTag('evt-1')).toBe('{evt-1}');
    expect(hashTag('}x')).toBe('{~}x}');
    expect(hashTag('~}x')).toBe('{~~}x}');
    expect(new Set(['}x', '~}x', '~x', 'x'].map(hashTag)).size).toBe(4);
    // Not well-formed UTF-16: the hex of its code units, after a `~u:` no other id can start with.
    expect(hashTag('e\ud800')).toBe('{~u:0065d800}');
    expect(hashTag('~u:0065d800')).toBe('{~~u:0065d800}');
    expect(new Set(['e\ud800', 'e\ud801', 'e\ufffd', '\ude00\ud83d', '~u:0065d800'].map(hashTag)).size).toBe(
      5,
    );
  });
});

realTimeContract(
  'RedisDedupeStore on a 3-master Redis Cluster',
  () => createRedisDedupe({ url: url(), logger: silentLogger() }),
  !HAS_REDIS,
);

describe.skipIf(!HAS_REDIS)('Redis dedupe on a 3-master Redis Cluster', () => {
  it("an event's keys share one slot; events spread over every master; odd ids work too", async () => {
    const c = cluster as RedisCluster;
    const store = createRedisDedupe({ nodes: c.nodes.map((n) => `127.0.0.1:${n.port}`), prefix: 'spread' });
    const ids = [
      ...Array.from({ length: 60 }, (_, i) => `evt-spread-${i}`),
      '}starts-with-brace',
      '~tilde',
      '{braced}',
      'a}b{c',
      'evt_\ud800', // keyed by its WTF-8 bytes, hashed by them
      '}\udc00',
    ];
    for (const id of ids) {
      const claim = await store.claim(id, 60_000);
      if (claim.status !== 'claimed') throw new Error(`${id}: ${claim.status}`);
      expect(await store.complete(id, claim.token, 60_000)).toBe(true);
      expect(await store.claim(id, 60_000)).toEqual({ status: 'duplicate' });
    }
    const owners = new Set(await Promise.all(ids.map((id) => c.ownerOf(hashTag(id)))));
    expect(owners).toEqual(new Set([0, 1, 2]));
    await store.close();
  });

  it('calls for one event made in one tick take effect in call order (one slot, one connection)', async () => {
    const store = createRedisDedupe({ url: url(), prefix: 'order', logger: silentLogger() });
    const first = await store.claim('evt-order-1', 60_000);
    if (first.status !== 'claimed') throw new Error(first.status);
    const [completed, afterComplete] = await Promise.all([
      store.complete('evt-order-1', first.token, 60_000),
      store.claim('evt-order-1', 60_000),
    ]);
    expect(completed).toBe(true);
    expect(afterComplete).toEqual({ status: 'duplicate' });
    const second = await store.claim('evt-order-2', 60_000);
    if (second.status !== 'claimed') throw new Error(second.status);
    const [, reclaimed, lateComplete] = await Promise.all([
      store.release('evt-order-2', second.token),
      store.claim('evt-order-2', 60_000),
      store.complete('evt-order-2', second.token, 60_000),
    ]);
    expect(reclaimed.status).toBe('claimed');
    expect(lateComplete).toBe(false);
    const hot = await Promise.all(Array.from({ length: 50 }, () => store.claim('evt-order-hot', 60_000)));
    expect(hot[0]?.status).toBe('claimed');
    expect(hot.slice(1).every((r) => r.status === 'in_progress')).toBe(true);
    await store.close();
  });

  it('a prefix or tenant with braces is refused (it would change the hash tag)', () => {
    expect(() => createRedisDedupe({ url: url(), tenant: '{acme}', logger: silentLogger() })).toThrow(
      ConfigError,
    );
  });

  it('the first call waits for every master, not only for the slot map (the client is ready before its masters are)', async () => {
    const c = cluster as RedisCluster;
    const slow = c.nodes[2] as { port: number }; // a master without a replica
    // Connections to master 2 go through a proxy that holds each for 1 s (within the command
    // timeout): the client knows the slots, and says ready, before master 2 answers.
    const proxy = await holdingProxy(slow.port, 1000);
    const client = createCluster(
      c.nodes.slice(0, 2).map((n) => ({ host: '127.0.0.1', port: n.port })),
      {
        ...clusterOptions({}),
        natMap: { [`127.0.0.1:${slow.port}`]: { host: '127.0.0.1', port: proxy.port } },
      },
    );
    const store = createRedisDedupe({ client, prefix: 'slow-master', logger: silentLogger() });
    try {
      let id = '';
      for (let i = 0; !id; i++) if ((await c.ownerOf(hashTag(`evt-slow-${i}`))) === 2) id = `evt-slow-${i}`;
      if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve));
      expect(await store.claim(id, 60_000)).toMatchObject({ status: 'claimed' });
      expect(store.available).toBe(true);
    } finally {
      await store.close();
      client.disconnect();
      proxy.server.close();
    }
  });

  it('unavailable while a slot has no master: that slot fails fast, others answer; back with its keys after a restart', async () => {
    const c = cluster as RedisCluster;
    const { logger, lines } = capturingLogger();
    const store = createRedisDedupe({ url: url(), prefix: 'restart', logger });
    const ids = Array.from({ length: 30 }, (_, i) => `evt-restart-${i}`);
    const owner = await Promise.all(ids.map((id) => c.ownerOf(hashTag(id))));
    const tokens = new Map<string, string>();
    for (const id of ids) {
      const claim = await store.claim(id, 60_000);
      if (claim.status === 'claimed') tokens.set(id, claim.token);
    }
    expect(tokens.size).toBe(ids.length);
    expect(store.available).toBe(true);

    await c.pause(1);
    await vi.waitFor(() => expect(store.available).toBe(false));
    const during = await Promise.allSettled(ids.map((id) => store.peek(id)));
    during.forEach((result, i) => {
      if (owner[i] === 1) {
        expect(result.status).toBe('rejected');
        if (result.status === 'rejected') expect(result.reason).toBeInstanceOf(DedupeUnavailableError);
      } else {
        expect(result).toEqual({ status: 'fulfilled', value: 'in_progress' });
      }
    });
    expect(store.available).toBe(false);

    await c.resume(1);
    await vi.waitFor(() => expect(store.available).toBe(true), { timeout: 20_000, interval: 20 });
    // The AOF kept master 1's leases: nothing was lost, every token still completes.
    for (const id of ids) expect(await store.complete(id, tokens.get(id) as string, 60_000)).toBe(true);
    expect(lines.filter((l) => String(l.msg).includes('unreachable'))).toHaveLength(1);
    expect(lines.filter((l) => String(l.msg).includes('reachable again'))).toHaveLength(1);
    await store.close();
  }, 30_000);

  it('a claim that times out on a slow master but runs there later is undone: neither held nor counted as abandoned', async () => {
    const c = cluster as RedisCluster;
    const options = clusterOptions({});
    const client = createCluster(
      c.nodes.slice(0, 3).map((n) => ({ host: '127.0.0.1', port: n.port })),
      { ...options, redisOptions: { ...options.redisOptions, commandTimeout: 200 } },
    );
    const store = createRedisDedupe({ client, prefix: 'slow', logger: silentLogger() });
    let id = '';
    for (let i = 0; !id; i++) if ((await c.ownerOf(hashTag(`evt-stall-${i}`))) === 1) id = `evt-stall-${i}`;
    const master = new Redis((c.nodes[1] as { port: number }).port, '127.0.0.1');
    try {
      expect(await store.peek(id)).toBe('absent');
      await master.call('CLIENT', 'PAUSE', '1000', 'WRITE'); // master 1 holds every write for 1 s
      await expect(store.claim(id, 60_000)).rejects.toBeInstanceOf(DedupeUnavailableError);
      await master.set(`slow:fence:${hashTag(id)}`, '1'); // answered once the stall is over
      await vi.waitFor(async () => expect(await master.exists(`slow:default:dedupe:${hashTag(id)}`)).toBe(0));
      expect(await master.exists(`slow:default:claims:${hashTag(id)}`)).toBe(0);
      await vi.waitFor(() => expect(store.available).toBe(true), { timeout: 10_000 });
      expect(await store.claim(id, 60_000)).toMatchObject({ status: 'claimed', abandoned: 0 });
    } finally {
      master.disconnect();
      await store.close();
      client.disconnect();
    }
  });

  it('a failover to a replica: leases and done records carried over, the client follows the new master', async () => {
    const c = cluster as RedisCluster;
    const store = createRedisDedupe({ url: url(), prefix: 'failover', logger: silentLogger() });
    const ids: string[] = [];
    for (let i = 0; ids.length < 20; i++) {
      if ((await c.ownerOf(hashTag(`evt-fo-${i}`))) === 0) ids.push(`evt-fo-${i}`);
    }
    const tokens = new Map<string, string>();
    for (const [i, id] of ids.entries()) {
      const claim = await store.claim(id, 60_000);
      if (claim.status !== 'claimed') throw new Error(claim.status);
      if (i % 2 === 0) expect(await store.complete(id, claim.token, 60_000)).toBe(true);
      else tokens.set(id, claim.token);
    }
    await c.failover(3); // a graceful failover: the replica has every write before it takes over
    for (const [i, id] of ids.entries()) {
      if (i % 2 === 0) expect(await store.claim(id, 60_000)).toEqual({ status: 'duplicate' });
      else expect(await store.claim(id, 60_000)).toMatchObject({ status: 'in_progress' });
    }
    for (const [id, token] of tokens) expect(await store.complete(id, token, 60_000)).toBe(true);
    await vi.waitFor(() => expect(store.available).toBe(true), { timeout: 10_000 });
    await store.close();
  }, 60_000);

  it('two workers race over the same 1,000 events while a master restarts: none lost, none twice outside the crash window', async () => {
    const c = cluster as RedisCluster;
    const prefix = `race-${Date.now()}`;
    const workers = [
      runWorker(url(), ['1000', '7', '--prefix', prefix, '--lease-ms', '2000', '--stdout']),
      runWorker(url(), ['1000', '99', '--prefix', prefix, '--lease-ms', '2000', '--stdout']),
    ];
    // A third of the way through, kill the master of a third of the slots, then start it again.
    await vi.waitFor(() => expect(workers.reduce((n, w) => n + w.handled.length, 0)).toBeGreaterThan(300), {
      timeout: 60_000,
      interval: 10,
    });
    await c.pause(2);
    await c.resume(2);
    const exits = await Promise.all(workers.map((w) => w.exit));
    const output = () => workers.map((w) => w.output.join('\n')).join('\n');
    expect(exits, output()).toEqual([0, 0]);

    const handled = counts(workers.flatMap((w) => w.handled));
    expect(handled.size, output()).toBe(1000);
    // The crash window: the handler succeeded, `complete` failed (the master was down), the
    // message was acked anyway, and a later copy ran the handler again after the lease.
    const notRecorded = new Set(workers.flatMap((w) => w.completeFailed));
    const twice = [...handled].filter(([, n]) => n > 1).map(([id]) => id);
    expect(
      twice.filter((id) => !notRecorded.has(id)),
      output(),
    ).toEqual([]);
    // The restart was seen, and logged as one outage per worker, not once per message (events of
    // the other masters' slots were answered meanwhile). A flap or two at its end is tolerated.
    expect(
      workers.some((w) => w.unavailable > 0),
      output(),
    ).toBe(true);
    for (const w of workers) expect(w.unavailable, output()).toBeLessThanOrEqual(3);
  }, 120_000);

  it('a Cluster client of your own works too', async () => {
    const c = cluster as RedisCluster;
    const client = new Cluster([{ host: '127.0.0.1', port: (c.nodes[0] as { port: number }).port }], {
      enableOfflineQueue: false,
    });
    const store = createRedisDedupe({ client, prefix: 'own', logger: silentLogger() });
    const claim = await store.claim('evt-own', 60_000);
    expect(claim.status).toBe('claimed');
    await store.close();
    expect(client.status).toBe('ready'); // not ours to close
    client.disconnect();
  });
});

interface Worker {
  readonly exit: Promise<number | null>;
  readonly handled: string[];
  readonly completeFailed: string[];
  unavailable: number;
  readonly output: string[];
}

function runWorker(clusterUrl: string, args: string[]): Worker {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER, clusterUrl, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const worker: Worker = {
    exit: new Promise((resolve) => child.on('exit', (code) => resolve(code))),
    handled: [],
    completeFailed: [],
    unavailable: 0,
    output: [],
  };
  createInterface({ input: child.stdout }).on('line', (line) => {
    if (line.startsWith('handled ')) return void worker.handled.push(line.slice('handled '.length));
    if (line.startsWith('started ')) return;
    worker.output.push(line);
    if (!line.startsWith('{')) return;
    const entry = JSON.parse(line) as { msg?: string; event_id?: string };
    if (entry.msg?.startsWith('could not record event as done') && entry.event_id) {
      worker.completeFailed.push(entry.event_id);
    }
    if (entry.msg?.startsWith('dedupe store unavailable')) worker.unavailable++;
  });
  createInterface({ input: child.stderr }).on('line', (line) => worker.output.push(line));
  return worker;
}

function counts(list: string[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const id of list) m.set(id, (m.get(id) ?? 0) + 1);
  return m;
}

/** A loopback TCP proxy to `port` that starts relaying each connection `holdMs` after it opens. */
async function holdingProxy(port: number, holdMs: number): Promise<{ server: Server; port: number }> {
  const server = createServer((inbound) => {
    const outbound = connect(port, '127.0.0.1');
    const end = () => {
      inbound.destroy();
      outbound.destroy();
    };
    inbound.on('error', end).on('close', end);
    outbound.on('error', end).on('close', end);
    inbound.pause();
    setTimeout(() => {
      inbound.pipe(outbound);
      outbound.pipe(inbound);
      inbound.resume();
    }, holdMs).unref();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port };
}
