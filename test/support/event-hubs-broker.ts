/**
 * A small Event Hubs-compatible AMQP 1.0 broker on `rhea`, for tests: no Event Hubs emulator runs
 * without Docker. It speaks just enough of the protocol for the real `@azure/event-hubs` SDK:
 * SASL ANONYMOUS, the `$cbs` put-token node, the `$management` node (hub and partition
 * properties), consumer links on `<hub>/ConsumerGroups/<cg>/Partitions/<id>` honouring the
 * offset / sequence-number / enqueued-time filter and the owner level (epoch), and producer links
 * on `<hub>` or `<hub>/Partitions/<id>` (single messages and batches, format 0x80013700; with
 * `maxMessageBytes`, a larger one refused with `amqp:link:message-size-exceeded`).
 * Several hubs (`createHub`); everything is in memory; plain TCP on 127.0.0.1 and a free port, or
 * TLS (`tls`) as Event Hubs itself speaks, for clients that sign in with a namespace and a token.
 * Opt-in (`webSocket`), AMQP over WebSockets too, on a second port: what the SDK's
 * `webSocketOptions` opens (a partner behind a proxy that lets only 443 through).
 */
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import type { AddressInfo, Server } from 'node:net';
import rhea, {
  type Connection,
  type EventContext,
  type Message,
  type Receiver,
  type Sender,
  type Typed,
} from 'rhea';
import { type WebSocket, WebSocketServer } from 'ws';
import type { EventHubsTestServer, HubEvent, TestHub } from './event-hubs-server.js';

/** One event as stored in a partition. */
export interface StoredEvent {
  readonly sequenceNumber: number;
  /** A byte offset (string, as in SDK v6); deliberately not equal to the sequence number. */
  readonly offset: string;
  readonly enqueuedTime: number;
  /** The AMQP body as it arrived (a data section, or a value). */
  readonly body: unknown;
  readonly applicationProperties: Readonly<Record<string, unknown>> | undefined;
  readonly partitionKey: string | undefined;
}

/** A consumer link currently attached (for assertions on who reads which partition). */
export interface ConsumerLinkInfo {
  readonly hub: string;
  readonly consumerGroup: string;
  readonly partitionId: string;
  readonly ownerLevel: number | undefined;
  /** Whether the link's connection came over the WebSocket listener. */
  readonly webSocket: boolean;
}

export interface EventHubsBrokerOptions {
  /** Default `hub`. */
  readonly hub?: string;
  /** Default 2. */
  readonly partitions?: number;
  /** Listen with TLS (AMQPS) with this key and certificate (PEM) instead of plain TCP. */
  readonly tls?: { readonly key: string; readonly cert: string };
  /**
   * Also listen for AMQP over WebSockets on a second port of 127.0.0.1, over HTTPS with this key
   * and certificate (PEM): the SDK dials only `wss://HOST:PORT/$servicebus/websocket`.
   */
  readonly webSocket?: { readonly key: string; readonly cert: string };
  /**
   * Refuse a message sent to a hub that is larger than this (its encoded transfer: a producer's
   * batch with its events and their properties), as Event Hubs refuses one over its limit (1 MB
   * on most tiers): the delivery is rejected with `amqp:link:message-size-exceeded`, which the
   * SDK reports as a `MessageTooLargeError` that is not retryable, and the link stays open. Also
   * the max message size the broker announces on producer links. Default: 1 MiB announced,
   * nothing refused.
   */
  readonly maxMessageBytes?: number;
}

/** A `$cbs` put-token request as the broker received it. */
export interface PutToken {
  /** `jwt` (an Entra ID token) or `servicebus.windows.net:sastoken`. */
  readonly type: string;
  /** The audience: `sb://NAMESPACE/HUB…`. */
  readonly name: string;
  readonly token: string;
}

/** A link a client attached to send to a hub (a producer), and the client's connection. */
export interface ProducerLinkInfo {
  /** `HUB` or `HUB/Partitions/ID`. */
  readonly address: string;
  /** The `user-agent` of the connection's open properties (the SDK's, then `userAgent` of the client's options). */
  readonly userAgent: string | undefined;
  /** Whether the connection came over the WebSocket listener. */
  readonly webSocket: boolean;
}

