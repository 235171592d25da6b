import { existsSync } from 'node:fs';
import type { Logger } from 'pino';
import { FileSource } from '../../adapters/file/index.js';
import { HttpIngressSource } from '../../adapters/http/index.js';
import type { SourceAdapter } from '../adapter.js';
import type { WorkerConfig } from '../worker-config.js';
import { UsageError } from './common.js';

export const SOURCE_FORMS = [
  'file:PATH',
  'http://HOST:PORT/PATH (HTTP ingress: listen for POSTed envelopes)',
].join(', ');

/**
 * Opens the source a `--source` value names. Queue adapters are imported only when used, so
 * their SDKs stay optional.
 */
export async function openSource(config: WorkerConfig, logger: Logger): Promise<SourceAdapter> {
  const spec = config.source;
  if (spec.startsWith('file:')) {
    const path = spec.slice('file:'.length);
    if (!path) throw new UsageError('--source file: needs a path');
    if (!existsSync(path)) throw new UsageError(`--source ${spec}: no such file`);
    return new FileSource({ path });
  }
  if (spec.startsWith('http://')) {
    const url = new URL(spec);
    const source = await HttpIngressSource.listen({
      host: url.hostname.replace(/^\[|\]$/g, ''),
      port: Number(url.port || 80),
      path: url.pathname === '/' ? '/events' : url.pathname,
      maxBodyBytes: config.maxEnvelopeBytes,
    });
    logger.info({ ingress: source.url }, 'listening for envelopes');
    return source;
  }
  throw new UsageError(`unknown --source "${spec}": expected ${SOURCE_FORMS}`);
}
