import { Cluster, type ClusterNode, type ClusterOptions, type Redis } from 'ioredis';
import { backoff } from '../core/backoff.js';
import { ConfigError } from '../core/errors.js';

/** `--dedupe redis-cluster://host:port,host:port`: the seed nodes of a Redis Cluster. */
export const REDIS_CLUSTER_SCHEME = 'redis-cluster://';

const SLOTS = 16_384;
const PROBE_EVERY_MS = { baseMs: 100, maxMs: 1000 };

export interface ClusterSeed {
  readonly nodes: ClusterNode[];
  readonly username?: string;
  readonly password?: string;
}

/** `redis-cluster://[user:password@]host:port,host:port[,…]` → seed nodes and credentials. */
export function parseClusterUrl(url: string): ClusterSeed {
  if (!url.startsWith(REDIS_CLUSTER_SCHEME)) {
    throw new ConfigError(`a Redis Cluster URL starts with ${REDIS_CLUSTER_SCHEME}, got "${url}"`);
  }
  let rest = url.slice(REDIS_CLUSTER_SCHEME.length).replace(/\/$/, '');
  let username: string | undefined;
  let password: string | undefined;
  const at = rest.lastIndexOf('@');
  if (at >= 0) {
    const [user = '', pass] = rest.slice(0, at).split(':', 2);
    username = user ? decodeURIComponent(user) : undefined;
    password = pass === undefined ? undefined : decodeURIComponent(pass);
    rest = rest.slice(at + 1);
  }
  return {
    nodes: parseClusterNodes(rest.split(',')),
    ...(username === undefined ? {} : { username }),
    ...(password === undefined ? {} : { password }),
  };
}

/** `host:port` (or `[v6]:port`) strings → ioredis cluster nodes; throws ConfigError on a bad one. */
export function parseClusterNodes(list: readonly string[]): ClusterNode[] {
  const nodes = list.map((text) => {
    const match = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text.trim());
    const port = Number(match?.[3]);
    if (!match || port < 1 || port > 65_535) {
      throw new ConfigError(`a Redis Cluster node is host:port, got "${text}"`);
    }
    return { host: (match[1] ?? match[2]) as string, port };
  });
  if (nodes.length === 0) throw new ConfigError('a Redis Cluster needs at least one node');
  return nodes;
}

/**
 * Fail fast, as for one Redis: no offline queue, no waiting on CLUSTERDOWN or on a node that went
 * away (the consumer retries the message with its own backoff), but MOVED/ASK are followed and a
 * node that comes back is reconnected.
 */
export function clusterOptions(seed: Pick<ClusterSeed, 'username' | 'password'>): ClusterOptions {
  const retry = (times: number) => backoff(times, { baseMs: 100, maxMs: 2000, jitter: 'none' });
  return {
    enableOfflineQueue: false,
    enableAutoPipelining: true,
    scaleReads: 'master',
    retryDelayOnFailover: 0,
    retryDelayOnClusterDown: 0,
    retryDelayOnTryAgain: 100,
    maxRedirections: 16,
    slotsRefreshTimeout: 2000,
    clusterRetryStrategy: retry,
    // A master that restarts keeps its slots: reconnect to it rather than wait for a MOVED.
    clusterNodeRetryStrategy: retry,
    redisOptions: { maxRetriesPerRequest: 0, commandTimeout: 2000, connectTimeout: 5000, ...seed },
  };
}

export function createCluster(nodes: ClusterNode[], options: ClusterOptions): Cluster {
  return new Cluster(nodes, options as ConstructorParameters<typeof Cluster>[1]);
}

/**
 * Whether every slot has a master that answers. Marked down by a node's connection closing or a
 * failed call; then probed with backoff (refresh the slot map, then every master's CLUSTER INFO
 * must say the cluster is ok with all 16384 slots served) until it holds again.
 */
export class ClusterHealth {
  readonly #cluster: Cluster;
  readonly #onChange: (down: Error | undefined) => void;
  #down: Error | undefined;
  #probe: NodeJS.Timeout | undefined;
  #attempt = 0;
  #stopped = false;

  constructor(cluster: Cluster, onChange: (down: Error | undefined) => void) {
    this.#cluster = cluster;
    this.#onChange = onChange;
    cluster.on('+node', (node: Redis) => {
      node.on('close', () => this.markDown(new Error(`connection to ${nodeName(node)} closed`)));
    });
    cluster.on('node error', (error: Error) => this.markDown(error));
  }

  get healthy(): boolean {
    return this.#down === undefined;
  }

  /** Waits until every known master has answered once (or failed to). */
  async connectMasters(): Promise<void> {
    await Promise.allSettled(this.#cluster.nodes('master').map((node) => node.ping()));
  }

  markDown(error: Error): void {
    if (this.#stopped) return;
    if (this.#down === undefined) {
      this.#down = error;
      this.#onChange(error);
    }
    this.#schedule();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#probe);
  }

  #schedule(): void {
    if (this.#probe !== undefined || this.#stopped) return;
    const delay = backoff(++this.#attempt, { ...PROBE_EVERY_MS, jitter: 'none' });
    this.#probe = setTimeout(() => void this.#check(), delay);
    this.#probe.unref();
  }

  async #check(): Promise<void> {
    const ok = await allSlotsServed(this.#cluster).catch(() => false);
    this.#probe = undefined;
    if (this.#stopped) return;
    if (!ok) return this.#schedule();
    this.#attempt = 0;
    this.#down = undefined;
    this.#onChange(undefined);
  }
}

async function allSlotsServed(cluster: Cluster): Promise<boolean> {
  if (cluster.status !== 'ready') return false;
  await new Promise<void>((resolve) => cluster.refreshSlotsCache(() => resolve()));
  const masters = cluster.nodes('master');
  if (masters.length === 0) return false;
  // Every master, not one: a master that just restarted answers CLUSTERDOWN until it has heard
  // from the others, while they already count its slots as served.
  const infos = await Promise.all(masters.map((node) => node.call('CLUSTER', 'INFO') as Promise<string>));
  return infos.every(
    (info) => info.includes('cluster_state:ok') && info.includes(`cluster_slots_ok:${SLOTS}`),
  );
}

function nodeName(node: Redis): string {
  return `${node.options.host}:${node.options.port}`;
}
