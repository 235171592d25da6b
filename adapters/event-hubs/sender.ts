import { EventHubProducerClient } from '@azure/event-hubs';
import { AdapterError, ConfigError, errorMessage } from '../../src/core/errors.js';
import { redact } from '../../src/core/redact.js';
import type { Delivery, OutgoingMessage, Target } from '../../src/core/target.js';
import { type EventHubsAuth, eventHubsAuthFromEnv } from './credentials.js';
import { CLI_SCHEME, ENV_CONNECTION_STRING, ENV_NAMESPACE } from './names.js';
import { HUB_NAME } from './options.js';

/**
 * `--to azure-event-hubs:HUB`, signed in as `run --source` does (credentials.ts): one event per
 * envelope, its body the envelope's UTF-8 bytes in a data section (what .NET, Python and Java
 * publishers send; the adapter reads them back exactly).
 */
export function eventHubsTargetFromCli(spec: string, env: NodeJS.ProcessEnv = process.env): Target {
  const hub = spec.slice(CLI_SCHEME.length);
  if (!spec.startsWith(CLI_SCHEME) || !HUB_NAME.test(hub)) {
    throw new ConfigError(`--to ${redact(spec)}: expected ${CLI_SCHEME}HUB_NAME`);
  }
  const producer = openTargetProducer(eventHubsAuthFromEnv(env, `--to ${redact(spec)}`), hub);
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

function openTargetProducer(auth: EventHubsAuth, hub: string): EventHubProducerClient {
  try {
    if ('credential' in auth) {
      return new EventHubProducerClient(auth.fullyQualifiedNamespace, hub, auth.credential);
    }
    // A hub-level connection string's EntityPath must name HUB (its key is scoped to that hub).
    return new EventHubProducerClient(auth.connectionString, hub);
  } catch (cause) {
    // errorMessage redacts the key should the SDK's message quote the connection string.
    const variable = 'credential' in auth ? ENV_NAMESPACE : ENV_CONNECTION_STRING;
    throw new ConfigError(`${variable} is not usable: ${errorMessage(cause)}`, { cause });
  }
}
