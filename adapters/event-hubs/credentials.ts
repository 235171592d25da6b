import type { TokenCredential } from '@azure/event-hubs';
import { ConfigError, errorMessage } from '../../src/core/errors.js';
import { ENV_CONNECTION_STRING, ENV_NAMESPACE } from './names.js';

/** How the CLI's Event Hubs source and replay sign in: a connection string, or a namespace and an identity. */
export type EventHubsAuth =
  | { readonly connectionString: string }
  | { readonly fullyQualifiedNamespace: string; readonly credential: TokenCredential };

/**
 * `EVENTHUBS_CONNECTION_STRING` (it wins), or `EVENTHUBS_FULLY_QUALIFIED_NAMESPACE` signed in with
 * `DefaultAzureCredential`: the way for namespaces whose SAS keys are disabled (`disableLocalAuth`).
 * `what` starts the error when neither is set (`--source azure-event-hubs:HUB`, `replay …`).
 */
export function eventHubsAuthFromEnv(env: NodeJS.ProcessEnv, what: string): EventHubsAuth {
  const connectionString = env[ENV_CONNECTION_STRING];
  if (connectionString) return { connectionString };
  const namespace = env[ENV_NAMESPACE];
  if (!namespace) {
    throw new ConfigError(
      `${what} needs ${ENV_CONNECTION_STRING}, or ${ENV_NAMESPACE} with an Azure identity`,
    );
  }
  return { fullyQualifiedNamespace: namespace, credential: lazyDefaultCredential() };
}

/**
 * A client built from `auth` by the matching maker; an SDK refusal (a malformed connection string
 * or namespace) becomes a ConfigError naming the variable it came from (`errorMessage` redacts a
 * key should the SDK quote the connection string).
 */
export function clientFor<T>(
  auth: EventHubsAuth,
  make: {
    readonly namespace: (fullyQualifiedNamespace: string, credential: TokenCredential) => T;
    readonly connectionString: (connectionString: string) => T;
  },
): T {
  const identity = 'credential' in auth;
  try {
    return identity
      ? make.namespace(auth.fullyQualifiedNamespace, auth.credential)
      : make.connectionString(auth.connectionString);
  } catch (cause) {
    const variable = identity ? ENV_NAMESPACE : ENV_CONNECTION_STRING;
    throw new ConfigError(`${variable} is not usable: ${errorMessage(cause)}`, { cause });
  }
}

/** `DefaultAzureCredential`, imported when the first token is needed (an optional peer dependency). */
export function lazyDefaultCredential(): TokenCredential {
  let inner: Promise<TokenCredential> | undefined;
  return {
    async getToken(...args: Parameters<TokenCredential['getToken']>) {
      inner ??= import('@azure/identity').then(
        (identity) => new identity.DefaultAzureCredential(),
        (cause: unknown) => {
          throw new ConfigError('signing in without a connection string needs @azure/identity installed', {
            cause,
          });
        },
      );
      return (await inner).getToken(...args);
    },
  };
}