/** One hub's partitions, each an append-only log. */
interface Hub {
  readonly name: string;
  readonly partitionIds: readonly string[];
  readonly createdAt: Date;
  readonly logs: Map<string, StoredEvent[]>;
  readonly nextOffset: Map<string, number>;
  roundRobin: number;
}

/** rhea's `container.websocket_accept` as lib/container.js and lib/ws.js have it. */
interface WebSocketAccepting {
  websocket_accept(socket: WebSocket, options: { readonly id: string }): void;
}

interface ConsumerLink extends ConsumerLinkInfo {
  readonly sender: Sender;
  /** Index into the partition log of the next event to send. */
  cursor: number;
}

const BATCH_FORMAT = 0x80013700;
/** What the broker announces on producer links when `maxMessageBytes` is not given (it refuses nothing then). */
const ANNOUNCED_MAX_MESSAGE_BYTES = 1024 * 1024;
const STR8_ARRAY = 0xa1;
const CONSUMER_ADDRESS = /^([^/]+)\/ConsumerGroups\/([^/]+)\/Partitions\/([^/]+)$/;
const FILTER =
  /^amqp\.annotation\.(x-opt-offset|x-opt-sequence-number|x-opt-enqueued-time)\s*(>=|>)\s*'([^']*)'$/;
const SELECTOR_FILTER = 'apache.org:selector-filter:string';
/** Where and how the SDK (@azure/core-amqp) opens AMQP over WebSockets, as Event Hubs serves it. */
const WEBSOCKET_PATH = '/$servicebus/websocket';
const WEBSOCKET_PROTOCOL = 'AMQPWSB10';
/** Our id for a connection accepted over WebSocket (rhea's own ids are `connection-N`). */
const WEBSOCKET_CONNECTION_ID = /^websocket-\d+$/;

export class EventHubsBroker implements EventHubsTestServer {
  readonly kind = 'broker';
  /** The hub made at start (`options.hub`). */
  readonly hub: string;
  readonly partitionIds: readonly string[];
  readonly #hubs = new Map<string, Hub>();
  #hubCount = 0;
  readonly #consumers = new Set<ConsumerLink>();
  readonly #consumerLinks: ConsumerLinkInfo[] = [];
  /** Replies waiting for credit on the client's reply link. */
  readonly #outbox = new Map<Sender, Message[]>();
  readonly #connections = new Set<Connection>();
  readonly #container: ReturnType<typeof rhea.create_container>;
  readonly #tls: EventHubsBrokerOptions['tls'];
  readonly #putTokens: PutToken[] = [];
  readonly #producerLinks: ProducerLinkInfo[] = [];
  #server: Server;
  #port = 0;
  readonly #webSocketTls: EventHubsBrokerOptions['webSocket'];
  #webSocketServer: { readonly https: HttpsServer; readonly ws: WebSocketServer } | undefined;
  #webSocketPort = 0;
  #webSocketCount = 0;
  /** The open WebSockets by the id of their AMQP connection. */
  readonly #webSockets = new Map<string, WebSocket>();
  readonly #maxMessageBytes: number | undefined;

