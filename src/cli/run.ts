import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { FileSource } from '../../adapters/file/index.js';
import type { SourceAdapter } from '../adapter.js';
import { ConfigError } from '../errors.js';
import { createForwarder, describeUrl } from '../forward.js';
import { createLogger } from '../logger.js';
import type { EventPattern, Handler } from '../router.js';
import { ENV_SECRETS_FILE, readSecretsFile, watchSecrets } from '../secrets.js';
import { type Consumer, createConsumer } from '../worker.js';
import {
  DEFAULT_DEDUPE,
  loadKeyring,
  openDedupe,
  parse,
  parsePositiveInt,
  UsageError,
  writeLine,
} from './common.js';

export const RUN_USAGE = `Usage: partner-events run --source SOURCE (--forward URL | --handlers MODULE) [options]

Runs the worker: receives, verifies, de-duplicates, validates and hands each event to your app,
acking only on success. SIGTERM/SIGINT drain in-flight work and exit 0. With a secrets file,
SIGHUP or a change of the file reloads the signing secrets; secrets from environment variables
need a restart.

  --source SOURCE      file:PATH (JSONL envelopes)
  --forward URL        POST each verified body to URL (2xx = success)
  --handlers MODULE    a JS module whose default export maps event patterns to handlers,
                       or is a function (consumer) => void that registers them
  --dedupe SPEC        sqlite:PATH (default ${DEFAULT_DEDUPE}) or memory
  --dead-letter PATH   JSONL file for dead events (default partner-events-dead-letters.jsonl)
  --concurrency N      events processed at once (default 16)
  --strict-age         measure signed_at age against the clock, not the broker's enqueue time
  --secrets-file PATH  secrets file (default: ${ENV_SECRETS_FILE} or PARTNER_EVENTS_SIGNING_SECRET[_PREVIOUS])`;

export async function runCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    source: { type: 'string' },
    forward: { type: 'string' },
    handlers: { type: 'string' },
    dedupe: { type: 'string', default: DEFAULT_DEDUPE },
    'dead-letter': { type: 'string' },
    concurrency: { type: 'string' },
    'strict-age': { type: 'boolean', default: false },
    'secrets-file': { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (values.help) {
    writeLine(RUN_USAGE);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (!values.source) throw new UsageError('run needs --source');
  if (!values.forward === !values.handlers)
    throw new UsageError('run needs exactly one of --forward URL or --handlers MODULE');
  const source = openSource(values.source);
  const secretsFile = values['secrets-file'] ?? process.env[ENV_SECRETS_FILE];
  const keyring = loadKeyring(secretsFile);
  const logger = createLogger();
  const consumer = createConsumer({
    source,
    secrets: keyring,
    dedupe: await openDedupe(values.dedupe, { logger }),
    ...(values['dead-letter'] ? { deadLetter: values['dead-letter'] } : {}),
    concurrency: parsePositiveInt('--concurrency', values.concurrency, 16),
    strictAge: values['strict-age'],
    logger,
  });
  if (values.forward) {
    const forward = createForwarder({ url: values.forward, timeoutMs: 10_000 });
    consumer.on('*', forward).onUnknown(forward);
    logger.info({ forward: describeUrl(values.forward) }, 'forwarding verified events');
  } else {
    await registerHandlers(consumer, values.handlers as string);
  }

  let stopWatching: () => void;
  if (secretsFile) {
    stopWatching = watchSecrets(keyring, () => readSecretsFile(secretsFile), {
      files: [secretsFile],
      onReload: (ids) => logger.info({ key_ids: ids }, 'signing secrets reloaded'),
      onError: (error) =>
        logger.error({ err: (error as Error).message }, 'secrets reload failed: keeping the previous keys'),
    });
  } else {
    // The environment of a running process cannot change; still, SIGHUP must not kill the worker.
    const onHup = () =>
      logger.warn(
        'SIGHUP: secrets come from environment variables, which need a restart to change; use a secrets file to reload live',
      );
    process.on('SIGHUP', onHup);
    stopWatching = () => process.off('SIGHUP', onHup);
  }
  const stop = (signal: NodeJS.Signals) => {
    logger.info({ signal }, 'stopping: draining in-flight events');
    void consumer.stop();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  await consumer.start();
  await consumer.stopped;
  stopWatching();
  process.off('SIGTERM', stop);
  process.off('SIGINT', stop);
  return 0;
}

function openSource(spec: string): SourceAdapter {
  if (spec.startsWith('file:')) {
    const path = spec.slice('file:'.length);
    if (!path) throw new UsageError('--source file: needs a path');
    if (!existsSync(path)) throw new UsageError(`--source ${spec}: no such file`);
    return new FileSource({ path });
  }
  throw new UsageError(`unknown --source "${spec}": supported here is file:PATH`);
}

type HandlerMap = Partial<Record<EventPattern | 'unknown', Handler<never>>>;

async function registerHandlers(consumer: Consumer, modulePath: string): Promise<void> {
  let mod: { default?: unknown };
  try {
    mod = (await import(pathToFileURL(resolve(modulePath)).href)) as { default?: unknown };
  } catch (cause) {
    throw new ConfigError(`cannot load --handlers module ${modulePath}`, { cause });
  }
  const exported = mod.default;
  if (typeof exported === 'function') {
    await (exported as (c: Consumer) => unknown)(consumer);
    return;
  }
  if (typeof exported !== 'object' || exported === null) {
    throw new ConfigError(`--handlers module ${modulePath} must default-export a handler map or a function`);
  }
  for (const [pattern, handler] of Object.entries(exported as HandlerMap)) {
    if (pattern === 'unknown') consumer.onUnknown(handler as Handler<unknown> as never);
    else consumer.on(pattern as EventPattern, handler as never);
  }
}
