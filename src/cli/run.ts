import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Logger } from 'pino';
import { type Consumer, createConsumer } from '../consumer/consumer.js';
import type { EventPattern, Handler } from '../consumer/router.js';
import { type ConsumerSettingsInput, consumerSettingsSchema } from '../consumer/settings.js';
import { ConfigError, errorMessage } from '../core/errors.js';
import { createLogger } from '../core/logger.js';
import { redact } from '../core/redact.js';
import { ENV_SECRETS_FILE, type Keyring, readSecretsFile, watchSecrets } from '../core/secrets.js';
import type { SourceAdapter } from '../core/source-adapter.js';
import type { DedupeStore } from '../dedupe/types.js';
import {
  configFromEnv,
  configFromFile,
  resolveSidecarConfig,
  type SidecarConfig,
} from '../sidecar/config.js';
import { LiveStats } from '../sidecar/console/index.js';
import { createForwarder, describeUrl, type Forwarder } from '../sidecar/forward.js';
import { ConsumerMetrics, collectProcessMetrics } from '../sidecar/metrics.js';
import { type OpsServer, startOpsServer } from '../sidecar/ops-server.js';
import { readiness } from '../sidecar/readiness.js';
import { startTraceExport, type TraceExport } from '../sidecar/tracing-export.js';
import {
  checkDeadLetterFile,
  DEFAULT_DEDUPE,
  loadKeyring,
  onStopSignals,
  openDedupe,
  opsPortHint,
  parse,
  parsePositiveInt,
  UsageError,
  writeLine,
} from './common.js';
import { handlersLoadError } from './handlers-module.js';
import { endOfLifeWarning } from './node-support.js';
import { OpenedAtStart } from './opened-at-start.js';
import { consoleFor } from './run-console.js';
import { openSource, SOURCE_FORMS } from './sources.js';
import { createRunOutput, type RunOutput, terminalLogDestination } from './terminal-report.js';

export const RUN_USAGE = `Usage: partner-events run [--config FILE] [--source SOURCE] (--forward URL | --handlers MODULE) [options]

Runs the worker: receives, verifies, de-duplicates, validates and hands each event to your app,
acking only on success. Every setting can come from a config file (YAML or JSON), from an
environment variable PARTNER_EVENTS_<SETTING> (env beats the file) and, for the common ones, a
flag (flags beat both); see docs/sidecar.md. SIGTERM/SIGINT drain in-flight work and exit 0
(a file source stopped before its end: 1).
With a secrets file, SIGHUP or a change of the file reloads the signing secrets.

  --config FILE        YAML or JSON file with any of the settings
  --source SOURCE      ${SOURCE_FORMS}
  --forward URL        POST each verified body to URL (2xx = success)
  --handlers MODULE    a JS module whose default export maps event patterns to handlers,
                       or is a function (consumer) => void that registers them
  --dedupe SPEC        sqlite:PATH (default ${DEFAULT_DEDUPE}), redis://HOST:PORT,
                       redis-cluster://HOST:PORT,HOST:PORT (Redis Cluster) or memory
  --dead-letter PATH   JSONL file for dead events (default partner-events-dead-letters.jsonl)
  --concurrency N      events processed at once (default 16)
  --ops-port N         /healthz, /readyz, /metrics port (default 9464; 0 = any free port)
  --no-ops             no ops endpoints (or --ops-port=-1)
  --no-console         no console at / of the ops port (docs/console.md)
  --ops-host HOST      interface for the ops endpoints (default 127.0.0.1; 0.0.0.0 in a pod)
  --consumer-group CG  Event Hubs consumer group (default $Default)
  --strict-age         measure signed_at age against the clock, not the broker's enqueue time
  --secrets-file PATH  secrets file (default: ${ENV_SECRETS_FILE} or PARTNER_EVENTS_SIGNING_SECRET[_PREVIOUS])
  --log-level LEVEL    fatal, error, warn, info (default), debug, trace or silent
  --pretty             lines for a person (one per event, a summary), the default on a terminal
  --json-logs          JSON log lines only, the default when standard output is not a terminal

A file source exits 1 when an event was dead-lettered or the file was not finished, else 0.`;