  private constructor(options: EventHubsBrokerOptions) {
    this.hub = options.hub ?? 'hub';
    this.partitionIds = this.#addHub(this.hub, options.partitions ?? 2).partitionIds;
    this.#maxMessageBytes = options.maxMessageBytes;
    // Every message is accepted or rejected in #onMessage: rhea's own accept would come first.
    const container = rhea.create_container({ id: 'test-event-hubs-broker', autoaccept: false });
    container.sasl_server_mechanisms.enable_anonymous();
    container.on('connection_open', (ctx: EventContext) => {
      dropFramesOnEndedSessions(ctx.connection);
      this.#connections.add(ctx.connection);
    });
    container.on('disconnected', (ctx: EventContext) => this.#dropConnection(ctx.connection));
    container.on('connection_close', (ctx: EventContext) => this.#dropConnection(ctx.connection));
    container.on('sender_open', (ctx: EventContext) => this.#onClientReceiver(ctx.sender as Sender));
    container.on('receiver_open', (ctx: EventContext) => this.#onClientSender(ctx.receiver as Receiver));
    container.on('sendable', (ctx: EventContext) => this.#pump(ctx.sender as Sender));
    container.on('sender_close', (ctx: EventContext) => this.#forgetSender(ctx.sender as Sender));
    container.on('message', (ctx: EventContext) => this.#onMessage(ctx));
    // Peers closing links or connections with errors must not crash the test process.
    container.on('error', () => {});
    container.on('connection_error', () => {});
    this.#container = container;
    this.#tls = options.tls;
    this.#webSocketTls = options.webSocket;
    this.#server = this.#listen(0);
  }

  #listen(port: number): Server {
    const host = '127.0.0.1';
    if (!this.#tls) return this.#container.listen({ host, port });
    return this.#container.listen({ transport: 'tls', key: this.#tls.key, cert: this.#tls.cert, host, port });
  }

  /** The WebSocket listener: each socket with the right path and subprotocol becomes an AMQP connection. */
  async #listenWebSocket(port: number): Promise<void> {
    const tls = this.#webSocketTls;
    if (!tls) return;
    const https = createHttpsServer({ key: tls.key, cert: tls.cert });
    const ws = new WebSocketServer({
      server: https,
      path: WEBSOCKET_PATH,
      handleProtocols: (protocols) => (protocols.has(WEBSOCKET_PROTOCOL) ? WEBSOCKET_PROTOCOL : false),
    });
    ws.on('connection', (socket) => {
      if (socket.protocol !== WEBSOCKET_PROTOCOL) {
        socket.close(1002, `subprotocol ${WEBSOCKET_PROTOCOL} only`);
        return;
      }
      const id = `websocket-${++this.#webSocketCount}`;
      this.#webSockets.set(id, socket);
      socket.once('close', () => this.#webSockets.delete(id));
      // rhea wraps the WebSocket (lib/ws.js) and takes connection options; its typings say otherwise.
      (this.#container as unknown as WebSocketAccepting).websocket_accept(socket, { id });
    });
    this.#webSocketServer = { https, ws };
    await listening(https.listen({ host: '127.0.0.1', port }));
    this.#webSocketPort = (https.address() as AddressInfo).port;
  }

  static async start(options: EventHubsBrokerOptions = {}): Promise<EventHubsBroker> {
    const broker = new EventHubsBroker(options);
    await listening(broker.#server);
    broker.#port = (broker.#server.address() as AddressInfo).port;
    await broker.#listenWebSocket(0);
    return broker;
  }

  /** After `stop()` or `crash()`: listens again on the same port(s), with every hub and event kept. */
  async resume(): Promise<void> {
    this.#server = this.#listen(this.#port);
    await listening(this.#server);
    await this.#listenWebSocket(this.#webSocketPort);
  }

  get port(): number {
    return this.#port;
  }

  /** The `$cbs` put-token requests received, oldest first. */
  putTokens(): readonly PutToken[] {
    return [...this.#putTokens];
  }

  /** The producer links clients attached to hubs, oldest first (closed ones too). */
  producerLinks(): readonly ProducerLinkInfo[] {
    return [...this.#producerLinks];
  }

  /** The namespace a client signing in with a token gives to reach this broker over TLS. */
  get namespace(): string {
    return `localhost:${this.#port}`;
  }

  /** What the SDK needs to reach this broker (plain TCP: `UseDevelopmentEmulator=true`). */
  connectionString(hub = this.hub): string {
    return `Endpoint=sb://127.0.0.1:${this.#port};SharedAccessKeyName=dev;SharedAccessKey=dev;UseDevelopmentEmulator=true;EntityPath=${hub}`;
  }

  /**
   * A connection string for the WebSocket listener (started with `webSocket`). The SDK dials
   * `wss://` + the Endpoint's host and port when its client options have `webSocketOptions`; the
   * host is `localhost`, the name in the certificate. Without `webSocketOptions` a client would
   * speak AMQP over TLS to this port and fail.
   */
  webSocketConnectionString(hub = this.hub): string {
    if (!this.#webSocketServer) throw new Error('the broker was started without a WebSocket listener');
    return `Endpoint=sb://localhost:${this.#webSocketPort};SharedAccessKeyName=dev;SharedAccessKey=dev;EntityPath=${hub}`;
  }

  /** Appends an event to a partition, as a publisher sending raw UTF-8 bytes would. */
  publish(
    partitionId: string,
    body: string | Uint8Array,
    applicationProperties?: Record<string, unknown>,
    hub = this.hub,
  ): StoredEvent {
    const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.from(body);
    return this.#append(
      this.#hubNamed(hub),
      partitionId,
      rhea.message.data_section(bytes),
      applicationProperties,
      undefined,
    );
  }

  /** The events stored in a partition, oldest first. */
  events(partitionId: string, hub = this.hub): readonly StoredEvent[] {
    return this.#hubs.get(hub)?.logs.get(partitionId) ?? [];
  }

  /** A new, empty hub (`hub-1`, `hub-2`, …) on this broker. */
  async createHub(partitions: number): Promise<TestHub> {
    let name: string;
    do name = `hub-${++this.#hubCount}`;
    while (this.#hubs.has(name));
    const hub = this.#addHub(name, partitions);
    return {
      name,
      partitionIds: hub.partitionIds,
      connectionString: this.connectionString(name),
      publish: async (partitionId, body, applicationProperties) => {
        this.publish(partitionId, body, applicationProperties, name);
      },
      events: async (partitionId) => this.events(partitionId, name).map(hubEvent),
    };
  }

  /** Every consumer link clients attached, oldest first (closed ones too: a finished replay's). */
  consumerLinks(): readonly ConsumerLinkInfo[] {
    return [...this.#consumerLinks];
  }

  /** Consumer links attached right now. */
  consumers(): ConsumerLinkInfo[] {
    return [...this.#consumers].map(({ hub, consumerGroup, partitionId, ownerLevel, webSocket }) => ({
      hub,
      consumerGroup,
      partitionId,
      ownerLevel,
      webSocket,
    }));
  }

  async stop(): Promise<void> {
    const connections = [...this.#connections];
    for (const connection of connections) connection.close();
    await Promise.all([this.#closeServer(connections), this.#closeWebSocketServer()]);
  }

  /**
   * Drops every connection without an AMQP close and stops listening, as a crashed or unreachable
   * broker does; `resume()` brings it back with its hubs and events.
   */
  async crash(): Promise<void> {
    const connections = [...this.#connections];
    for (const connection of connections) this.#destroySocket(connection);
    await Promise.all([this.#closeServer(connections), this.#closeWebSocketServer()]);
  }

  async #closeServer(connections: readonly Connection[]): Promise<void> {
    this.#connections.clear();
    this.#consumers.clear();
    this.#outbox.clear();
    await new Promise<void>((resolve) => {
      this.#server.close(() => resolve());
      // Sockets still open after close() keep the server alive: end them.
      setImmediate(() => {
        for (const c of connections) this.#destroySocket(c);
      });
    });
  }

  async #closeWebSocketServer(): Promise<void> {
    const server = this.#webSocketServer;
    if (!server) return;
    this.#webSocketServer = undefined;
    await new Promise<void>((resolve) => {
      server.https.close(() => resolve());
      // As for TCP: sockets still open keep the server alive.
      setImmediate(() => {
        for (const socket of server.ws.clients) socket.terminate();
      });
    });
    await new Promise<void>((resolve) => server.ws.close(() => resolve()));
  }

  /** Ends a connection's socket (a TCP/TLS socket, or the WebSocket under it) without a goodbye. */
  #destroySocket(connection: Connection): void {
    const webSocket = this.#webSockets.get(connection.options.id ?? '');
    if (webSocket) webSocket.terminate();
    else socketOf(connection)?.destroy();
  }

  #addHub(name: string, partitions: number): Hub {
    const hub: Hub = {
      name,
      partitionIds: Array.from({ length: partitions }, (_, i) => String(i)),
      createdAt: new Date(),
      logs: new Map(),
      nextOffset: new Map(),
      roundRobin: 0,
    };
    for (const id of hub.partitionIds) {
      hub.logs.set(id, []);
      hub.nextOffset.set(id, 0);
    }
    this.#hubs.set(name, hub);
    return hub;
  }

  #hubNamed(name: string): Hub {
    const hub = this.#hubs.get(name);
    if (!hub) throw new Error(`no hub ${name}`);
    return hub;
  }

  #append(
    hub: Hub,
    partitionId: string,
    body: unknown,
    applicationProperties: Record<string, unknown> | undefined,
    partitionKey: string | undefined,
  ): StoredEvent {
    const log = hub.logs.get(partitionId);
    if (!log) throw new Error(`no partition ${partitionId} in hub ${hub.name}`);
    const offset = hub.nextOffset.get(partitionId) ?? 0;
    const event: StoredEvent = {
      sequenceNumber: log.length,
      offset: String(offset),
      enqueuedTime: Date.now(),
      body,
      applicationProperties,
      partitionKey,
    };
    log.push(event);
    // A stand-in for the event's size in the partition's byte stream.
    hub.nextOffset.set(partitionId, offset + 100 + bodySize(body));
    for (const consumer of this.#consumers) {
      if (consumer.hub === hub.name && consumer.partitionId === partitionId) this.#pump(consumer.sender);
    }
    return event;
  }

  // --- links the client opens to receive (our senders) ---------------------------------------

  #onClientReceiver(sender: Sender): void {
    const address = sender.source?.address ?? '';
    sender.set_source({ address });
    sender.set_target({ address: sender.target?.address ?? '' });
    if (address === '$cbs' || address === '$management') return; // a reply link
    const match = CONSUMER_ADDRESS.exec(address);
    const [, hub = '', consumerGroup = '', partitionId = ''] = match ?? [];
    if (!match || !this.#hubs.get(hub)?.logs.has(partitionId)) {
      sender.close({ condition: 'amqp:not-found', description: `no such entity: ${address}` });
      return;
    }
    const epoch = (sender.properties as Record<string, unknown> | undefined)?.['com.microsoft:epoch'];
    const ownerLevel = typeof epoch === 'number' ? epoch : undefined;
    const peers = [...this.#consumers].filter(
      (c) => c.hub === hub && c.consumerGroup === consumerGroup && c.partitionId === partitionId,
    );
    // Owner levels (epochs): a link with an owner level at least as high takes the partition
    // over; the SDK's load balancer relies on this to stop the previous owner's reader.
    if (ownerLevel === undefined && peers.some((p) => p.ownerLevel !== undefined)) {
      sender.close({ condition: 'amqp:link:stolen', description: 'an owner-level receiver is active' });
      return;
    }
    if (ownerLevel !== undefined) {
      for (const peer of peers) {
        if (peer.ownerLevel === undefined || peer.ownerLevel <= ownerLevel) {
          this.#consumers.delete(peer);
          peer.sender.close({
            condition: 'amqp:link:stolen',
            description: `receiver with owner level ${ownerLevel} took over partition ${partitionId}`,
          });
        }
      }
    }
    let cursor: number;
    try {
      cursor = this.#startIndex(this.#hubNamed(hub), partitionId, filterOf(sender.source?.filter));
    } catch (error) {
      sender.close({ condition: 'amqp:invalid-field', description: (error as Error).message });
      return;
    }
    const webSocket = viaWebSocket(sender.connection);
    this.#consumers.add({ hub, consumerGroup, partitionId, ownerLevel, webSocket, sender, cursor });
    this.#consumerLinks.push({ hub, consumerGroup, partitionId, ownerLevel, webSocket });
  }

  #startIndex(hub: Hub, partitionId: string, filter: string | undefined): number {
    const log = hub.logs.get(partitionId) ?? [];
    if (filter === undefined) return 0;
    const match = FILTER.exec(filter.trim());
    if (!match) throw new Error(`unsupported filter: ${filter}`);
    const [, field, op, value = ''] = match;
    if (field === 'x-opt-offset' && value === '@latest') return log.length;
    const n = Number(value);
    if (!Number.isFinite(n)) throw new Error(`bad filter value: ${filter}`);
    const key = (e: StoredEvent) =>
      field === 'x-opt-offset'
        ? Number(e.offset)
        : field === 'x-opt-sequence-number'
          ? e.sequenceNumber
          : e.enqueuedTime;
    const index = log.findIndex((e) => (op === '>=' ? key(e) >= n : key(e) > n));
    return index === -1 ? log.length : index;
  }

  /** Sends what the link has credit for: queued replies, or the partition's next events. */
  #pump(sender: Sender): void {
    const outbox = this.#outbox.get(sender);
    while (outbox?.length && sender.sendable()) sender.send(outbox.shift() as Message);
    const consumer = [...this.#consumers].find((c) => c.sender === sender);
    if (!consumer) return;
    const log = this.#hubs.get(consumer.hub)?.logs.get(consumer.partitionId) ?? [];
    while (consumer.cursor < log.length && sender.sendable()) {
      sender.send(toAmqp(log[consumer.cursor] as StoredEvent));
      consumer.cursor++;
    }
  }

  #forgetSender(sender: Sender): void {
    this.#outbox.delete(sender);
    for (const c of this.#consumers) if (c.sender === sender) this.#consumers.delete(c);
  }

  #dropConnection(connection: Connection): void {
    this.#connections.delete(connection);
    for (const c of this.#consumers) if (c.sender.connection === connection) this.#consumers.delete(c);
    for (const s of this.#outbox.keys()) if (s.connection === connection) this.#outbox.delete(s);
  }

  // --- links the client opens to send (our receivers) ----------------------------------------

  #onClientSender(receiver: Receiver): void {
    const address = receiver.target?.address ?? '';
    receiver.set_source({ address: receiver.source?.address ?? '' });
    receiver.set_target({ address });
    const hub = /^([^/]+)(?:\/Partitions\/[^/]+)?$/.exec(address)?.[1];
    if (address !== '$cbs' && address !== '$management' && !this.#hubs.has(hub ?? '')) {
      // As Event Hubs does: a producer link to a hub that does not exist is refused.
      receiver.close({ condition: 'amqp:not-found', description: `no such entity: ${address}` });
      return;
    }
    if (hub !== undefined && this.#hubs.has(hub)) {
      const properties = receiver.connection.remote.open?.properties as Record<string, unknown> | undefined;
      const userAgent = properties?.['user-agent'];
      this.#producerLinks.push({
        address,
        userAgent: typeof userAgent === 'string' ? userAgent : undefined,
        webSocket: viaWebSocket(receiver.connection),
      });
    }
    // The SDK sizes its batches by the link's max message size: announce one.
    (
      receiver as unknown as { local: { attach: { max_message_size: number } } }
    ).local.attach.max_message_size = this.#maxMessageBytes ?? ANNOUNCED_MAX_MESSAGE_BYTES;
  }

  #onMessage(ctx: EventContext): void {
    const receiver = ctx.receiver as Receiver;
    const address = receiver.target?.address ?? '';
    const format = (ctx as EventContext & { format?: number }).format;
    const refusal = this.#refusal(ctx, address);
    if (refusal) {
      ctx.delivery?.reject(refusal);
      return;
    }
    ctx.delivery?.accept();
    if (address === '$cbs') {
      const props = (ctx.message?.application_properties ?? {}) as Record<string, unknown>;
      if (props.operation === 'put-token') {
        this.#putTokens.push({
          type: String(props.type),
          name: String(props.name),
          token: String(ctx.message?.body),
        });
      }
      this.#reply(ctx, 202, undefined);
      return;
    }
    if (address === '$management') {
      this.#management(ctx);
      return;
    }
    const partitionMatch = /^([^/]+)(?:\/Partitions\/([^/]+))?$/.exec(address);
    const hub = this.#hubs.get(partitionMatch?.[1] ?? '');
    if (!hub) return;
    const target = partitionMatch?.[2];
    const messages =
      format === BATCH_FORMAT ? unbatch(ctx.message as unknown as Buffer) : [ctx.message as Message];
    for (const message of messages) {
      const key = message.message_annotations?.['x-opt-partition-key'];
      const partitionKey = typeof key === 'string' ? key : undefined;
      const partitionId = target ?? choosePartition(hub, partitionKey);
      this.#append(hub, partitionId, message.body, message.application_properties, partitionKey);
    }
  }

  /** A message to a hub over `maxMessageBytes`: refused as Event Hubs refuses it, in its words. */
  #refusal(ctx: EventContext, address: string): { condition: string; description: string } | undefined {
    const limit = this.#maxMessageBytes;
    if (limit === undefined || address === '$cbs' || address === '$management') return undefined;
    // A batch (format 0x80013700) arrives as its bytes; a single message is decoded: encode it again.
    const message = ctx.message as unknown;
    const size = Buffer.isBuffer(message) ? message.length : rhea.message.encode(message as Message).length;
    if (size <= limit) return undefined;
    return {
      condition: 'amqp:link:message-size-exceeded',
      description: `The received message (delivery-id:${ctx.delivery?.id}, size:${size} bytes) exceeds the limit (${limit} bytes) currently allowed on the link.`,
    };
  }

  #management(ctx: EventContext): void {
    const props = (ctx.message?.application_properties ?? {}) as Record<string, unknown>;
    const hub = typeof props.name === 'string' ? this.#hubs.get(props.name) : undefined;
    if (props.operation !== 'READ' || !hub) {
      this.#reply(ctx, 404, undefined, `no such entity: ${String(props.name)}`);
    } else if (props.type === 'com.microsoft:eventhub') {
      this.#reply(ctx, 200, {
        name: hub.name,
        type: 'com.microsoft:eventhub',
        created_at: hub.createdAt,
        partition_count: hub.partitionIds.length,
        partition_ids: rhea.types.wrap_array([...hub.partitionIds], STR8_ARRAY, undefined),
      });
    } else {
      const partitionId = String(props.partition);
      const log = hub.logs.get(partitionId);
      if (props.type !== 'com.microsoft:partition' || !log) {
        this.#reply(ctx, 404, undefined, `no such partition: ${partitionId}`);
        return;
      }
      const last = log.at(-1);
      this.#reply(ctx, 200, {
        name: hub.name,
        type: 'com.microsoft:partition',
        partition: partitionId,
        begin_sequence_number: rhea.types.wrap_long(0),
        last_enqueued_sequence_number: rhea.types.wrap_long(last?.sequenceNumber ?? -1),
        last_enqueued_offset: last?.offset ?? '-1',
        last_enqueued_time_utc: new Date(last?.enqueuedTime ?? 0),
        is_partition_empty: log.length === 0,
      });
    }
  }

  /** Answers a request on the link whose address is the request's `reply_to`. */
  #reply(ctx: EventContext, status: number, body: unknown, description?: string): void {
    const request = ctx.message;
    const replyTo = request?.reply_to;
    if (!request || !replyTo) return;
    let link: Sender | undefined;
    ctx.connection.each_sender(
      (s: Sender) => {
        link ??= s;
      },
      (s: Sender) => s.target?.address === replyTo || s.name === replyTo,
    );
    if (!link) return;
    const reply: Message = {
      correlation_id: request.message_id,
      application_properties: {
        'status-code': rhea.types.wrap_int(status),
        'status-description': description ?? (status < 300 ? 'OK' : 'error'),
      },
      body,
    } as Message;
    const outbox = this.#outbox.get(link) ?? [];
    outbox.push(reply);
    this.#outbox.set(link, outbox);
    this.#pump(link);
  }
}

