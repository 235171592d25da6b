import { redact } from '../../src/core/redact.js';
import { defineTransport, importAdapterModule } from '../../src/core/transport.js';
import { CLI_PREFIX } from './names.js';
import { storageQueueOptionsSchema } from './options.js';

const SDK = '@azure/storage-queue';

/** Whether a `--source` / `--to` value names a Storage Queue (for the CLI's choice of transport). */
export function isStorageQueueSpec(spec: string): boolean {
  if (spec.startsWith(CLI_PREFIX)) return true;
  try {
    // Public cloud and the sovereign clouds: ACCOUNT.queue.core.windows.net, ….queue.core.chinacloudapi.cn, …
    const url = new URL(spec);
    return url.protocol === 'https:' && /\.queue\.core\.[a-z.]+$/i.test(url.hostname);
  } catch {
    return false;
  }
}

const FORMS =
  'azure-storage-queue:QUEUE (AZURE_STORAGE_CONNECTION_STRING) or https://ACCOUNT.queue.core.windows.net/QUEUE[?SAS]';

/** Azure Storage Queue: `azure-storage-queue:QUEUE` or a queue URL on a `*.queue.core.*` host. */
export const storageQueueTransport = defineTransport({
  name: 'storage-queue',
  sdk: SDK,
  options: { key: 'storageQueue', schema: storageQueueOptionsSchema.strict() },
  names: isStorageQueueSpec,
  describe: redact,
  source: {
    forms: FORMS,
    async open(spec, { logger, options }) {
      const { storageQueueSourceFromCli } = await importAdapterModule(
        SDK,
        'source',
        () => import('./adapter.js'),
      );
      return storageQueueSourceFromCli(spec, { logger, options });
    },
  },
  replay: {
    forms: `${FORMS} (typically QUEUE-poison; drained: deleted once done)`,
    async open(spec, context) {
      const { storageQueueReplayReader } = await importAdapterModule(
        SDK,
        'replay',
        () => import('./replay-reader.js'),
      );
      return storageQueueReplayReader(spec, context);
    },
  },
  target: {
    forms: FORMS,
    async open(spec) {
      const { storageQueueTargetFromCli } = await importAdapterModule(
        SDK,
        'target',
        () => import('./sender.js'),
      );
      return storageQueueTargetFromCli(spec);
    },
  },
});
