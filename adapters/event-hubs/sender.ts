import { EventHubProducerClient } from '@azure/event-hubs';
import { AdapterError, ConfigError, errorMessage } from '../../src/core/errors.js';
import { redact } from '../../src/core/redact.js';
import type { Delivery, OutgoingMessage, Target } from '../../src/core/target.js';
import { CLI_SCHEME, ENV_CONNECTION_STRING } from './names.js';
import { HUB_NAME } from './options.js';

/**
 * `--to azure-event-hubs:HUB` with `EVENTHUBS_CONNECTION_STRING`: one event per envelope, its body
 * the envelope's UTF-8 bytes in a data section (what .NET, Python and Java publishers send; the
 * adapter reads them back exactly).
 */
export function eventHubsTargetFromCli(spec: string, env: NodeJS.ProcessEnv = process.env): Target {
  const hub = spec.slice(CLI_SCHEME.length);
  if (!spec.startsWith(CLI_SCHEME) || !HUB_NAME.test(hub)) {
    throw new ConfigError(`--to ${redact(spec)}: expected ${CLI_SCHEME}HUB_NAME`);
  }
  const connectionString = env[ENV_CONNECTION_STRING];
  if (!connectionString) throw new ConfigError(`--to ${redact(spec)} needs ${ENV_CONNECTION_STRING}`);
  let producer: EventHubProducerClient;
  try {
    producer = new EventHubProducerClient(connectionString, hub);
  } catch (cause) {
    // The SDK's message never echoes the connection string; ours must not either.
    throw new ConfigError(`${ENV_CONNECTION_STRING} is not usable: ${errorMessage(cause)}`, { cause });
  }
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
