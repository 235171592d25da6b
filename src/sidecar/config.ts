import { readFileSync } from 'node:fs';
import { parseDocument } from 'yaml';
import { z } from 'zod';
import { consumerSettingsSchema } from '../consumer/settings.js';
import { ConfigError } from '../core/errors.js';
import { hasCredentials } from '../core/http-answer.js';
import type { TransportDescriptor } from '../core/transport.js';
import { TRANSPORTS, type Transport } from '../transports.js';
import { FORWARD_URL_CREDENTIALS } from './forward.js';

/** A section per transport with options, keyed as its descriptor says (`sqs: { batchSize… }`). */
type OptionsSections<T extends Transport> = {
  [D in T as NonNullable<D['options']>['key']]: z.ZodPrefault<NonNullable<D['options']>['schema']>;
};

function optionsSections<const T extends readonly Transport[]>(transports: T): OptionsSections<T[number]> {
  const sections: Record<string, z.ZodType> = {};
  for (const transport of transports as readonly TransportDescriptor[]) {
    if (transport.options) sections[transport.options.key] = transport.options.schema.prefault({});
  }
  return sections as OptionsSections<T[number]>;
}

const forwardSchema = z.strictObject({
  /** The app's endpoint; each verified body is POSTed here. */
  url: z.url({ protocol: /^https?$/ }).refine((url) => !hasCredentials(url), FORWARD_URL_CREDENTIALS),
  /** Per request, in ms. */
  timeoutMs: z.number().int().positive().default(10_000),
  /** Extra request headers (e.g. an internal token for the app). */
  headers: z.record(z.string(), z.string()).default({}),
});

/**
 * The sidecar's whole configuration: the consumer settings plus where events come from, where
 * they go and how the worker is operated. One schema for config files, environment variables and
 * flags; `z.input` is what a file may contain.
 */
export const sidecarConfigSchema = consumerSettingsSchema
  .extend({
    /** `file:PATH`, `http://HOST:PORT/PATH` (ingress), an SQS queue URL, `azure-storage-queue:NAME`, `https://ACCOUNT.queue.core.windows.net/QUEUE`, `azure-event-hubs:HUB`. */
    source: z.string().min(1),
    /** Forward verified events to the app (a URL, or `{ url, timeoutMs, headers }`). */
    forward: z.preprocess((v) => (typeof v === 'string' ? { url: v } : v), forwardSchema).optional(),
    /** Or: a JS module whose default export maps event patterns to handlers. */
    handlers: z.string().min(1).optional(),
    /**
     * `sqlite:PATH`, `redis://…`, `rediss://…`, `redis-cluster://HOST:PORT,HOST:PORT` or `memory`;
     * or `{ redisCluster: ['HOST:PORT', …] }`, a Redis Cluster's seed nodes as a list.
     */
    dedupe: z.preprocess(redisClusterList, z.string().min(1)).default('sqlite:partner-events-dedupe.db'),
    /** JSONL file for dead events. */
    deadLetter: z.string().min(1).default('partner-events-dead-letters.jsonl'),
    /** Signing secrets file (JSON key list or one raw secret), reloaded on change and SIGHUP. */
    secretsFile: z.string().min(1).optional(),
    /** Second part of every Redis dedupe key. */
    tenant: z.string().min(1).default('default'),
    /** Event Hubs consumer group. */
    consumerGroup: z.string().min(1).default('$Default'),
    /** Each transport's options, for a source of that transport: `sqs`, `storageQueue`, `eventHubs`, `http`. */
    ...optionsSections(TRANSPORTS),
    ops: z
      .strictObject({
        /** Port of /healthz, /readyz and /metrics; 0 picks a free one, -1 turns them off. */
        port: z.number().int().min(-1).max(65_535).default(9464),
        /** Interface to bind; `0.0.0.0` in a pod so the kubelet's probes can reach it. */
        host: z.string().min(1).default('127.0.0.1'),
        /** A receive pending longer than this (beyond the source's own wait) marks the worker not ready. */
        stallAfterMs: z.number().int().positive().default(120_000),
        /** The console at `/` of the ops port (docs/console.md); `--no-console` turns it off. */
        console: z.boolean().default(true),
      })
      .prefault({}),
    /** Default: the `LOG_LEVEL` environment variable, else `info`. */
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).optional(),
  })
  .refine((c) => (c.forward === undefined) !== (c.handlers === undefined), {
    message: 'set exactly one of forward (a URL) or handlers (a module path)',
    path: ['forward'],
  });

