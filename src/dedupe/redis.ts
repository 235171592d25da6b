import { randomBytes } from 'node:crypto';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { backoff } from '../core/backoff.js';
import { ConfigError, DedupeUnavailableError, errorMessage } from '../core/errors.js';
import { createLogger } from '../core/logger.js';
import { type LuaScript, runScript, type ScriptArg, ScriptBatcher } from './redis-batch.js';
import {
  ClusterHealth,
  clusterOptions,
  createCluster,
  parseClusterNodes,
  parseClusterUrl,
  REDIS_CLUSTER_SCHEME,
} from './redis-cluster.js';
import { RedisKeys } from './redis-keys.js';
import { MAX_OWED_CALLS, mayHaveRun, OwedCalls } from './redis-owed.js';
import { REDIS_SCRIPTS } from './redis-scripts.js';
import {
  ABANDONED_CLAIM_MEMORY_MS,
  type ClaimResult,
  type DedupeState,
  type DedupeStore,
  PUBLISHER_RETRY_WINDOW_MS,
} from './types.js';

export { hashTag } from './redis-keys.js';
export { REDIS_SCRIPTS } from './redis-scripts.js';

export interface RedisDedupeOptions {
  /**
   * `redis://[user:password@]host:port[/db]`, `rediss://…` for TLS, or
   * `redis-cluster://[user:password@]host:port,host:port` for a Redis Cluster (seed nodes).
   * Ignored when `client` is given.
   */
  readonly url?: string;
  /** A Redis Cluster's seed nodes, `host:port` each (instead of a `redis-cluster://` url). */
  readonly nodes?: readonly string[];
  /**
   * Your own ioredis client (`Redis`, or `Cluster` for a Redis Cluster). It should have
   * `enableOfflineQueue: false` so an outage fails fast.
   */
  readonly client?: Redis | Cluster;
  /** First part of every key. Default `partner-events`. */
  readonly prefix?: string;
  /** Second part of every key, so one Redis can serve several consumers. Default `default`. */
  readonly tenant?: string;
  /** Outage transitions and start-up warnings are logged here (once each, never per message). */
  readonly logger?: Logger;
  /** Retention the consumer will use, for the start-up check against the 48 h retry window. */
  readonly retentionMs?: number;
}

/** Connection settings that make an outage fail fast instead of queueing commands. */
export const FAIL_FAST_OPTIONS = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: 2000,
  connectTimeout: 5000,
  // Reconnect forever, backing off to 2 s: the worker recovers by itself when Redis returns.
  retryStrategy: (times: number) => backoff(times, { baseMs: 100, maxMs: 2000, jitter: 'none' }),
  enableAutoPipelining: true,
} satisfies RedisOptions;

/**
 * Dedupe state in Redis or a Redis Cluster, for several workers on several hosts. Each call is one
 * round trip: a Lua script (loaded once per connection, then called by SHA) that claims with
 * `SET NX PX`, or acts only for the owner token (extend, complete, release). Fails closed: while
 * Redis (or, on a cluster, the master of the event's slot) is unreachable every call rejects with
 * `DedupeUnavailableError`, so nothing is acked; `available` turns false and the outage is logged
 * once. Concurrent calls are pipelined (on one Redis, a turn's calls as one pipeline: ScriptBatcher).
 */
