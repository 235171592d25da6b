import { randomBytes } from 'node:crypto';
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { backoff } from '../core/backoff.js';
import { DedupeUnavailableError, errorMessage } from '../core/errors.js';
import { createLogger } from '../core/logger.js';
import {
  ABANDONED_CLAIM_MEMORY_MS,
  type ClaimResult,
  type DedupeState,
  type DedupeStore,
  PUBLISHER_RETRY_WINDOW_MS,
} from './types.js';

export interface RedisDedupeOptions {
  /** `redis://[user:password@]host:port[/db]` or `rediss://…` for TLS. Ignored when `client` is given. */
  readonly url?: string;
  /** Your own ioredis client. It should have `enableOfflineQueue: false` so an outage fails fast. */
  readonly client?: Redis;
  /** First part of every key. Default `partner-events`. */
  readonly prefix?: string;
  /** Second part of every key, so one Redis can serve several consumers. Default `default`. */
  readonly tenant?: string;
  /** Outage transitions and start-up warnings are logged here (once each, never per message). */
  readonly logger?: Logger;
  /** Retention the consumer will use, for the start-up check against the 48 h retry window. */
  readonly retentionMs?: number;
}

// Values: `c:<token>` while claimed (key expires with the lease), `d:<token>` once done (key
// expires with the retention). Every script compares the owner token first, atomically.
// KEYS[2] counts the claims since the event was first claimed or last released; complete and
// release delete it, so every claim but the current one was abandoned (its lease ran out).
const CLAIM = `
if redis.call('SET', KEYS[1], 'c:' .. ARGV[1], 'NX', 'PX', ARGV[2]) then
  local n = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1, 0, n}
end
local v = redis.call('GET', KEYS[1])
if string.sub(v, 1, 2) == 'd:' then return {2, 0, 0} end
return {3, redis.call('PTTL', KEYS[1]), 0}`;

const EXTEND = `
if redis.call('GET', KEYS[1]) == 'c:' .. ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`;

const COMPLETE = `
if redis.call('GET', KEYS[1]) == 'c:' .. ARGV[1] then
  redis.call('SET', KEYS[1], 'd:' .. ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[2])
  return 1
end
return 0`;

const RELEASE = `
if redis.call('GET', KEYS[1]) == 'c:' .. ARGV[1] then
  redis.call('DEL', KEYS[2])
  return redis.call('DEL', KEYS[1])
end
return 0`;

// Only a done record: a live lease belongs to a worker that is handling the event right now.
const FORGET = `
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 2) == 'd:' then return redis.call('DEL', KEYS[1]) end
return 0`;

interface DedupeCommands {
  pheClaim(
    key: string,
    claimsKey: string,
    token: string,
    leaseMs: number,
    memoryMs: number,
  ): Promise<[number, number, number]>;
  pheExtend(key: string, token: string, leaseMs: number): Promise<number>;
  pheComplete(key: string, claimsKey: string, token: string, retentionMs: number): Promise<number>;
  pheRelease(key: string, claimsKey: string, token: string): Promise<number>;
  pheForget(key: string): Promise<number>;
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
 * Dedupe state in Redis, for several workers on several hosts. Claim is `SET NX PX`; extend,
 * complete and release are Lua scripts that act only for the owner token. Fails closed: while
 * Redis is unreachable every call rejects with `DedupeUnavailableError`, so nothing is acked;
 * `available` turns false and the outage is logged once. Concurrent calls are pipelined.
 */
export class RedisDedupeStore implements DedupeStore {
  readonly persistence = { kind: 'server' } as const;
  readonly #redis: Redis & DedupeCommands;
  readonly #ownsClient: boolean;
  readonly #prefix: string;
  readonly #claimsPrefix: string;
  readonly #logger: Logger;
  readonly #tokenPrefix = `${randomBytes(6).toString('hex')}.`;
  #tokenSeq = 0;
  #downSince: number | undefined;
  #everReady = false;
  readonly #firstReady: Promise<void>;
  #checked = false;
  #closed = false;

