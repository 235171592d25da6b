/** How the CLI and the environment name an Event Hubs source (no SDK: imported by the descriptor and the adapter). */
export const CLI_SCHEME = 'azure-event-hubs:';
/** A connection string (namespace or hub level). */
export const ENV_CONNECTION_STRING = 'EVENTHUBS_CONNECTION_STRING';
/** `<namespace>.servicebus.windows.net`, signed in with `DefaultAzureCredential`. */
export const ENV_NAMESPACE = 'EVENTHUBS_FULLY_QUALIFIED_NAMESPACE';
/** `sqlite:PATH` (default `sqlite:partner-events-checkpoints.db`) or `blob:CONTAINER_URL`. */
export const ENV_CHECKPOINT_STORE = 'EVENTHUBS_CHECKPOINT_STORE';
/** A hub in the same namespace that receives a copy of each dead event (optional; was `EVENTHUBS_POISON_HUB`). */
export const ENV_DEAD_LETTER_QUEUE = 'EVENTHUBS_DEAD_LETTER_QUEUE';
/** `true`: every Event Hubs client the CLI opens dials AMQP over WebSockets (`wss://…:443`), not AMQP on 5671. */
export const ENV_WEBSOCKETS = 'EVENTHUBS_WEBSOCKETS';
/** With `blob:NAME` (a container name rather than a URL): the storage account's connection string. */
export const ENV_STORAGE_CONNECTION_STRING = 'AZURE_STORAGE_CONNECTION_STRING';
