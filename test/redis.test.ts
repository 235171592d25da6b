import { spawn } from 'node:child_process';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Redis, ReplyError } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createMemorySource } from '../adapters/memory/index.js';
import { createConsumer } from '../src/consumer/consumer.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { DedupeUnavailableError } from '../src/core/errors.js';
import { silentLogger } from '../src/core/logger.js';
import { createRedisDedupe, FAIL_FAST_OPTIONS } from '../src/dedupe/redis.js';
import { wtf8 } from '../src/dedupe/redis-keys.js';
import { MAX_OWED_CALLS, mayHaveRun, OwedCalls } from '../src/dedupe/redis-owed.js';
import { ABANDONED_CLAIM_MEMORY_MS } from '../src/dedupe/types.js';
import { HAS_REDIS, RedisServer } from './support/redis-server.js';

const WORKER = fileURLToPath(new URL('./support/redis-consumer.ts', import.meta.url));

function capturingLogger() {
  const lines: { level: number; msg: string; [k: string]: unknown }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { logger, lines };
}

/** Runs one worker process; resolves with its exit code (null when killed by a signal). */
function runWorker(url: string, args: string[]): Promise<{ code: number | null; signal: string | null }> {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER, url, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  child.stdout.resume();
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
}

function counts(list: string[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const id of list) m.set(id, (m.get(id) ?? 0) + 1);
  return m;
}