export async function runCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, RUN_OPTIONS);
  if (values.help) {
    writeLine(RUN_USAGE);
    return 0;
  }
  // Redacted: a stray argument is often a URL that lost its flag, query key and all.
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${redact(positionals[0] ?? '')}"`);
  // SIGHUP reloads the secrets while the worker runs (runUntilStopped). While it starts (the
  // secrets are being read then anyway) and while it closes, the signal's default action would
  // end the process half-way: a config manager's SIGHUP must never cost a drain.
  const holdHup = () => {};
  process.on('SIGHUP', holdHup);
  try {
    return await runWorker(values);
  } finally {
    process.off('SIGHUP', holdHup);
  }
}

/** `run` once its flags are read: start, run until stopped, close. */
async function runWorker(values: RunValues): Promise<number> {
  const config = resolveSidecarConfig({
    ...(values.config ? { file: configFromFile(values.config) } : {}),
    env: configFromEnv(process.env),
    flags: runFlags(values),
  });
  // Before the consumer exists, so that its first delivery is traced too.
  const traces = await startTraceExport(process.env);
  const worker = await openWorker(config, prettyOutput(values));
  if (traces) worker.logger.info({ endpoint: traces.endpoint }, 'exporting traces over OTLP/HTTP');
  const ops = await serveOps(worker, config, values.config);
  worker.output.ready(ops?.url);
  const endOfLife = endOfLifeWarning();
  if (endOfLife) worker.logger.warn(endOfLife.fields, endOfLife.message);
  await runUntilStopped(worker, config, ops);
  await flushTraces(traces, worker.logger);
  return worker.output.finish();
}

/** `--pretty`, `--json-logs`, else whether standard output is a terminal. */
function prettyOutput(values: RunValues): boolean {
  if (values.pretty && values['json-logs']) throw new UsageError('give one of --pretty and --json-logs');
  if (values.pretty || values['json-logs']) return Boolean(values.pretty);
  return process.stdout.isTTY === true;
}

