import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

/** Whether `redis-server` is on PATH. CI installs it (.ci/run); so does `npm test` when it can. */
export const HAS_REDIS = spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;

if (!HAS_REDIS && process.env.CI) {
  throw new Error('redis-server is missing in CI: .ci/run must install it (apt-get install redis-server)');
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * A redis-server of our own on a free loopback port, stopped by PID. Without persistence unless
 * `args` turn it on (the cluster's nodes keep an AOF, so a restarted master keeps its keys).
 */
export class RedisServer {
  readonly port: number;
  readonly url: string;
  readonly #dir = mkdtempSync(join(tmpdir(), 'phe-redis-'));
  readonly #args: readonly string[];
  #child: ChildProcess | undefined;

  private constructor(port: number, args: readonly string[]) {
    this.port = port;
    this.url = `redis://127.0.0.1:${port}`;
    this.#args = args;
  }

  static async start(options: { args?: readonly string[] } = {}): Promise<RedisServer> {
    const server = new RedisServer(await freePort(), options.args ?? []);
    await server.resume();
    return server;
  }

  /** Starts (again) on the same port: an outage ends. Data is gone unless `args` persist it. */
  async resume(): Promise<void> {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        this.#dir,
        ...this.#args,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.#child = child;
    await new Promise<void>((resolve, reject) => {
      let out = '';
      const onData = (chunk: Buffer) => {
        out += chunk.toString();
        if (out.includes('Ready to accept connections')) {
          child.stdout?.off('data', onData);
          resolve();
        }
      };
      child.stdout?.on('data', onData);
      child.once('exit', (code) => reject(new Error(`redis-server exited (${code}): ${out}`)));
    });
    child.stdout?.resume();
    child.stderr?.resume();
  }

  /** Stops the server we started (by its PID) and waits for it to exit: an outage begins. */
  async pause(): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }

  async stop(): Promise<void> {
    await this.pause();
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

const CLUSTER_SLOTS = 16_384;

/**
 * A Redis Cluster of our own: `masters` redis-servers on loopback ports (`--cluster-enabled yes`,
 * nodes.conf and an AOF with `appendfsync always` in each node's temp dir), slots split evenly
 * with CLUSTER ADDSLOTSRANGE and joined with CLUSTER MEET. `restart(i)` kills master i and starts
 * it again with its nodes.conf and AOF: it rejoins owning the same slots and keys.
 */
export class RedisCluster {
  /** The masters first (index 0 … masters-1, in slot order), then the replicas. */
  readonly nodes: readonly RedisServer[];
  readonly #masters: number;

  private constructor(nodes: readonly RedisServer[], masters: number) {
    this.nodes = nodes;
    this.#masters = masters;
  }

  /** `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,…` (what `--dedupe` takes). */
  get url(): string {
    return `redis-cluster://${this.nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`;
  }

  /** `replicaOf`: one replica per entry, of the master with that index. */
  static async start(
    options: { masters?: number; replicaOf?: readonly number[]; nodeTimeoutMs?: number } = {},
  ): Promise<RedisCluster> {
    const args = [
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      'nodes.conf',
      '--cluster-node-timeout',
      String(options.nodeTimeoutMs ?? 1000),
      '--cluster-announce-ip',
      '127.0.0.1',
      '--appendonly',
      'yes',
      '--appendfsync',
      'always',
    ];
    const masters = options.masters ?? 3;
    const replicaOf = options.replicaOf ?? [];
    const nodes = await Promise.all(
      Array.from({ length: masters + replicaOf.length }, () => RedisServer.start({ args })),
    );
    const cluster = new RedisCluster(nodes, masters);
    try {
      await cluster.#assignSlotsAndMeet();
      await cluster.waitUntilOk();
      for (const [i, master] of replicaOf.entries()) await cluster.#replicate(masters + i, master);
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  async #assignSlotsAndMeet(): Promise<void> {
    const per = Math.ceil(CLUSTER_SLOTS / this.#masters);
    await Promise.all(
      this.nodes.slice(0, this.#masters).map((node, i) =>
        this.#admin(node, async (redis) => {
          const last = Math.min(CLUSTER_SLOTS, (i + 1) * per) - 1;
          await redis.call('CLUSTER', 'ADDSLOTSRANGE', String(i * per), String(last));
          await redis.call('CLUSTER', 'SET-CONFIG-EPOCH', String(i + 1));
        }),
      ),
    );
    const [first, ...rest] = this.nodes;
    if (!first) throw new Error('a cluster needs at least one node');
    await this.#admin(first, async (redis) => {
      for (const node of rest) await redis.call('CLUSTER', 'MEET', '127.0.0.1', String(node.port));
    });
  }

  /** Waits until every node says `cluster_state:ok` and knows every other node. */
  async waitUntilOk(timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    for (;;) {
      const infos = await Promise.all(
        this.nodes.map((node) =>
          this.#admin(node, (redis) => redis.call('CLUSTER', 'INFO') as Promise<string>).catch(String),
        ),
      );
      const ok = infos.every(
        (info) =>
          info.includes('cluster_state:ok') && info.includes(`cluster_known_nodes:${this.nodes.length}`),
      );
      if (ok) return;
      last = infos.join('\n');
      if (Date.now() > deadline) throw new Error(`cluster not ok after ${timeoutMs} ms:\n${last}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  /** The index of the master that owns `key`'s slot. */
  async ownerOf(key: string): Promise<number> {
    const first = this.nodes[0] as RedisServer;
    const slot = (await this.#admin(first, (redis) => redis.call('CLUSTER', 'KEYSLOT', key))) as number;
    const per = Math.ceil(CLUSTER_SLOTS / this.#masters);
    return Math.floor(slot / per);
  }

  /** Node `replica` becomes a replica of master `master`; resolves once it has synced. */
  async #replicate(replica: number, master: number): Promise<void> {
    const id = await this.#admin(this.nodes[master] as RedisServer, (r) => r.call('CLUSTER', 'MYID'));
    const node = this.nodes[replica] as RedisServer;
    // REPLICATE fails until the replica has heard of the master by gossip; once it is accepted,
    // only wait (each REPLICATE would start the sync over).
    await this.#until(`node ${replica} accepting master ${master}`, () =>
      this.#admin(node, (redis) => redis.call('CLUSTER', 'REPLICATE', String(id))).then(() => true),
    );
    await this.#until(`node ${replica} synced with master ${master}`, async () =>
      (await this.#admin(node, (redis) => redis.info('replication'))).includes('master_link_status:up'),
    );
  }

  /** A graceful failover (CLUSTER FAILOVER on replica `i`): it becomes master, with every write. */
  async failover(i: number): Promise<void> {
    const node = this.nodes[i] as RedisServer;
    await this.#admin(node, (redis) => redis.call('CLUSTER', 'FAILOVER'));
    await this.#until(`node ${i} master`, async () => {
      const role = (await this.#admin(node, (redis) => redis.call('ROLE'))) as unknown[];
      return role[0] === 'master';
    });
    await this.waitUntilOk();
  }

  async #until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await check().catch(() => false))) {
      if (Date.now() > deadline) throw new Error(`not ${what} after ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  /** Kills master `i` (SIGKILL, by PID): its slots have no master until `resume(i)`. */
  async pause(i: number): Promise<void> {
    await (this.nodes[i] as RedisServer).pause();
  }

  /** Starts master `i` again from its nodes.conf and AOF. */
  async resume(i: number): Promise<void> {
    await (this.nodes[i] as RedisServer).resume();
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((node) => node.stop()));
  }

  async #admin<T>(node: RedisServer, run: (redis: Redis) => Promise<T>): Promise<T> {
    const redis = new Redis(node.port, '127.0.0.1', {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    redis.on('error', () => undefined);
    try {
      await redis.connect();
      return await run(redis);
    } finally {
      redis.disconnect();
    }
  }
}