describe.skipIf(!HAS_REDIS)('Redis dedupe with a real redis-server', () => {
  let server: RedisServer;
  let admin: Redis;
  beforeAll(async () => {
    server = await RedisServer.start();
    admin = new Redis(server.url);
    admin.on('error', () => undefined); // expected while the server is paused
  });
  afterAll(async () => {
    admin.disconnect();
    await server.stop();
  });

  it('calls made before the first connection go on once it is made', async () => {
    const client = new Redis(server.url, { ...FAIL_FAST_OPTIONS, lazyConnect: true });
    const store = createRedisDedupe({ client, logger: silentLogger() });
    const waiting = [store.claim('evt-first-a', 5000), store.claim('evt-first-b', 5000)];
    await new Promise((resolve) => setTimeout(resolve, 50));
    await client.connect();
    expect((await Promise.all(waiting)).map((c) => c.status)).toEqual(['claimed', 'claimed']);
    await store.close();
    client.disconnect();
  });

  it('keys carry the prefix and the tenant, so tenants never collide', async () => {
    const a = createRedisDedupe({ url: server.url, prefix: 'p', tenant: 'acme', logger: silentLogger() });
    const b = createRedisDedupe({
      url: server.url,
      prefix: 'p',
      tenant: 'globex',
      logger: silentLogger(),
    });
    expect((await a.claim('evt-shared', 5000)).status).toBe('claimed');
    expect((await b.claim('evt-shared', 5000)).status).toBe('claimed');
    expect(await admin.exists('p:acme:dedupe:evt-shared', 'p:globex:dedupe:evt-shared')).toBe(2);
    await Promise.all([a.close(), b.close()]);
  });

  it('a well-formed id keeps its key; an id with a lone surrogate is keyed by its WTF-8 bytes, apart from every other id', async () => {
    const store = createRedisDedupe({ url: server.url, prefix: 'ids', logger: silentLogger() });
    for (const id of ['evt_\ud800', 'evt_\ud801', 'evt_\ufffd', 'evt-plain']) {
      expect((await store.claim(id, 60_000)).status).toBe('claimed');
    }
    expect(await admin.exists('ids:default:dedupe:evt-plain', 'ids:default:dedupe:evt_\ufffd')).toBe(2);
    const bytes = (hex: string) =>
      Buffer.concat([Buffer.from('ids:default:dedupe:evt_'), Buffer.from(hex, 'hex')]);
    expect(await admin.exists(bytes('eda080'), bytes('eda081'))).toBe(2);
    expect(wtf8('a\ud800b').toString('hex')).toBe('61eda08062');
    expect(wtf8('\ude00\ud83d').toString('hex')).toBe('edb880eda0bd'); // two lone surrogates
    expect(wtf8('\ud83d\ude00 é')).toEqual(Buffer.from('\ud83d\ude00 é', 'utf8')); // well-formed: UTF-8
    await store.close();
  });

  it('one round trip each: claim and complete are one EVALSHA each; scripts loaded on connecting, sent whole again only when the server lost them', async () => {
    await admin.script('FLUSH'); // a server that has never seen the scripts
    const store = createRedisDedupe({ url: server.url, prefix: 'commands', logger: silentLogger() });
    await store.peek('warm-up'); // connected (and the scripts loaded on connecting)
    const stats = async () => {
      const text = await admin.info('commandstats');
      const calls = (name: string) =>
        Number(new RegExp(`^cmdstat_${name}:calls=(\\d+)`, 'm').exec(text)?.[1] ?? 0);
      return { evalsha: calls('evalsha'), eval: calls('eval') };
    };
    const pairs = async (from: number) => {
      await Promise.all(
        Array.from({ length: 100 }, async (_, i) => {
          const claim = await store.claim(`evt-cmd-${from + i}`, 60_000);
          if (claim.status !== 'claimed') throw new Error(claim.status);
          expect(await store.complete(`evt-cmd-${from + i}`, claim.token, 60_000)).toBe(true);
        }),
      );
    };
    await admin.config('RESETSTAT');
    await pairs(0);
    // The scripts were loaded when the store connected: no NOSCRIPT, no script sent whole.
    expect(await stats()).toEqual({ evalsha: 200, eval: 0 });
    await admin.config('RESETSTAT');
    await pairs(100);
    expect(await stats()).toEqual({ evalsha: 200, eval: 0 });
    // The server forgets its scripts (restart, failover, SCRIPT FLUSH): reloaded, nothing fails.
    await admin.script('FLUSH');
    await pairs(200);
    await admin.config('RESETSTAT');
    await pairs(300);
    expect(await stats()).toEqual({ evalsha: 200, eval: 0 });
    await store.close();
  });

  it('the script calls of one turn go to Redis as pipelines of at most 32, each sent once full, in call order', async () => {
    const client = new Redis(server.url, FAIL_FAST_OPTIONS);
    const store = createRedisDedupe({ client, prefix: 'batched', logger: silentLogger() });
    await store.peek('warm-up');
    const pipeline = client.pipeline.bind(client);
    const sizes: number[] = [];
    client.pipeline = ((...args: Parameters<typeof client.pipeline>) => {
      const p = pipeline(...args);
      const exec = p.exec.bind(p);
      p.exec = ((...execArgs: Parameters<typeof p.exec>) => {
        sizes.push(p.length);
        return exec(...execArgs);
      }) as typeof p.exec;
      return p;
    }) as typeof client.pipeline;
    const claiming = Array.from({ length: 31 }, (_, i) => store.claim(`evt-b-${i}`, 60_000));
    expect(sizes).toEqual([]); // not full: waits for the end of the turn
    // The same id as the 32nd and 33rd call: they go in different pipelines, and the first still wins.
    const first = store.claim('evt-b-x', 60_000);
    expect(sizes).toEqual([32]); // full: sent at once, while this turn goes on
    const second = store.claim('evt-b-x', 60_000);
    claiming.push(...Array.from({ length: 37 }, (_, i) => store.claim(`evt-b-${31 + i}`, 60_000)));
    expect(sizes).toEqual([32, 32]);
    const claims = await Promise.all(claiming);
    expect(sizes).toEqual([32, 32, 6]);
    expect(claims.every((c) => c.status === 'claimed')).toBe(true);
    expect((await first).status).toBe('claimed');
    expect((await second).status).toBe('in_progress');
    await Promise.all([store.claim('evt-b-y', 60_000), store.claim('evt-b-z', 60_000)]);
    expect(sizes).toEqual([32, 32, 6, 2]);
    await store.close();
    client.disconnect();
  });

  it('warns at start-up when maxmemory-policy could evict dedupe keys, and not when it is noeviction', async () => {
    for (const [policy, warns] of [
      ['allkeys-lru', true],
      ['volatile-lru', true], // every dedupe key has a TTL: volatile-* evicts them too
      ['noeviction', false],
    ] as const) {
      await admin.config('SET', 'maxmemory-policy', policy);
      const { logger, lines } = capturingLogger();
      const store = createRedisDedupe({ url: server.url, logger, retentionMs: 3_600_000 });
      await store.peek('x');
      await vi.waitFor(() => expect(lines.some((l) => l.msg === 'Redis dedupe store connected')).toBe(true));
      expect(lines.some((l) => String(l.msg).includes('48 h retry window'))).toBe(true);
      expect(lines.some((l) => String(l.msg).includes('evict'))).toBe(warns);
      await store.close();
    }
  });

  it('fails closed during an outage (fast, typed), logs it once, and recovers by itself', async () => {
    const { logger, lines } = capturingLogger();
    const store = createRedisDedupe({ url: server.url, logger });
    expect((await store.claim('evt-before', 5000)).status).toBe('claimed');
    await server.pause();
    await vi.waitFor(() => expect(store.available).toBe(false));
    // Fast: every claim is refused before the event loop gets to its next turn, so none waits for
    // I/O, a command timeout or a reconnect attempt.
    const claims = Promise.allSettled(Array.from({ length: 20 }, (_, i) => store.claim(`evt-${i}`, 5000)));
    const nextTurn = new Promise<'next turn'>((resolve) => setImmediate(() => resolve('next turn')));
    const failures = await Promise.race([claims, nextTurn]);
    expect(failures).not.toBe('next turn');
    expect(
      (failures as PromiseSettledResult<unknown>[]).every(
        (r) => r.status === 'rejected' && r.reason instanceof DedupeUnavailableError,
      ),
    ).toBe(true);
    await server.resume();
    await vi.waitFor(() => expect(store.available).toBe(true), { timeout: 10_000 });
    expect((await store.claim('evt-after', 5000)).status).toBe('claimed');
    expect(lines.filter((l) => String(l.msg).includes('unreachable'))).toHaveLength(1);
    expect(lines.filter((l) => String(l.msg).includes('reachable again'))).toHaveLength(1);
    await store.close();
  });

  it('a consumer acks nothing new while Redis is down, loses nothing, and resumes when it returns', async () => {
    const source = createMemorySource();
    const handled: string[] = [];
    const { logger, lines } = capturingLogger();
    const consumer = createConsumer({
      source,
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      dedupe: createRedisDedupe({ url: server.url, prefix: 'outage', logger: silentLogger() }),
      deadLetter: '/dev/null',
      logger,
      concurrency: 4,
      retry: { maxAttempts: 1000, baseDelayMs: 20, maxDelayMs: 100 },
    });
    consumer.on('daily.data.steps.created', (event) => void handled.push(event.event_id));
    const events = Array.from({ length: 300 }, () => createTestEnvelope('daily.data.steps.created'));
    for (const e of events.slice(0, 100)) source.send(e.raw);
    await consumer.start();
    await vi.waitFor(() => expect(handled.length).toBe(100));

    await server.pause();
    for (const e of events.slice(100)) source.send(e.raw);
    // While down: every attempt is a retry; nothing is acked.
    await vi.waitFor(() =>
      expect(source.settled.filter((s) => s.outcome.kind === 'retry').length).toBeGreaterThan(200),
    );
    const ackedBeforeResume = source.settled.filter((s) => s.outcome.kind === 'ack').length;
    expect(ackedBeforeResume).toBe(100); // the 100 acked before the outage, none during it
    expect(handled.length).toBe(100);
    expect(consumer.status.dedupeAvailable).toBe(false);
    await server.resume();

    await vi.waitFor(() => expect(handled.length).toBe(300), { timeout: 15_000 });
    expect(new Set(handled).size).toBe(300);
    expect(consumer.status.dedupeAvailable).toBe(true);
    expect(source.settled.filter((s) => s.outcome.kind === 'dead')).toHaveLength(0);
    // One line when it went down, one when it came back: not one per message.
    expect(lines.filter((l) => String(l.msg).startsWith('dedupe store unavailable'))).toHaveLength(1);
    expect(lines.filter((l) => String(l.msg).startsWith('dedupe store answering again'))).toHaveLength(1);
    await consumer.stop();
  });

  it('a claim that times out (Redis slower than the command timeout) but runs later is undone: neither held nor counted as abandoned', async () => {
    const client = new Redis(server.url, { ...FAIL_FAST_OPTIONS, commandTimeout: 200 });
    const store = createRedisDedupe({ client, prefix: 'slow', logger: silentLogger() });
    const e = 'evt-slow';
    // First a worker that dies holding the event: a real abandoned claim, which must still count.
    expect((await store.claim(e, 300)).status).toBe('claimed');
    await vi.waitFor(async () => expect(await store.peek(e)).toBe('absent'));
    // Redis holds every write for 1 s (a fork, a slow disk): the claim times out after 200 ms
    // and is reported as a failure, but Redis runs it when the stall ends.
    await admin.call('CLIENT', 'PAUSE', '1000', 'WRITE');
    await expect(store.claim(e, 60_000)).rejects.toBeInstanceOf(DedupeUnavailableError);
    await admin.set('slow:fence', '1'); // answered once the stall is over and the claim has run
    await vi.waitFor(async () => expect(await store.peek(e)).toBe('absent'));
    expect(await admin.exists('slow:default:dedupe:evt-slow')).toBe(0);
    expect(await store.claim(e, 60_000)).toMatchObject({ status: 'claimed', abandoned: 1 });
    await store.close();
    client.disconnect();
  });

  it('a claim whose answer is lost with its connection is undone once the client has reconnected', async () => {
    const proxy = await cuttableProxy(server.port);
    const url = `redis://127.0.0.1:${proxy.port}`;
    const store = createRedisDedupe({ url, prefix: 'lost', logger: silentLogger() });
    await store.peek('warm-up');
    proxy.mute(); // Redis gets the claim and runs it; its answer never comes back
    const claiming = store.claim('evt-lost', 60_000);
    await vi.waitFor(async () => expect(await admin.exists('lost:default:dedupe:evt-lost')).toBe(1));
    proxy.cut();
    await expect(claiming).rejects.toBeInstanceOf(DedupeUnavailableError);
    await vi.waitFor(
      async () =>
        expect(await admin.exists('lost:default:dedupe:evt-lost', 'lost:default:claims:evt-lost')).toBe(0),
      { timeout: 5000 },
    );
    expect(await store.claim('evt-lost', 60_000)).toMatchObject({ status: 'claimed', abandoned: 0 });
    await store.close();
    proxy.close();
  });

  it('a claim whose answer is lost is undone even after its lease ran out, if nobody claimed the event since', async () => {
    const proxy = await cuttableProxy(server.port);
    const store = createRedisDedupe({
      url: `redis://127.0.0.1:${proxy.port}`,
      prefix: 'lapsed',
      logger: silentLogger(),
    });
    await store.peek('warm-up');
    proxy.mute();
    const claiming = store.claim('evt-lapsed', 300);
    await vi.waitFor(async () => expect(await admin.exists('lapsed:default:dedupe:evt-lapsed')).toBe(1));
    proxy.pause(); // the connection is lost, and no new one is made until the lease has run out
    await expect(claiming).rejects.toBeInstanceOf(DedupeUnavailableError);
    await vi.waitFor(async () => expect(await admin.exists('lapsed:default:dedupe:evt-lapsed')).toBe(0));
    proxy.resume();
    const counted = ['claims', 'owner'].map((kind) => `lapsed:default:${kind}:evt-lapsed`);
    await vi.waitFor(async () => expect(await admin.exists(...counted)).toBe(0), { timeout: 5000 });
    expect(await store.claim('evt-lapsed', 60_000)).toMatchObject({ status: 'claimed', abandoned: 0 });
    await store.close();
    proxy.close();
  });

  it('beside a worker of the version before owner keys (same keys, its own scripts), a token acts after its lease ran out only if its claim is still the last', async () => {
    // That version's claim script: a lease and a count, no owner key.
    const earlierClaim = `
if redis.call('SET', KEYS[1], 'c:' .. ARGV[1], 'NX', 'PX', ARGV[2]) then
  local n = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1, 0, n}
end
return {3, 0, 0}`;
    const store = createRedisDedupe({ url: server.url, prefix: 'mixed', logger: silentLogger() });
    const e = 'evt-mixed';
    const keys = ['dedupe', 'claims'].map((kind) => `mixed:default:${kind}:${e}`);
    const ours = await store.claim(e, 300);
    if (ours.status !== 'claimed') throw new Error(ours.status);
    await vi.waitFor(async () => expect(await store.peek(e)).toBe('absent'));
    // The earlier worker takes the event over, and its lease runs out too.
    expect(await admin.eval(earlierClaim, 2, ...keys, 'earlier.1', 300, 60_000)).toEqual([1, 0, 2]);
    await vi.waitFor(async () => expect(await store.peek(e)).toBe('absent'));
    expect(await store.complete(e, ours.token, 60_000)).toBe(false);
    expect(await store.extend(e, ours.token, 60_000)).toBe(false);
    await store.release(e, ours.token);
    expect(await store.claim(e, 60_000)).toMatchObject({ status: 'claimed', abandoned: 2 });
    await store.close();
  });

  it('a handler that overruns its timeout, then stops, gives its claim back after the lease ran out: not counted as abandoned, as on the other stores', async () => {
    const consumer = createConsumer({
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      dedupe: createRedisDedupe({ url: server.url, prefix: 'overrun', logger: silentLogger() }),
      deadLetter: '/dev/null',
      logger: silentLogger(),
      leaseMs: 300,
      handlerTimeoutMs: 200,
    });
    let stopped = 0;
    consumer.on('daily.data.steps.created', async () => {
      await new Promise((resolve) => setTimeout(resolve, 600)); // deaf to its abort signal
      stopped++;
    });
    const event = createTestEnvelope('daily.data.steps.created');
    const outcomes: string[] = [];
    for (let attempt = 1; attempt <= 4; attempt++) {
      const { outcome } = await consumer.process({ id: 'm1', body: event.raw, attempt });
      outcomes.push(outcome.kind === 'ack' ? `ack:${outcome.result}` : `${outcome.kind}:${outcome.code}`);
      await vi.waitFor(() => expect(stopped).toBe(attempt));
      // Released once the handler stopped, its lease long gone by then.
      await vi.waitFor(async () =>
        expect(await admin.exists(`overrun:default:claims:${event.eventId}`)).toBe(0),
      );
    }
    expect(outcomes).toEqual(Array.from({ length: 4 }, () => 'retry:HANDLER_TIMEOUT'));
    await consumer.stop();
  });

  it('a release that fails is sent again once Redis answers, even after the lease ran out: the failure the worker reported is not counted as abandoned', async () => {
    const proxy = await cuttableProxy(server.port);
    const store = createRedisDedupe({
      url: `redis://127.0.0.1:${proxy.port}`,
      prefix: 'unreleased',
      logger: silentLogger(),
    });
    const claim = await store.claim('evt-unreleased', 300);
    if (claim.status !== 'claimed') throw new Error(claim.status);
    proxy.pause(); // no connection for a while: the release fails at once
    await vi.waitFor(() => expect(store.available).toBe(false));
    await expect(store.release('evt-unreleased', claim.token)).rejects.toBeInstanceOf(DedupeUnavailableError);
    await vi.waitFor(async () =>
      expect(await admin.exists('unreleased:default:dedupe:evt-unreleased')).toBe(0),
    );
    proxy.resume();
    await vi.waitFor(
      async () => expect(await admin.exists('unreleased:default:claims:evt-unreleased')).toBe(0),
      {
        timeout: 5000,
      },
    );
    expect(await store.claim('evt-unreleased', 60_000)).toMatchObject({ status: 'claimed', abandoned: 0 });
    await store.close();
    proxy.close();
  });

  it('a consumer whose claims time out while Redis stalls retries them (DEDUPE_UNAVAILABLE), then handles the event: not dead as HANDLER_ABANDONED', async () => {
    const client = new Redis(server.url, { ...FAIL_FAST_OPTIONS, commandTimeout: 200 });
    const handled: string[] = [];
    const consumer = createConsumer({
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      dedupe: createRedisDedupe({ client, prefix: 'stalls', logger: silentLogger() }),
      deadLetter: '/dev/null',
      logger: silentLogger(),
      leaseMs: 500,
    });
    consumer.on('daily.data.steps.created', (event) => void handled.push(event.event_id));
    const event = createTestEnvelope('daily.data.steps.created');
    const keys = ['dedupe', 'claims'].map((kind) => `stalls:default:${kind}:${event.eventId}`);
    const outcomes: string[] = [];
    for (let attempt = 1; attempt <= 4; attempt++) {
      if (attempt <= 3) await admin.call('CLIENT', 'PAUSE', '800', 'WRITE');
      const result = await consumer.process({ id: 'm1', body: event.raw, attempt });
      const { outcome } = result;
      outcomes.push(outcome.kind === 'ack' ? `ack:${outcome.result}` : `${outcome.kind}:${outcome.code}`);
      await admin.set('stalls:fence', '1'); // the stall is over
      await vi.waitFor(async () => expect(await admin.exists(...keys)).toBe(attempt <= 3 ? 0 : 1));
    }
    expect(outcomes).toEqual([
      'retry:DEDUPE_UNAVAILABLE',
      'retry:DEDUPE_UNAVAILABLE',
      'retry:DEDUPE_UNAVAILABLE',
      'ack:handled',
    ]);
    expect(handled).toEqual([event.eventId]);
    await consumer.stop();
    client.disconnect();
  });

  it('two worker processes given the same 1,000 events (shuffled, duplicated) handle each exactly once', async () => {
    const prefix = `twoproc-${Date.now()}`;
    const [a, b] = await Promise.all([
      runWorker(server.url, ['1000', '7', '--prefix', prefix]),
      runWorker(server.url, ['1000', '99', '--prefix', prefix]),
    ]);
    expect(a.code).toBe(0);
    expect(b.code).toBe(0);
    const handled = counts(await admin.lrange(`${prefix}:handled`, 0, -1));
    expect(handled.size).toBe(1000);
    expect([...handled.values()].every((n) => n === 1)).toBe(true);
  }, 60_000);

  it('a worker killed mid-handler: after its lease expires another runs the event; nothing is lost', async () => {
    const prefix = `crash-${Date.now()}`;
    const victim = 'evt_00500';
    const lease = '1500';
    const crashed = runWorker(server.url, [
      '1000',
      '3',
      '--prefix',
      prefix,
      '--crash-at',
      victim,
      '--lease-ms',
      lease,
    ]);
    // Start the survivor once the victim is mid-handler, holding its lease.
    await vi.waitFor(async () => expect(await admin.lrange(`${prefix}:started`, 0, -1)).toContain(victim), {
      timeout: 30_000,
      interval: 20,
    });
    const survivor = runWorker(server.url, ['1000', '5', '--prefix', prefix, '--lease-ms', lease]);
    expect((await crashed).signal).toBe('SIGKILL');
    expect((await survivor).code).toBe(0);

    const started = counts(await admin.lrange(`${prefix}:started`, 0, -1));
    const handled = counts(await admin.lrange(`${prefix}:handled`, 0, -1));
    expect(started.get(victim)).toBe(2); // the crashed run and the takeover
    expect(handled.get(victim)).toBe(1);
    expect(handled.size).toBe(1000); // none lost
    // Repeats are bounded by the crash window: only events in flight in the killed worker
    // (at most its concurrency of 8) can have finished there without being marked done.
    const repeated = [...handled.values()].filter((n) => n > 1).length;
    expect(repeated).toBeLessThanOrEqual(8);
  }, 60_000);
});

