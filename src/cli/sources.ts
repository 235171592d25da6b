import type { Logger } from 'pino';
import { redact } from '../core/redact.js';
import type { SourceAdapter } from '../core/source-adapter.js';
import type { SidecarConfig } from '../sidecar/config.js';
import { specForms, transportFor } from '../transports.js';
import { UsageError } from './common.js';

/** Every form `--source` takes, from the transport registry. */
export const SOURCE_FORMS = specForms('source');

/**
 * Opens the source a `--source` value names, through the transport registry. Queue adapters are
 * imported only when used, so their SDKs stay optional.
 */
export async function openSource(config: SidecarConfig, logger: Logger): Promise<SourceAdapter> {
  const spec = config.source;
  const transport = transportFor(spec, 'source');
  if (!transport?.source)
    throw new UsageError(`unknown --source "${redact(spec)}": expected ${SOURCE_FORMS}`);
  const sections = config as unknown as Readonly<Record<string, Record<string, unknown>>>;
  return transport.source.open(spec, {
    logger,
    // The section was validated by this transport's own schema (the sidecar config is built from them).
    options: transport.options ? (sections[transport.options.key] ?? {}) : {},
    concurrency: config.concurrency,
    maxEnvelopeBytes: config.maxEnvelopeBytes,
    consumerGroup: config.consumerGroup,
  });
}