  constructor(options: RedisDedupeOptions) {
    if (!options.client && !options.url)
      throw new DedupeUnavailableError('createRedisDedupe needs a url or a client');
    this.#logger = options.logger ?? createLogger();
    this.#ownsClient = !options.client;
    const redis = options.client ?? new Redis(options.url as string, FAIL_FAST_OPTIONS);
    redis.defineCommand('pheClaim', { numberOfKeys: 2, lua: CLAIM });
    redis.defineCommand('pheExtend', { numberOfKeys: 1, lua: EXTEND });
    redis.defineCommand('pheComplete', { numberOfKeys: 2, lua: COMPLETE });
    redis.defineCommand('pheRelease', { numberOfKeys: 2, lua: RELEASE });
    redis.defineCommand('pheForget', { numberOfKeys: 1, lua: FORGET });
    this.#redis = redis as Redis & DedupeCommands;
    const base = `${options.prefix ?? 'partner-events'}:${options.tenant ?? 'default'}`;
    this.#prefix = `${base}:dedupe:`;
    this.#claimsPrefix = `${base}:claims:`;
    // Until the first connection, calls wait for it (briefly); after that an outage fails fast.
    this.#firstReady = new Promise<void>((resolve) => redis.once('ready', () => resolve()));
    redis.on('error', (error: Error) => this.#down(error));
    redis.on('close', () => this.#down(new Error('connection closed')));
    redis.on('ready', () => this.#up(options.retentionMs));
    if (redis.status === 'ready') {
      this.#firstReady = Promise.resolve();
      this.#up(options.retentionMs);
    }
  }

  /** True while connected; the worker's readiness reads this. */
  get available(): boolean {
    return this.#redis.status === 'ready';
  }

  async claim(eventId: string, leaseMs: number): Promise<ClaimResult> {
    const token = this.#tokenPrefix + (++this.#tokenSeq).toString(36);
    const [status, ttl, claims] = await this.#call(() =>
      this.#redis.pheClaim(
        this.#key(eventId),
        this.#claimsKey(eventId),
        token,
        leaseMs,
        leaseMs + ABANDONED_CLAIM_MEMORY_MS,
      ),
    );
    if (status === 1) return { status: 'claimed', token, abandoned: claims - 1 };
    if (status === 2) return { status: 'duplicate' };
    return { status: 'in_progress', retryAfterMs: Math.max(0, ttl) };
  }

  async extend(eventId: string, token: string, leaseMs: number): Promise<boolean> {
    return (await this.#call(() => this.#redis.pheExtend(this.#key(eventId), token, leaseMs))) === 1;
  }

  async complete(eventId: string, token: string, retentionMs: number): Promise<boolean> {
    return (
      (await this.#call(() =>
        this.#redis.pheComplete(this.#key(eventId), this.#claimsKey(eventId), token, retentionMs),
      )) === 1
    );
  }

  async release(eventId: string, token: string): Promise<void> {
    await this.#call(() => this.#redis.pheRelease(this.#key(eventId), this.#claimsKey(eventId), token));
  }

  async forget(eventId: string): Promise<boolean> {
    return (await this.#call(() => this.#redis.pheForget(this.#key(eventId)))) === 1;
  }

  async peek(eventId: string): Promise<DedupeState> {
    const value = await this.#call(() => this.#redis.get(this.#key(eventId)));
    if (value === null) return 'absent';
    return value.startsWith('d:') ? 'done' : 'in_progress';
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (!this.#ownsClient) return;
    try {
      await this.#redis.quit();
    } catch {
      this.#redis.disconnect();
    }
  }

  #key(eventId: string): string {
    return this.#prefix + eventId;
  }

  #claimsKey(eventId: string): string {
    return this.#claimsPrefix + eventId;
  }

  async #call<T>(run: () => Promise<T>): Promise<T> {
    if (this.#closed) throw new DedupeUnavailableError('Redis dedupe store is closed');
    if (!this.#everReady && this.#redis.status !== 'ready') await this.#waitForFirstConnection();
    try {
      return await run();
    } catch (cause) {
      throw new DedupeUnavailableError(`Redis dedupe store unavailable: ${errorMessage(cause)}`, {
        cause,
      });
    }
  }

  async #waitForFirstConnection(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new DedupeUnavailableError('Redis dedupe store: no connection yet')),
        FAIL_FAST_OPTIONS.connectTimeout,
      );
    });
    try {
      await Promise.race([this.#firstReady, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  #down(error: Error): void {
    if (this.#closed || this.#downSince !== undefined) return;
    this.#downSince = Date.now();
    this.#logger.error(
      { err: error.message },
      'Redis dedupe store unreachable: events are not acked and will be retried until it returns',
    );
  }

  #up(retentionMs: number | undefined): void {
    this.#everReady = true;
    if (this.#downSince !== undefined) {
      this.#logger.warn({ outage_ms: Date.now() - this.#downSince }, 'Redis dedupe store reachable again');
      this.#downSince = undefined;
    }
    if (!this.#checked) {
      this.#checked = true;
      void this.#checkConfiguration(retentionMs);
    }
  }

  /** Warnings that save an incident: keys that Redis may evict, retention shorter than retries. */
  async #checkConfiguration(retentionMs: number | undefined): Promise<void> {
    if (retentionMs !== undefined && retentionMs < PUBLISHER_RETRY_WINDOW_MS) {
      this.#logger.warn(
        { retention_ms: retentionMs },
        'dedupe retention is shorter than the publisher’s 48 h retry window',
      );
    }
    try {
      const reply = (await this.#redis.config('GET', 'maxmemory-policy')) as string[];
      const policy = reply[1];
      // Every dedupe key has a TTL, so volatile-* policies can evict them too: only noeviction is safe.
      if (policy && policy !== 'noeviction') {
        this.#logger.warn(
          { maxmemory_policy: policy },
          'Redis may evict dedupe keys under memory pressure (maxmemory-policy is not noeviction): an evicted key lets a duplicate through',
        );
      }
      this.#logger.info({ maxmemory_policy: policy, prefix: this.#prefix }, 'Redis dedupe store connected');
    } catch {
      this.#logger.info(
        'Redis dedupe store connected; could not read maxmemory-policy (CONFIG is disabled on some managed services): make sure it is noeviction',
      );
    }
  }
}

export function createRedisDedupe(options: RedisDedupeOptions): RedisDedupeStore {
  return new RedisDedupeStore(options);
}