describe('calls the Redis store owes (undone claims, failed releases)', () => {
  it('each is sent at once, retried with backoff and when asked until answered, given up after a day; at most MAX_OWED_CALLS, the oldest dropped, warned once', async () => {
    let now = 0;
    let warnings = 0;
    const owed = new OwedCalls(
      () => warnings++,
      () => now,
    );
    let down = true;
    let sent = 0;
    owed.add('a', () => {
      sent++;
      return down ? Promise.reject(new Error('down')) : Promise.resolve(1);
    });
    expect(sent).toBe(1);
    await vi.waitFor(() => expect(sent).toBeGreaterThanOrEqual(3)); // backoff: 100 ms, then 200 ms
    down = false;
    await vi.waitFor(() => {
      owed.retryNow(); // Redis is back
      expect(owed.size).toBe(0);
    });

    owed.add('b', () => Promise.reject(new Error('down')));
    await vi.waitFor(() => {
      now += ABANDONED_CLAIM_MEMORY_MS + 1; // its keys have expired: nothing left to correct
      owed.retryNow();
      expect(owed.size).toBe(0);
    });

    const unanswered = () => new Promise<never>(() => undefined);
    for (let i = 0; i < MAX_OWED_CALLS + 5; i++) owed.add(`t${i}`, unanswered);
    expect(owed.size).toBe(MAX_OWED_CALLS);
    expect(warnings).toBe(1);
  });

  it('a failed call may have run unless Redis answered with an error or it was never sent', () => {
    const failed = (cause: Error) => new DedupeUnavailableError('Redis dedupe store unavailable', { cause });
    const ReplyErrorClass = ReplyError as new (message: string) => Error;
    expect(mayHaveRun(failed(new Error('Command timed out')))).toBe(true);
    expect(mayHaveRun(failed(new Error('Connection is closed.')))).toBe(true);
    expect(mayHaveRun(failed(new Error('Reached the max retries per request limit (which is 0).')))).toBe(
      true,
    );
    expect(
      mayHaveRun(failed(new Error("Stream isn't writeable and enableOfflineQueue options is false"))),
    ).toBe(false);
    expect(mayHaveRun(failed(new Error("Cluster isn't ready and enableOfflineQueue options is false")))).toBe(
      false,
    );
    expect(mayHaveRun(failed(new ReplyErrorClass('CLUSTERDOWN The cluster is down')))).toBe(false);
  });
});

