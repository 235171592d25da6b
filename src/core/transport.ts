/**
 * What a transport tells the CLI and the sidecar about itself: how a spec such as `sqs:URL` or
 * `file:PATH` names it, its options section in the sidecar config, and how to open a source
 * (`run --source`) or a target (`replay|trigger|simulate --to`). Each adapter exports one
 * descriptor from `adapters/<name>/cli.ts`; `src/transports.ts` lists them, one line each.
 *
 * A descriptor module never imports its SDK: it loads the adapter module with `import()` when a
 * source or target is opened (`importAdapterModule`), so cloud SDKs stay optional.
 */
import type { Logger } from 'pino';
import type { z } from 'zod';
import { ConfigError } from './errors.js';
import type { ReplayReader, ReplayReaderContext } from './replay-reader.js';
import type { SourceAdapter } from './source-adapter.js';
import type { Target } from './target.js';

/**
 * Which end a spec opens: `run --source` reads from it, `--to` puts envelopes on it, `replay`
 * reads dead events back from it.
 */
export type SpecRole = 'source' | 'target' | 'replay';

/** The explicit form of an HTTP ingress (`--source`, `--to`), for a URL that also reads as a queue. */
export const HTTP_INGRESS_PREFIX = 'http-ingress:';

/**
 * A `--source` or `--to` value that a transport cannot take as written (no path, no such file,
 * ambiguous between two transports). The CLI prints it with the command's usage and exits 2.
 */
export class SpecError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SpecError';
  }
}

/** What the sidecar hands a transport that opens a source. */
export interface SourceContext<Options> {
  readonly logger: Logger;
  /** The transport's section of the sidecar config (`options.key`), validated, defaults filled in. */
  readonly options: Options;
  /** How many messages the consumer handles at once (`concurrency`). */
  readonly concurrency: number;
  /** Larger messages are rejected (`maxEnvelopeBytes`). */
  readonly maxEnvelopeBytes: number;
  /** The sidecar's `consumerGroup` (`--consumer-group`), for transports that have consumer groups. */
  readonly consumerGroup: string;
}

/** What a target is opened with, from the command that opens it. */
export interface TargetContext {
  /** Sends in flight at once, at most (`--concurrency`; 1 for `trigger`): bounds an HTTP target's pool. */
  readonly concurrency: number;
}

export interface TransportDescriptor<Key extends string = string, Schema extends z.ZodObject = z.ZodObject> {
  /** A short name, e.g. `sqs`, `storage-queue`. */
  readonly name: string;
  /** The optional peer dependency that opening needs, for the `npm install X` hint. */
  readonly sdk?: string;
  /**
   * The adapter's options schema (its `options.ts`) and the key of its section in the sidecar
   * config: `sqs` gives `sqs.batchSize` in a file and `PARTNER_EVENTS_SQS_BATCH_SIZE`.
   */
  readonly options?: { readonly key: Key; readonly schema: Schema };
  /**
   * Whether `spec` names this transport in `role`. Throws a `SpecError` when it reads as this
   * transport and another alike (the user must then say which).
   */
  names(spec: string, role: SpecRole): boolean;
  /** The spec as it may be printed: credentials removed (`redact`). */
  describe(spec: string): string;
  readonly source?: {
    /** How a `--source` names it, for the usage text, e.g. `file:PATH`. */
    readonly forms: string;
    open(spec: string, context: SourceContext<z.output<Schema>>): Promise<SourceAdapter>;
  };
  readonly target?: {
    /** How a `--to` names it, for the usage text. */
    readonly forms: string;
    open(spec: string, context: TargetContext): Promise<Target>;
  };
  /**
   * `replay SOURCE`: reads dead events back from where this transport keeps them (a file, a
   * dead-letter queue, a hub). Its module is loaded only when opened.
   */
  readonly replay?: {
    /** How a replay SOURCE names it, for the usage text. */
    readonly forms: string;
    open(spec: string, context: ReplayReaderContext): Promise<ReplayReader>;
  };
}

/**
 * A descriptor with its options key and schema types kept: the sidecar config types its sections
 * by them (a transport without options has the key `never`, and no section).
 */
export function defineTransport<const Key extends string = never, Schema extends z.ZodObject = z.ZodObject>(
  descriptor: TransportDescriptor<Key, Schema>,
): TransportDescriptor<Key, Schema> {
  return descriptor;
}

/**
 * Loads the module that opens a source or target. Its SDK is an optional peer dependency: when
 * loading fails, say which package to install.
 */
export async function importAdapterModule<T>(
  sdk: string,
  role: SpecRole,
  load: () => Promise<T>,
): Promise<T> {
  try {
    return await load();
  } catch (cause) {
    throw new ConfigError(`this ${role} needs the ${sdk} package: npm install ${sdk}`, { cause });
  }
}
