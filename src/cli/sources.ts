import { existsSync } from 'node:fs';
import type { Logger } from 'pino';
import { redact } from '../core/redact.js';
import type { SourceAdapter } from '../core/source-adapter.js';
import type { SidecarConfig } from '../sidecar/config.js';
import { specForms, transportFor } from '../transports.js';
import { UsageError } from './common.js';
import { didYouMean } from './did-you-mean.js';

/** Every form `--source` takes, from the transport registry. */
export const SOURCE_FORMS = specForms('source');

/**
 * Opens the source a `--source` value names, through the transport registry. Queue adapters are
 * imported only when used, so their SDKs stay optional.
 */
export async function openSource(config: SidecarConfig, logger: Logger): Promise<SourceAdapter> {
  const spec = config.source;
  const transport = transportFor(spec, 'source');
  if (!transport?.source) {
    // With a likely fix, that alone: the list of every form would bury it.
    const hint = sourceHint(spec);
    throw new UsageError(`unknown --source "${redact(spec)}"${hint || `: expected ${SOURCE_FORMS}`}`);
  }
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

/** The schemes a `--source` may start with (`file`, `sqs`, …), read from the forms. */
const SOURCE_SCHEMES = [
  ...new Set([...SOURCE_FORMS.matchAll(/\b([a-z][a-z-]+):[A-Z]/g)].map((m) => m[1] as string)),
];

/** `: did you mean file:events.jsonl?` for a file that exists, or the scheme closest to a mistyped one. */
function sourceHint(spec: string): string {
  if (existsSync(spec) && transportFor(`file:${spec}`, 'source'))
    return `: did you mean file:${redact(spec)}?`;
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(spec)?.[1];
  if (!scheme) return '';
  return didYouMean(
    scheme.toLowerCase(),
    SOURCE_SCHEMES,
    (s) => `${s}:${redact(spec.slice(scheme.length + 1))}`,
  );
}