export class RedisDedupeStore implements DedupeStore {
  readonly persistence = { kind: 'server' } as const;
  readonly #redis: Redis | Cluster;
  readonly #ownsClient: boolean;
  readonly #keys: RedisKeys;
  readonly #health: ClusterHealth | undefined;
  /** One Redis: the script calls of a turn go as one pipeline (a cluster auto-pipelines by node). */
  readonly #batcher: ScriptBatcher | undefined;
  readonly #logger: Logger;
  /** Undoings of failed claims and failed releases, sent until Redis answers them. */
  readonly #owed = new OwedCalls(() =>
    this.#logger.warn(
      { max: MAX_OWED_CALLS },
      'Redis dedupe store: too many failed claims and releases to correct; the oldest are given up (their events may count an abandoned claim)',
    ),
  );
  readonly #tokenPrefix = `${randomBytes(6).toString('hex')}.`;
  #tokenSeq = 0;
  #downSince: number | undefined;
  #everReady = false;
  /** Calls waiting for the first connection: each removes itself when its wait times out. */
  readonly #firstReadyWaiters = new Set<() => void>();
  #checked = false;
  #closed = false;

  constructor(options: RedisDedupeOptions) {
    this.#logger = options.logger ?? createLogger();
    this.#ownsClient = !options.client;
    const hashTagged =
      options.client?.isCluster ??
      (options.nodes !== undefined || options.url?.startsWith(REDIS_CLUSTER_SCHEME) === true);
    const base = `${options.prefix ?? 'partner-events'}:${options.tenant ?? 'default'}`;
    if (hashTagged && /[{}]/.test(base)) {
      throw new ConfigError(`Redis Cluster: prefix and tenant must not contain { or } (got "${base}")`);
    }
    const redis = options.client ?? openClient(options);
    this.#redis = redis;
    this.#keys = new RedisKeys(base, hashTagged);
    const up = () => {
      loadScripts(redis);
      this.#upIfServed(options.retentionMs);
    };
    redis.on('error', (error: Error) => this.#down(error));
    redis.on('close', () => this.#down(new Error('connection closed')));
    if (redis instanceof Cluster) {
      const health = new ClusterHealth(redis, (down) => (down ? this.#down(down) : up()));
      this.#health = health;
      // Ready once every master is connected too: without an offline queue, a command for a
      // master whose connection is still being made would fail.
      const connected = () => void health.connectMasters().then(up);
      redis.on('ready', connected);
      if (redis.status === 'ready') connected();
    } else {
      this.#batcher = new ScriptBatcher(redis, (cause) => this.#unavailable(cause));
      redis.on('ready', up);
      if (redis.status === 'ready') up();
    }
  }

  /** True while connected (on a cluster: while every slot's master answers); readiness reads it. */
  get available(): boolean {
    return this.#redis.status === 'ready' && (this.#health?.healthy ?? true);
  }

  async claim(eventId: string, leaseMs: number): Promise<ClaimResult> {
    if (!this.#usable()) await this.#beforeFirstCall();
    const token = this.#tokenPrefix + (++this.#tokenSeq).toString(36);
    const keys = this.#keys.of(eventId);
    let reply: [number, number, number];
    try {
      const memoryMs = leaseMs + ABANDONED_CLAIM_MEMORY_MS;
      reply = (await this.#run(REDIS_SCRIPTS.claim, [...keys, token, leaseMs, memoryMs])) as typeof reply;
    } catch (error) {
      // Reported as a failure (the consumer retries the message), the claim may run all the same:
      // a lease nobody holds, which would count as abandoned. Undone once Redis answers.
      if (mayHaveRun(error)) this.#owed.add(token, () => this.#run(REDIS_SCRIPTS.unclaim, [...keys, token]));
      throw error;
    }
    const status = reply[0];
    if (status === 1) return { status: 'claimed', token, abandoned: reply[2] - 1 };
    if (status === 2) return { status: 'duplicate' };
    return { status: 'in_progress', retryAfterMs: Math.max(0, reply[1]) };
  }

  async extend(eventId: string, token: string, leaseMs: number): Promise<boolean> {
    if (!this.#usable()) await this.#beforeFirstCall();
    const keys = this.#keys.of(eventId);
    const memoryMs = leaseMs + ABANDONED_CLAIM_MEMORY_MS;
    return (await this.#run(REDIS_SCRIPTS.extend, [...keys, token, leaseMs, memoryMs])) === 1;
  }

  async complete(eventId: string, token: string, retentionMs: number): Promise<boolean> {
    if (!this.#usable()) await this.#beforeFirstCall();
    return (await this.#run(REDIS_SCRIPTS.complete, [...this.#keys.of(eventId), token, retentionMs])) === 1;
  }

  async release(eventId: string, token: string): Promise<void> {
    if (!this.#usable()) await this.#beforeFirstCall();
    const keysAndToken = [...this.#keys.of(eventId), token];
    try {
      await this.#run(REDIS_SCRIPTS.release, keysAndToken);
    } catch (error) {
      // Unreleased, the lease of a failure this worker reported would count as abandoned.
      this.#owed.add(token, () => this.#run(REDIS_SCRIPTS.release, keysAndToken));
      throw error;
    }
  }

  async forget(eventId: string): Promise<boolean> {
    if (!this.#usable()) await this.#beforeFirstCall();
    return (await this.#run(REDIS_SCRIPTS.forget, [this.#keys.lease(eventId)])) === 1;
  }

  async peek(eventId: string): Promise<DedupeState> {
    if (!this.#usable()) await this.#beforeFirstCall();
    let value: string | null;
    try {
      value = await this.#redis.get(this.#keys.lease(eventId));
    } catch (cause) {
      throw this.#unavailable(cause);
    }
    if (value === null) return 'absent';
    return value.startsWith('d:') ? 'done' : 'in_progress';
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Before QUIT, which Redis would run ahead of calls still waiting for the turn's pipeline.
    await this.#owed.close();
    this.#health?.stop();
    if (!this.#ownsClient) return;
    try {
      await this.#redis.quit();
    } catch {
      this.#redis.disconnect();
    }
  }

  /**
   * One round trip: EVALSHA (on one Redis, in the turn's pipeline; on a cluster, auto-pipelined),
   * EVAL after NOSCRIPT. No async frame around the batcher's promise: this is the hot path.
   */
  #run(lua: LuaScript, keysAndArgs: ScriptArg[]): Promise<unknown> {
    if (this.#batcher) return this.#batcher.run(lua, keysAndArgs);
    return runScript(this.#redis, lua, keysAndArgs, (cause) => this.#unavailable(cause));
  }

  /** The common case, checked without a promise: open, and connected at least once. */
  #usable(): boolean {
    return this.#everReady && !this.#closed;
  }

  async #beforeFirstCall(): Promise<void> {
    if (this.#closed) throw new DedupeUnavailableError('Redis dedupe store is closed');
    // Not the client's status: a cluster is 'ready' once it knows the slots, before its masters are.
    if (!this.#everReady) await this.#waitForFirstConnection();
  }

  #unavailable(cause: unknown): DedupeUnavailableError {
    // On a cluster one slot's master can be gone while the connection as a whole is fine.
    if (this.#health && cause instanceof Error) this.#health.markDown(cause);
    return new DedupeUnavailableError(`Redis dedupe store unavailable: ${errorMessage(cause)}`, { cause });
  }

  /**
   * Until the first connection, a call waits for it (briefly); after that an outage fails fast.
   * Not `Promise.race` with one promise of the first connection: each race would leave a
   * reaction on it until Redis first answers, for every call of a worker that never reaches it.
   */
  #waitForFirstConnection(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const ready = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.#firstReadyWaiters.delete(ready);
        reject(new DedupeUnavailableError('Redis dedupe store: no connection yet'));
      }, FAIL_FAST_OPTIONS.connectTimeout);
      this.#firstReadyWaiters.add(ready);
    });
  }

  #down(error: Error): void {
    if (this.#closed || this.#downSince !== undefined) return;
    this.#downSince = Date.now();
    this.#logger.error(
      { err: error.message },
      'Redis dedupe store unreachable: events are not acked and will be retried until it returns',
    );
  }

  #upIfServed(retentionMs: number | undefined): void {
    if (this.#redis.status !== 'ready') return;
    this.#everReady = true;
    for (const ready of this.#firstReadyWaiters) ready();
    this.#firstReadyWaiters.clear();
    if (!this.available) return;
    this.#owed.retryNow();
    if (this.#downSince !== undefined) {
      this.#logger.warn({ outage_ms: Date.now() - this.#downSince }, 'Redis dedupe store reachable again');
      this.#downSince = undefined;
    }
    if (!this.#checked) {
      this.#checked = true;
      void checkConfiguration(this.#redis, this.#logger, retentionMs, this.#keys.prefix);
    }
  }
}

/** Warnings that save an incident: keys that Redis may evict, retention shorter than retries. */
async function checkConfiguration(
  redis: Redis | Cluster,
  logger: Logger,
  retentionMs: number | undefined,
  prefix: string,
): Promise<void> {
  if (retentionMs !== undefined && retentionMs < PUBLISHER_RETRY_WINDOW_MS) {
    logger.warn(
      { retention_ms: retentionMs },
      'dedupe retention is shorter than the publisher’s 48 h retry window',
    );
  }
  try {
    const reply = (await redis.config('GET', 'maxmemory-policy')) as string[];
    const policy = reply[1];
    // Every dedupe key has a TTL, so volatile-* policies can evict them too: only noeviction is safe.
    if (policy && policy !== 'noeviction') {
      logger.warn(
        { maxmemory_policy: policy },
        'Redis may evict dedupe keys under memory pressure (maxmemory-policy is not noeviction): an evicted key lets a duplicate through',
      );
    }
    logger.info({ maxmemory_policy: policy, prefix: prefix }, 'Redis dedupe store connected');
  } catch {
    logger.info(
      'Redis dedupe store connected; could not read maxmemory-policy (CONFIG is disabled on some managed services): make sure it is noeviction',
    );
  }
}

export function createRedisDedupe(options: RedisDedupeOptions): RedisDedupeStore {
  return new RedisDedupeStore(options);
}

/**
 * SCRIPT LOAD on every node that serves keys (on connecting, and on a cluster again once every
 * slot is served), so the first EVALSHA of each script finds it; NOSCRIPT is the fallback.
 */
function loadScripts(redis: Redis | Cluster): void {
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
  for (const node of nodes) {
    for (const lua of Object.values(REDIS_SCRIPTS)) node.script('LOAD', lua.lua).catch(() => undefined);
  }
}

/** A client for the options: a Cluster for `redis-cluster://…` or `nodes`, else one Redis. */
function openClient(options: RedisDedupeOptions): Redis | Cluster {
  if (options.nodes) return createCluster(parseClusterNodes(options.nodes), clusterOptions({}));
  if (options.url?.startsWith(REDIS_CLUSTER_SCHEME)) {
    const { nodes, ...credentials } = parseClusterUrl(options.url);
    return createCluster(nodes, clusterOptions(credentials));
  }
  if (!options.url) throw new DedupeUnavailableError('createRedisDedupe needs a url, nodes or a client');
  return new Redis(options.url, FAIL_FAST_OPTIONS);
}
