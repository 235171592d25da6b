/**
 * `partner-events run` exports its spans by the standard OpenTelemetry variables: with
 * `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or
 * `OTEL_TRACES_EXPORTER=otlp`) set, it registers a tracer provider with the OTLP/HTTP (JSON)
 * exporter, `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` as its resource and the sampler of
 * `OTEL_TRACES_SAMPLER`. Without them nothing is loaded. The SDK packages are optional peer
 * dependencies, imported here only: a library user never gets an SDK from the kit.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type * as OtelApi from '@opentelemetry/api';
import { ConfigError, errorMessage } from '../core/errors.js';
import { openTelemetryApi } from '../core/tracing.js';

/** What the sidecar needs installed to export traces. */
export const TRACE_EXPORT_PACKAGES = [
  '@opentelemetry/api',
  '@opentelemetry/sdk-trace-base',
  '@opentelemetry/exporter-trace-otlp-http',
  '@opentelemetry/resources',
] as const;

const DEFAULT_SERVICE_NAME = 'partner-events';

/** Whether the environment asks for trace export (the OpenTelemetry SDK's own rules). */
export function traceExportRequested(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
  if (exporters.includes('none')) return false;
  return (
    exporters.includes('otlp') ||
    Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim()) ||
    Boolean(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim())
  );
}

/** The running exporter: `shutdown` flushes the spans still buffered (call it at stop). */
export interface TraceExport {
  /** Where spans go, for the start-up log line (no credentials: headers are not printed). */
  readonly endpoint: string;
  shutdown(): Promise<void>;
}

/**
 * Starts the exporter when the environment asks for it; resolves undefined otherwise. Throws a
 * ConfigError naming the packages to install when they are missing, and when a protocol other
 * than http/json is asked for.
 */
export async function startTraceExport(env: NodeJS.ProcessEnv): Promise<TraceExport | undefined> {
  if (!traceExportRequested(env)) return undefined;
  const protocol = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL)?.trim();
  if (protocol && protocol !== 'http/json') {
    throw new ConfigError(
      `OTEL_EXPORTER_OTLP_PROTOCOL=${protocol}: partner-events run exports traces over OTLP/HTTP with JSON only; set it to http/json (or leave it unset)`,
    );
  }
  const [base, exporter, resources] = await loadPackages();
  // The copy of the API the kit's spans use (one global registry serves every copy anyway).
  const api = openTelemetryApi();
  if (!api) throw missingPackages(new Error('cannot load @opentelemetry/api'));
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ 'service.name': DEFAULT_SERVICE_NAME }))
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const otlp = new exporter.OTLPTraceExporter();
  const provider = new base.BasicTracerProvider({
    resource,
    spanProcessors: [new base.BatchSpanProcessor(otlp)],
  });
  const contextManager = new AsyncLocalStorageContextManager(api.ROOT_CONTEXT);
  api.context.setGlobalContextManager(contextManager);
  api.trace.setGlobalTracerProvider(provider);
  return {
    endpoint: describeEndpoint(env),
    async shutdown() {
      await provider.shutdown();
      api.trace.disable();
      api.context.disable();
    },
  };
}

type Packages = [
  typeof import('@opentelemetry/sdk-trace-base'),
  typeof import('@opentelemetry/exporter-trace-otlp-http'),
  typeof import('@opentelemetry/resources'),
];

async function loadPackages(): Promise<Packages> {
  try {
    return await Promise.all([
      import('@opentelemetry/sdk-trace-base'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
    ]);
  } catch (cause) {
    throw missingPackages(cause);
  }
}

function missingPackages(cause: unknown): ConfigError {
  return new ConfigError(
    `OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_TRACES_EXPORTER ask for trace export, but the OpenTelemetry packages are not installed (${errorMessage(cause)}): npm install ${TRACE_EXPORT_PACKAGES.join(' ')}`,
    { cause },
  );
}

function describeEndpoint(env: NodeJS.ProcessEnv): string {
  const raw = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!raw) return 'http://localhost:4318/v1/traces (default)';
  try {
    const url = new URL(raw);
    return `${url.protocol}//${url.host}${url.pathname}`;
  } catch {
    return 'an unparsable OTEL_EXPORTER_OTLP_ENDPOINT';
  }
}

/**
 * The active context across awaits, so that a `--handlers` module sees its handler's span with
 * `trace.getActiveSpan()` and the forward span finds its parent. (What
 * `@opentelemetry/context-async-hooks` provides, without one more package to install.)
 */
export class AsyncLocalStorageContextManager implements OtelApi.ContextManager {
  readonly #storage = new AsyncLocalStorage<OtelApi.Context>();
  readonly #root: OtelApi.Context;

  constructor(root: OtelApi.Context) {
    this.#root = root;
  }

  active(): OtelApi.Context {
    return this.#storage.getStore() ?? this.#root;
  }

  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    context: OtelApi.Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    return this.#storage.run(context, () => fn.apply(thisArg, args));
  }

  bind<T>(context: OtelApi.Context, target: T): T {
    if (typeof target !== 'function') return target;
    const manager = this;
    return function (this: unknown, ...args: unknown[]) {
      return manager.with(context, () => (target as (...a: unknown[]) => unknown).apply(this, args));
    } as T;
  }

  enable(): this {
    return this;
  }

  disable(): this {
    this.#storage.disable();
    return this;
  }
}