/** `{ redisCluster: [nodes] }` → `redis-cluster://node,node`; anything else as it is. */
function redisClusterList(value: unknown): unknown {
  if (typeof value !== 'object' || value === null || !('redisCluster' in value)) return value;
  const nodes = (value as { redisCluster: unknown }).redisCluster;
  if (!Array.isArray(nodes) || nodes.length === 0 || !nodes.every((n) => typeof n === 'string')) return value;
  return `redis-cluster://${nodes.join(',')}`;
}

export type SidecarConfigInput = z.input<typeof sidecarConfigSchema>;
export type SidecarConfig = z.output<typeof sidecarConfigSchema>;

export const ENV_PREFIX = 'PARTNER_EVENTS_';

type Plain = Record<string, unknown>;

/** `retry.maxAttempts` → `PARTNER_EVENTS_RETRY_MAX_ATTEMPTS`. */
export function envName(path: readonly string[]): string {
  return ENV_PREFIX + path.map((p) => p.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()).join('_');
}

interface Leaf {
  path: string[];
  kind: string;
}

/** Every settable leaf of the schema, with its kind (to parse environment strings). */
export function configLeaves(): Leaf[] {
  const leaves: Leaf[] = [];
  const walk = (schema: z.ZodType, path: string[]) => {
    let t = schema as z.ZodType & { _zod: { def: { type: string; innerType?: z.ZodType; out?: z.ZodType } } };
    // Unwrap default / optional / prefault / pipe (preprocess) wrappers.
    for (;;) {
      const def = t._zod.def;
      if (def.innerType) t = def.innerType as typeof t;
      else if (def.type === 'pipe' && def.out) t = def.out as typeof t;
      else break;
    }
    const shape = (t as unknown as { shape?: Record<string, z.ZodType> }).shape;
    if (t._zod.def.type === 'object' && shape && path.length < 2) {
      for (const [key, child] of Object.entries(shape)) walk(child, [...path, key]);
    } else {
      leaves.push({ path, kind: t._zod.def.type });
    }
  };
  walk(sidecarConfigSchema, []); // zod 4's `.refine()` keeps the object schema and its shape
  return leaves;
}

/** Reads `PARTNER_EVENTS_*` variables into a partial config (numbers, booleans and JSON parsed). */
export function configFromEnv(env: NodeJS.ProcessEnv): Plain {
  const out: Plain = {};
  for (const leaf of configLeaves()) {
    const raw = env[envName(leaf.path)];
    if (raw === undefined || raw === '') continue;
    let value: unknown = raw;
    if (leaf.kind === 'number') value = Number(raw);
    else if (leaf.kind === 'boolean') value = raw === 'true' ? true : raw === 'false' ? false : raw;
    else if (leaf.kind === 'record') {
      try {
        value = JSON.parse(raw);
      } catch {
        throw new ConfigError(`${envName(leaf.path)} must be a JSON object`);
      }
    }
    setPath(out, leaf.path, value);
  }
  return out;
}

/** Reads a YAML or JSON config file (one parser: JSON is YAML 1.2's flow syntax). */
export function configFromFile(path: string): Plain {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new ConfigError(`cannot read config file ${path}`, { cause });
  }
  const doc = path.endsWith('.json')
    ? parseJsonConfig(text, `config file ${path} is not valid JSON`)
    : parseYamlConfig(text, `config file ${path} is not valid YAML`);
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc))
    throw new ConfigError(`config file ${path} must hold a mapping of settings`);
  return doc as Plain;
}

// A syntax error in a config file names its kind and its line and column, never the text there:
// the file holds `forward.headers`, and a line quoted with a caret could be a bearer token.