function choosePartition(hub: Hub, partitionKey: string | undefined): string {
  const ids = hub.partitionIds;
  if (partitionKey === undefined) return ids[hub.roundRobin++ % ids.length] as string;
  let hash = 0;
  for (const ch of partitionKey) hash = (hash * 31 + (ch.codePointAt(0) ?? 0)) >>> 0;
  return ids[hash % ids.length] as string;
}

/** A stored event as the suite's server interface reports it (the data section's bytes). */
function hubEvent(event: StoredEvent): HubEvent {
  const content = (event.body as { content?: unknown } | null)?.content;
  return {
    sequenceNumber: event.sequenceNumber,
    offset: event.offset,
    enqueuedTime: event.enqueuedTime,
    body: Buffer.isBuffer(content) ? new Uint8Array(content) : Buffer.from(JSON.stringify(event.body)),
    applicationProperties: event.applicationProperties,
  };
}

function listening(server: Server): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
}

/** The part of a rhea connection that routes a session's frames by channel (lib/connection.js). */
interface FrameRouting {
  remote_channel_map: Record<number, unknown>;
  on_disposition(frame: { readonly channel: number }): void;
  on_flow(frame: { readonly channel: number }): void;
  on_transfer(frame: { readonly channel: number }): void;
}

/**
 * Drops a client's frames for a session this side has already ended, instead of failing the whole
 * connection. The SDK's rhea still accepts transfers that reach it after it sent its own `end`
 * (when a reader closes with events in flight), and sends their dispositions after that `end`.
 * By the time they arrive rhea here has removed the session, throws a ProtocolError and closes
 * the socket under every other link of the client: the cause of a replay --max test that failed
 * under load. Nothing such a frame carries matters to a session that is over.
 */
