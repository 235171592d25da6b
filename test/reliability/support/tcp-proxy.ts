/**
 * A TCP proxy on 127.0.0.1 in front of a service, to take the service off the network and bring
 * it back with its state intact (an emulator that keeps its queues in memory cannot be restarted
 * without losing them). `cut()` closes the listener and resets every open connection, so clients
 * see connection resets, then refused connections; `restore()` listens again on the same port.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export class TcpProxy {
  readonly port: number;
  readonly #target: { host: string; port: number };
  readonly #sockets = new Set<Socket>();
  #server: Server | undefined;

  private constructor(port: number, target: { host: string; port: number }) {
    this.port = port;
    this.#target = target;
  }

  /** A proxy to `target` on a free loopback port. */
  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const probe = createServer();
    const port = await new Promise<number>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen(0, '127.0.0.1', () => resolve((probe.address() as { port: number }).port));
    });
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const proxy = new TcpProxy(port, target);
    await proxy.restore();
    return proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get up(): boolean {
    return this.#server !== undefined;
  }

  /** Listens again on the same port: the service is reachable again. */
  async restore(): Promise<void> {
    if (this.#server) return;
    const server = createServer((client) => this.#pipe(client));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.#server = server;
  }

  /** Takes the service off the network: no new connections, open ones reset. */
  async cut(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    if (!server) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of this.#sockets) {
      try {
        socket.resetAndDestroy(); // an RST, as when the far end dies
      } catch {
        socket.destroy(); // not connected yet
      }
    }
    this.#sockets.clear();
    await closed;
  }

  async stop(): Promise<void> {
    await this.cut();
  }

  #pipe(client: Socket): void {
    const upstream = connect(this.#target.port, this.#target.host);
    this.#sockets.add(client);
    this.#sockets.add(upstream);
    const drop = () => {
      this.#sockets.delete(client);
      this.#sockets.delete(upstream);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  }
}