const RUN_OPTIONS = {
  config: { type: 'string' },
  source: { type: 'string' },
  forward: { type: 'string' },
  handlers: { type: 'string' },
  dedupe: { type: 'string' },
  'dead-letter': { type: 'string' },
  concurrency: { type: 'string' },
  'ops-port': { type: 'string' },
  'ops-host': { type: 'string' },
  'no-ops': { type: 'boolean' },
  'no-console': { type: 'boolean' },
  'consumer-group': { type: 'string' },
  'strict-age': { type: 'boolean' },
  'secrets-file': { type: 'string' },
  'log-level': { type: 'string' },
  pretty: { type: 'boolean' },
  'json-logs': { type: 'boolean' },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

type RunValues = ReturnType<typeof parse<typeof RUN_OPTIONS>>['values'];

/** The flags' layer of the sidecar config (flags beat the environment and the file). */
function runFlags(values: RunValues): Record<string, unknown> {
  return {
    source: values.source,
    forward: values.forward,
    handlers: values.handlers,
    dedupe: values.dedupe,
    deadLetter: values['dead-letter'],
    concurrency:
      values.concurrency === undefined
        ? undefined
        : parsePositiveInt('--concurrency', values.concurrency, 16),
    strictAge: values['strict-age'],
    secretsFile: values['secrets-file'],
    logLevel: values['log-level'],
    consumerGroup: values['consumer-group'],
    ops: {
      port: values['no-ops'] ? -1 : values['ops-port'] === undefined ? undefined : Number(values['ops-port']),
      host: values['ops-host'],
      console: values['no-console'] ? false : undefined,
    },
  };
}

/** What `run` runs: the consumer over its source, with its metrics, keyring, logger and forwarder. */
interface Worker {
  readonly consumer: Consumer;
  /** With `--forward`: the connection pool to the app, closed once the consumer has stopped. */
  readonly forward: Forwarder | undefined;
  readonly source: SourceAdapter;
  readonly metrics: ConsumerMetrics;
  /** The console's live numbers. */
  readonly live: LiveStats;
  readonly keyring: Keyring;
  readonly logger: Logger;
  /** The tally and, on a terminal, the lines per event (`terminal-report.ts`). */
  readonly output: RunOutput;
}

/**
 * Opens the source and the dedupe store and builds the consumer with its handlers (not started).
 * A failure after the source is open (an invalid --dedupe, a handlers module that cannot be
 * loaded) closes what was opened before it propagates, so that `run` exits 2 instead of
 * listening on with an ingress nobody consumes.
 */
async function openWorker(config: SidecarConfig, pretty: boolean): Promise<Worker> {
  const level = config.logLevel ? { level: config.logLevel } : {};
  const logger = createLogger(level, pretty ? terminalLogDestination() : undefined);
  const keyring = loadKeyring(config.secretsFile, warnSecretsMode(logger));
  await checkDeadLetterFile(config.deadLetter);
  const opened = new OpenedAtStart(logger);
  try {
    const source = opened.add('source', await openSource(config, logger));
    const store = opened.add(
      'dedupe store',
      await openDedupe(config.dedupe, { logger, retentionMs: config.retentionMs, tenant: config.tenant }),
    );
    return await buildWorker({ config, pretty, logger, keyring, source, store }, opened);
  } catch (error) {
    await opened.closeAll();
    throw error;
  }
}

/** What openWorker opened, for buildWorker. */
interface OpenedParts {
  readonly config: SidecarConfig;
  readonly pretty: boolean;
  readonly logger: Logger;
  readonly keyring: Keyring;
  readonly source: SourceAdapter;
  readonly store: DedupeStore;
}

/** The consumer over the opened parts, with its metrics, output and forwarder or handlers module. */
async function buildWorker(parts: OpenedParts, opened: OpenedAtStart): Promise<Worker> {
  const { config, pretty, logger, keyring, source, store } = parts;
  const output = createRunOutput({
    pretty,
    source,
    destination: config.forward ? { forward: config.forward.url } : { handlers: config.handlers as string },
    deadLetterPath: config.deadLetter,
  });
  let consumer: Consumer | undefined;
  const metrics = new ConsumerMetrics({
    inFlight: () => consumer?.status.inFlight ?? 0,
    inFlightBytes: () => consumer?.status.inFlightBytes ?? 0,
    ready: () =>
      consumer !== undefined &&
      readiness(consumer, source, config.ops.stallAfterMs, undefined, forward).ready,
    dedupeAvailable: () => consumer?.status.dedupeAvailable ?? true,
  });
  const dedupe = metrics.countAbandonedClaims(store);
  const live = new LiveStats();
  consumer = createConsumer({
    ...pickConsumerSettings(config),
    source,
    secrets: keyring,
    dedupe,
    deadLetter: config.deadLetter,
    logger,
    onSettled: (report) => {
      metrics.observe(report);
      output.settled(report);
      live.observe(report);
    },
  });
  let forward: Forwarder | undefined;
  if (config.forward) {
    forward = opened.add(
      'forwarder',
      createForwarder({
        ...config.forward,
        connections: config.concurrency,
        onAnswer: (eventId, status) => output.answered(eventId, status),
      }),
    );
    consumer.on('*', forward).onUnknown(forward);
    logger.info({ forward: describeUrl(config.forward.url) }, 'forwarding verified events');
  } else {
    await registerHandlers(consumer, config.handlers as string);
  }
  return { consumer, forward, source, metrics, live, keyring, logger, output };
}

/** Starts /healthz, /readyz and /metrics, unless turned off; a failure stops the worker. */
async function serveOps(
  worker: Worker,
  config: SidecarConfig,
  configFile: string | undefined,
): Promise<OpsServer | undefined> {
  if (config.ops.port < 0) return undefined;
  const { consumer, source } = worker;
  const checks = () => readiness(consumer, source, config.ops.stallAfterMs, undefined, worker.forward).checks;
  const consoleServer = config.ops.console
    ? consoleFor({ consumer, live: worker.live, readiness: checks }, config, configFile)
    : undefined;
  collectProcessMetrics(worker.metrics.registry); // only when /metrics is served
  let ops: OpsServer;
  try {
    ops = await startOpsServer({
      console: consoleServer,
      host: config.ops.host,
      port: config.ops.port,
      registry: worker.metrics.registry,
      alive: () => consumer.status.state !== 'stopped',
      readiness: checks,
    });
  } catch (cause) {
    await consumer.stop(); // closes the source and the dedupe store: nothing is left listening
    throw new ConfigError(
      `cannot serve the ops endpoints on ${config.ops.host}:${config.ops.port}: ${errorMessage(cause)}${opsPortHint(cause)}`,
      { cause },
    );
  }
  worker.logger.info({ ops: ops.url }, 'operations endpoints: /healthz /readyz /metrics');
  if (consoleServer) worker.logger.info({ console: `${ops.url}/` }, 'console: open in a browser');
  return ops;
}

/**
 * Runs the consumer until SIGTERM / SIGINT (drained) or its source ends, reloading secrets
 * meanwhile; then closes the ops server (a signal during that is still caught).
 */
async function runUntilStopped(
  worker: Worker,
  config: SidecarConfig,
  ops: OpsServer | undefined,
): Promise<void> {
  const { consumer, logger } = worker;
  const stopWatching = watchSecretsFor(worker.keyring, config.secretsFile, logger);
  const stop = (signal: NodeJS.Signals) => {
    logger.info({ signal }, 'stopping: draining in-flight events');
    worker.output.stopping();
    void consumer.stop();
  };
  const unhookSignals = onStopSignals(stop);
  await consumer.start();
  await consumer.stopped;
  stopWatching();
  await worker.forward?.close(); // the app sees its connections end now, not at an idle timeout
  await ops?.close();
  unhookSignals();
}

/** Sends the spans still buffered; an unreachable collector is logged, not fatal at exit. */
async function flushTraces(traces: TraceExport | undefined, logger: Logger): Promise<void> {
  try {
    await traces?.shutdown();
  } catch (error) {
    logger.warn({ err: errorMessage(error) }, 'could not export the last spans');
  }
}

function pickConsumerSettings(config: SidecarConfig): ConsumerSettingsInput {
  const keys = Object.keys(consumerSettingsSchema.shape) as (keyof ConsumerSettingsInput)[];
  return Object.fromEntries(keys.map((k) => [k, config[k]])) as ConsumerSettingsInput;
}

function warnSecretsMode(logger: Logger) {
  return (message: string, details: { file: string; mode: string }) => logger.warn(details, message);
}

function watchSecretsFor(keyring: Keyring, secretsFile: string | undefined, logger: Logger): () => void {
  if (secretsFile) {
    return watchSecrets(keyring, () => readSecretsFile(secretsFile, { warn: warnSecretsMode(logger) }), {
      files: [secretsFile],
      onReload: (ids) => logger.info({ key_ids: ids }, 'signing secrets reloaded'),
      onError: (error) =>
        logger.error({ err: errorMessage(error) }, 'secrets reload failed: keeping the previous keys'),
    });
  }
  // The environment of a running process cannot change; still, SIGHUP must not kill the worker.
  const onHup = () =>
    logger.warn(
      'SIGHUP: secrets come from environment variables, which need a restart to change; use a secrets file to reload live',
    );
  process.on('SIGHUP', onHup);
  return () => process.off('SIGHUP', onHup);
}

type HandlerMap = Partial<Record<EventPattern | 'unknown', Handler<never>>>;

async function registerHandlers(consumer: Consumer, modulePath: string): Promise<void> {
  let mod: { default?: unknown };
  try {
    mod = (await import(pathToFileURL(resolve(modulePath)).href)) as { default?: unknown };
  } catch (cause) {
    throw handlersLoadError(modulePath, cause);
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