/** YAML: the yaml library's error code (e.g. `MISSING_CHAR`); its warnings, which quote the line, are not printed. */
function parseYamlConfig(text: string, invalid: string): unknown {
  const doc = parseDocument(text, { prettyErrors: false, logLevel: 'silent' });
  const [error] = doc.errors;
  if (error) throw new ConfigError(`${invalid}: ${error.code} at ${lineAndColumn(text, error.pos[0])}`);
  try {
    return doc.toJS();
  } catch {
    // An alias without its anchor (or too many aliases); the message would quote the alias.
    throw new ConfigError(`${invalid}: an alias (*name) could not be resolved`);
  }
}

/**
 * JSON: V8 names the place of most errors ("… in JSON at position 26") but quotes the text
 * around an unexpected token; then the yaml parser (JSON is YAML's flow syntax) finds the place.
 */
function parseJsonConfig(text: string, invalid: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    const message = error instanceof Error ? error.message : '';
    const at = / in JSON at position (\d+)/.exec(message);
    if (at)
      throw new ConfigError(
        `${invalid}: ${message.slice(0, at.index)} at ${lineAndColumn(text, Number(at[1]))}`,
      );
    if (!message.includes('"')) throw new ConfigError(`${invalid}: ${message}`); // quotes nothing
    const [yamlError] = parseDocument(text, { prettyErrors: false, logLevel: 'silent' }).errors;
    if (yamlError)
      throw new ConfigError(`${invalid}: ${yamlError.code} at ${lineAndColumn(text, yamlError.pos[0])}`);
    throw new ConfigError(`${invalid}: a value is not JSON (strings need double quotes)`);
  }
}

function lineAndColumn(text: string, offset: number): string {
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  return `line ${line}, column ${offset - before.lastIndexOf('\n')}`;
}

/**
 * Defaults < config file < environment < flags. Validated once, before anything connects;
 * errors name every bad field (with its environment variable).
 */
export function resolveSidecarConfig(layers: { file?: Plain; env?: Plain; flags?: Plain }): SidecarConfig {
  const [file, env, flags] = [layers.file, layers.env, layers.flags].map(normaliseForward);
  const merged = deepMerge(deepMerge(file ?? {}, env ?? {}), flags ?? {});
  const result = sidecarConfigSchema.safeParse(merged);
  if (!result.success) {
    const leaves = new Set(configLeaves().map((l) => l.path.join('.')));
    const lines = result.error.issues.map((issue) => {
      const path = issue.path.map(String);
      // A value given as a flag is named by that flag, as typed; else the key with its
      // environment variable, where one exists (leaves, not whole sections).
      const flag = flagThatSet(path, flags);
      const env = leaves.has(path.join('.')) ? ` (${envName(path)})` : '';
      const where = flag ?? (path.length ? `${path.join('.')}${env}` : '(config)');
      return `  - ${where}: ${issue.message}`;
    });
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`, {
      details: { issues: result.error.issues },
    });
  }
  return result.data;
}

/** The CLI flag that set `path`, when the flags layer did: `ops.port` → `--ops-port`, `forward.url` → `--forward`. */
function flagThatSet(path: readonly string[], flags: Plain | undefined): string | undefined {
  let value: unknown = flags;
  for (const key of path)
    value = typeof value === 'object' && value !== null ? (value as Plain)[key] : undefined;
  if (value === undefined || path.length === 0) return undefined;
  const name = path.join('.') === 'forward.url' ? 'forward' : path.join('-');
  return `--${name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
}

/** `forward: URL` is shorthand for `forward: { url: URL }`; expand it so layers merge field by field. */
function normaliseForward(layer: Plain | undefined): Plain | undefined {
  if (typeof layer?.forward !== 'string') return layer;
  return { ...layer, forward: { url: layer.forward } };
}

function setPath(target: Plain, path: readonly string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null) node[key] = {};
    node = node[key] as Plain;
  }
  node[path[path.length - 1] as string] = value;
}

function deepMerge(base: Plain, over: Plain): Plain {
  const out: Plain = { ...base };
  for (const [key, value] of Object.entries(over)) {
    if (value === undefined) continue;
    const current = out[key];
    out[key] = isPlain(value) && isPlain(current) ? deepMerge(current, value) : value;
  }
  return out;
}

function isPlain(value: unknown): value is Plain {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
