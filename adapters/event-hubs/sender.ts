import { type EventHubClientOptions, EventHubProducerClient } from '@azure/event-hubs';
import { AdapterError, ConfigError, errorMessage } from '../../src/core/errors.js';
import { redact } from '../../src/core/redact.js';
import type { Delivery, OutgoingMessage, Target } from '../../src/core/target.js';
import { clientFor, type EventHubsAuth, eventHubsAuthFromEnv } from './credentials.js';
import { CLI_SCHEME } from './names.js';
import { HUB_NAME } from './options.js';
import { clientOptionsFromEnv } from './web-socket.js';

/**
 * `--to azure-event-hubs:HUB`, signed in as `run --source` does (credentials.ts), over WebSockets
 * with `EVENTHUBS_WEBSOCKETS=true`: one event per envelope, its body the envelope's UTF-8 bytes in
 * a data section (what .NET, Python and Java publishers send; the adapter reads them back exactly).
 */
export function eventHubsTargetFromCli(spec: string, env: NodeJS.ProcessEnv = process.env): Target {
  const hub = spec.slice(CLI_SCHEME.length);
  if (!spec.startsWith(CLI_SCHEME) || !HUB_NAME.test(hub)) {
    throw new ConfigError(`--to ${redact(spec)}: expected ${CLI_SCHEME}HUB_NAME`);
  }
  const auth = eventHubsAuthFromEnv(env, `--to ${redact(spec)}`);
  const producer = openTargetProducer(auth, clientOptionsFromEnv(env), hub);
  const name = `event-hubs:${hub}`;
  return {
    name,
    async send(message: OutgoingMessage): Promise<Delivery> {
      const body = typeof message.body === 'string' ? Buffer.from(message.body, 'utf8') : message.body;
      try {
        await producer.sendBatch([{ body }]);
      } catch (cause) {
        throw new AdapterError(`sending to ${name} failed: ${errorMessage(cause)}`, { cause });
      }
      return { accepted: true, detail: 'sent' };
    },
    close: () => producer.close(),
  };
}

function openTargetProducer(
  auth: EventHubsAuth,
  options: EventHubClientOptions,
  hub: string,
): EventHubProducerClient {
  return clientFor(auth, {
    namespace: (namespace, credential) => new EventHubProducerClient(namespace, hub, credential, options),
    // A hub-level connection string's EntityPath must name HUB (its key is scoped to that hub).
    connectionString: (connectionString) => new EventHubProducerClient(connectionString, hub, options),
  });
}