function dropFramesOnEndedSessions(connection: Connection): void {
  const routing = connection as unknown as FrameRouting;
  for (const name of ['on_disposition', 'on_flow', 'on_transfer'] as const) {
    const route = routing[name];
    routing[name] = function (this: FrameRouting, frame) {
      if (this.remote_channel_map[frame.channel] === undefined) return;
      route.call(this, frame);
    };
  }
}

/** Whether the broker accepted this connection over its WebSocket listener (it named it so). */
function viaWebSocket(connection: Connection): boolean {
  return WEBSOCKET_CONNECTION_ID.test(connection.options.id ?? '');
}

function socketOf(connection: Connection): { destroy(): void } | undefined {
  return (connection as unknown as { socket?: { destroy(): void } }).socket;
}

/** The selector string of a consumer link's source filter, if any. */
function filterOf(filter: unknown): string | undefined {
  if (typeof filter !== 'object' || filter === null) return undefined;
  const entry = (filter as Record<string, unknown>)[SELECTOR_FILTER];
  if (typeof entry === 'string') return entry;
  const value = (entry as { value?: unknown } | undefined)?.value;
  if (typeof value === 'string') return value;
  return typeof (value as Typed | undefined)?.value === 'string' ? (value as Typed).value : undefined;
}

/** A producer batch: one message whose data sections are each an encoded message. */
function unbatch(payload: Buffer): Message[] {
  const outer = rhea.message.decode(payload);
  const section = outer.body as { content: Buffer | Buffer[]; multiple?: boolean };
  const parts = section.multiple ? (section.content as Buffer[]) : [section.content as Buffer];
  return parts.map((part) => rhea.message.decode(part) as unknown as Message);
}

function toAmqp(event: StoredEvent): Message {
  const annotations: Record<string, unknown> = {
    'x-opt-sequence-number': rhea.types.wrap_long(event.sequenceNumber),
    'x-opt-offset': event.offset,
    'x-opt-enqueued-time': rhea.types.wrap_timestamp(event.enqueuedTime),
  };
  if (event.partitionKey !== undefined) annotations['x-opt-partition-key'] = event.partitionKey;
  const message: Record<string, unknown> = { body: event.body, message_annotations: annotations };
  if (event.applicationProperties) message.application_properties = event.applicationProperties;
  return message as unknown as Message;
}

function bodySize(body: unknown): number {
  const content = (body as { content?: unknown } | null)?.content;
  if (Buffer.isBuffer(content)) return content.length;
  return Buffer.byteLength(JSON.stringify(body ?? null) ?? '', 'utf8');
}