describe('Redis dedupe before its first connection', () => {
  it('a call waits for the first connection, then fails typed after connectTimeout; timed-out waits leave nothing behind', async () => {
    // A client never connected (lazyConnect, no connect()): no network at all.
    const client = new Redis({ ...FAIL_FAST_OPTIONS, lazyConnect: true, host: '127.0.0.1', port: 1 });
    const store = createRedisDedupe({ client, logger: silentLogger() });
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    try {
      gc();
      const before = process.memoryUsage().heapUsed;
      let calls: Promise<unknown>[] = [];
      for (let i = 0; i < 20_000; i++) calls.push(store.claim(`never-${i}`, 60_000).catch((e: unknown) => e));
      let settled = 0;
      for (const call of calls) void call.then(() => settled++);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(settled).toBe(0); // waiting for the first connection (connectTimeout: 5 s)
      const errors = await Promise.all(calls);
      expect(errors.every((e) => e instanceof DedupeUnavailableError)).toBe(true);
      expect((errors[0] as Error).message).toMatch(/no connection yet/);
      calls = [];
      errors.length = 0;
      await new Promise((resolve) => setTimeout(resolve, 10)); // the timers' lists let go too
      gc();
      // Each wait once raced one long-lived promise of the first connection, which kept a
      // reaction per call until Redis first answered: megabytes for these 20,000.
      expect(process.memoryUsage().heapUsed - before).toBeLessThan(1_000_000);
    } finally {
      await store.close();
    }
  });
});

