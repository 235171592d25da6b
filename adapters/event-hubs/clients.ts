import {
  type CheckpointStore,
  type EventHubClientOptions,
  EventHubConsumerClient,
  type EventHubConsumerClientOptions,
  EventHubProducerClient,
  type TokenCredential,
} from '@azure/event-hubs';
import type { Logger } from 'pino';
import { ConfigError } from '../../src/core/errors.js';
import type { EventHubsAdapterOptions } from './options.js';
import { PoisonHub } from './poison-hub.js';
import { webSocketOptionsFor } from './web-socket.js';

/** What the adapter decided before it builds its consumer client. */
export interface ConsumerClientPlan {
  readonly eventHubName: string;
  readonly consumerGroup: string;
  readonly store: CheckpointStore;
  /** The kit's own SQLite store's stable owner id, when the adapter opened that store. */
  readonly ownerId: string | undefined;
}

/**
 * The SDK's consumer client from a connection string or a namespace and credential. With the
 * kit's own checkpoint store, load balancing is greedy and the owner id is the file's (a single
 * instance that restarts gets its partitions back at once).
 */
export function openConsumerClient(
  options: EventHubsAdapterOptions,
  plan: ConsumerClientPlan,
): EventHubConsumerClient {
  const lb = options.loadBalancing;
  const clientOptions: EventHubConsumerClientOptions = {
    ...(plan.ownerId ? { identifier: plan.ownerId } : {}),
    ...reachedAs(options),
    loadBalancingOptions: {
      ...options.clientOptions?.loadBalancingOptions,
      ...(lb?.strategy || plan.ownerId ? { strategy: lb?.strategy ?? 'greedy' } : {}),
      ...(lb?.updateIntervalMs ? { updateIntervalInMs: lb.updateIntervalMs } : {}),
      ...(lb?.partitionOwnershipExpirationIntervalMs
        ? { partitionOwnershipExpirationIntervalInMs: lb.partitionOwnershipExpirationIntervalMs }
        : {}),
    },
  };
  const { consumerGroup, eventHubName, store } = plan;
  return options.connectionString
    ? new EventHubConsumerClient(consumerGroup, options.connectionString, eventHubName, store, clientOptions)
    : new EventHubConsumerClient(
        consumerGroup,
        options.fullyQualifiedNamespace as string,
        eventHubName,
        options.credential as TokenCredential,
        store,
        clientOptions,
      );
}

/** The dead-letter hub beside the hub being read: a producer of the caller's, or one opened by name. */
export function openPoisonHub(
  options: EventHubsAdapterOptions,
  hub: string | EventHubProducerClient,
  eventHubName: string,
  logger: Logger,
): PoisonHub {
  if (typeof hub !== 'string') return new PoisonHub(hub, logger);
  if (hub === eventHubName) {
    throw new ConfigError(`deadLetterQueue "${hub}" is the hub being read: dead events would come back`);
  }
  const producer = options.connectionString
    ? new EventHubProducerClient(
        withoutEntityPath(options.connectionString),
        hub,
        producerOptionsOf(reachedAs(options)),
      )
    : new EventHubProducerClient(
        options.fullyQualifiedNamespace as string,
        hub,
        options.credential as TokenCredential,
        producerOptionsOf(reachedAs(options)),
      );
  return new PoisonHub(producer, logger);
}

/** The caller's client options, with `webSockets` applied (the caller's own WebSocket class wins). */
function reachedAs(options: EventHubsAdapterOptions): EventHubConsumerClientOptions {
  const own = options.clientOptions ?? {};
  const webSocketOptions = webSocketOptionsFor(options.webSockets === true, own.webSocketOptions);
  return webSocketOptions ? { ...own, webSocketOptions } : own;
}

/**
 * What of the consumer's client options a producer in the same namespace needs too: how to reach
 * it (web sockets through a proxy, a custom endpoint), how to retry, the user agent. Not the load
 * balancing, nor `identifier`, which is the consumer's owner id in the checkpoint store.
 */
function producerOptionsOf(clientOptions: EventHubConsumerClientOptions = {}): EventHubClientOptions {
  const { loadBalancingOptions: _balancing, identifier: _ownerId, ...producerOptions } = clientOptions;
  return producerOptions;
}

/** A namespace-level connection string: the poison hub is named separately. */
export function withoutEntityPath(connectionString: string): string {
  return connectionString
    .split(';')
    .filter((part) => !/^\s*EntityPath\s*=/i.test(part))
    .join(';');
}
