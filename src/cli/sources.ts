import { existsSync } from 'node:fs';
import type { Logger } from 'pino';
import { createFileSource } from '../../adapters/file/index.js';
import { createHttpIngress } from '../../adapters/http/index.js';
import { ambiguousQueueUrlMessage, HTTP_INGRESS_PREFIX, sqsReadingOf } from '../../adapters/sqs/url.js';
import { ConfigError } from '../core/errors.js';
import { redact } from '../core/redact.js';
import type { SourceAdapter } from '../core/source-adapter.js';
import type { SidecarConfig } from '../sidecar/config.js';
import { UsageError } from './common.js';

export const SOURCE_FORMS = [
  'file:PATH',
  'an SQS queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE; a local one when AWS_ENDPOINT_URL_SQS is set) or sqs:QUEUE_URL',
  'azure-storage-queue:QUEUE (AZURE_STORAGE_CONNECTION_STRING) or https://ACCOUNT.queue.core.windows.net/QUEUE[?SAS]',
  'azure-event-hubs:HUB (EVENTHUBS_CONNECTION_STRING)',
  'http://HOST:PORT/PATH or http-ingress:http://HOST:PORT/PATH (HTTP ingress: listen for POSTed envelopes)',
].join(', ');

/** Loads an adapter module; its SDK is an optional dependency, so say which one is missing. */
async function importAdapter<T>(sdk: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (cause) {
    throw new ConfigError(`this source needs the ${sdk} package: npm install ${sdk}`, { cause });
  }
}

/**
 * Opens the source a `--source` value names. Queue adapters are imported only when used, so
 * their SDKs stay optional.
 */
export async function openSource(config: SidecarConfig, logger: Logger): Promise<SourceAdapter> {
  const spec = config.source;
  if (spec.startsWith('file:')) {
    const path = spec.slice('file:'.length);
    if (!path) throw new UsageError('--source file: needs a path');
    if (!existsSync(path)) throw new UsageError(`--source ${spec}: no such file`);
    return createFileSource({ path });
  }
  const sqs = sqsReadingOf(spec);
  // https is never an ingress here (it listens on plain http), so only http is ambiguous.
  if (sqs === 'queue-or-http' && spec.startsWith('http://')) {
    throw new UsageError(ambiguousQueueUrlMessage('--source', spec, 'listen on'));
  }
  if (sqs !== 'other') {
    const adapter = await importAdapter('@aws-sdk/client-sqs', () => import('../../adapters/sqs/index.js'));
    return adapter.sqsSourceFromCli(spec, { logger, tuning: config.sqs });
  }
  if (spec.startsWith('azure-event-hubs:')) {
    const adapter = await importAdapter(
      '@azure/event-hubs',
      () => import('../../adapters/event-hubs/index.js'),
    );
    return adapter.eventHubsSourceFromCli(spec, {
      logger,
      consumerGroup: config.consumerGroup,
      tuning: config.eventHubs,
    });
  }
  if (spec.startsWith('azure-storage-queue:') || /^https:\/\/[^/?]+\.queue\.core\./.test(spec)) {
    const adapter = await importAdapter(
      '@azure/storage-queue',
      () => import('../../adapters/storage-queue/index.js'),
    );
    return adapter.storageQueueSourceFromCli(spec, { logger, tuning: config.storageQueue });
  }
  if (spec.startsWith('http://') || spec.startsWith(HTTP_INGRESS_PREFIX)) {
    const url = ingressUrl(spec);
    const source = await createHttpIngress({
      host: url.hostname.replace(/^\[|\]$/g, ''),
      port: Number(url.port || 80),
      path: url.pathname === '/' ? '/events' : url.pathname,
      maxBodyBytes: config.maxEnvelopeBytes,
      // Bounded memory: at most this many bodies wait for a free handler slot, and bodies being
      // received or waiting hold at most maxBufferedBytes (by default, what those could hold).
      maxPending: config.concurrency * 8,
      ...(config.http.maxBufferedBytes === undefined
        ? {}
        : { maxBufferedBytes: config.http.maxBufferedBytes }),
      bodyTimeoutMs: config.http.bodyTimeoutMs,
    });
    logger.info({ ingress: source.url }, 'listening for envelopes');
    return source;
  }
  throw new UsageError(`unknown --source "${redact(spec)}": expected ${SOURCE_FORMS}`);
}

function ingressUrl(spec: string): URL {
  const text = spec.startsWith(HTTP_INGRESS_PREFIX) ? spec.slice(HTTP_INGRESS_PREFIX.length) : spec;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UsageError(`--source ${redact(spec)} is not a URL`);
  }
  if (url.protocol !== 'http:')
    throw new UsageError(`--source ${redact(spec)}: an HTTP ingress listens on http://`);
  return url;
}