/**
 * A loopback TCP proxy to Redis on `port`. `mute()` stops passing Redis's answers on the
 * connections open now; `cut()` closes them; `pause()` closes them and refuses new ones until
 * `resume()` (the connections it accepts then pass everything).
 */
async function cuttableProxy(port: number) {
  const pairs = new Set<{ inbound: Socket; outbound: Socket; muted: boolean }>();
  let refusing = false;
  const server = createServer((inbound) => {
    if (refusing) return void inbound.destroy();
    const pair = { inbound, outbound: connect(port, '127.0.0.1'), muted: false };
    pairs.add(pair);
    inbound.on('data', (chunk) => pair.outbound.write(chunk));
    pair.outbound.on('data', (chunk) => {
      if (!pair.muted) inbound.write(chunk);
    });
    const end = () => {
      inbound.destroy();
      pair.outbound.destroy();
      pairs.delete(pair);
    };
    inbound.on('error', end).on('close', end);
    pair.outbound.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const cut = () => {
    for (const pair of pairs) pair.inbound.destroy();
  };
  return {
    port: (server.address() as AddressInfo).port,
    mute: () => {
      for (const pair of pairs) pair.muted = true;
    },
    cut,
    pause: () => {
      refusing = true;
      cut();
    },
    resume: () => {
      refusing = false;
    },
    close: () => {
      cut();
      server.close();
    },
  };
}
