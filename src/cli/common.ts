import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import type { Logger } from 'pino';
import { checkAppendable } from '../core/durable-append.js';
import { ConfigError, DedupeUnavailableError, errorMessage, isPartnerEventsError } from '../core/errors.js';
import { redact } from '../core/redact.js';
import { Keyring, readSecretsFile, secretsFromEnv } from '../core/secrets.js';
import { createMemoryDedupe } from '../dedupe/memory.js';
import { createSqliteDedupe } from '../dedupe/sqlite.js';
import type { DedupeStore } from '../dedupe/types.js';
import { didYouMean } from './did-you-mean.js';

/** A mistake in how the command was called: exit code 2, with a hint. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export const DEFAULT_DEDUPE = 'sqlite:partner-events-dedupe.db';

export function parse<const T extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: T) {
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError(parseErrorMessage(error, options));
  }
}

/** An unknown option named with the closest known one (`--forwrd` → `--forward`); other parse errors as Node words them. */
function parseErrorMessage(error: unknown, options: NonNullable<ParseArgsConfig['options']>): string {
  const unknown = /^Unknown option '([^'=]+)/.exec(errorMessage(error))?.[1];
  if ((error as { code?: unknown }).code !== 'ERR_PARSE_ARGS_UNKNOWN_OPTION' || !unknown) {
    return errorMessage(error);
  }
  const flags = Object.entries(options).flatMap(([name, option]) => [
    `--${name}`,
    ...(option.short ? [`-${option.short}`] : []),
  ]);
  return `unknown option ${unknown}${didYouMean(unknown, flags)}`;
}

/** Secrets from `--secrets-file` when given, else from the environment. */
export function loadKeyring(
  secretsFile: string | undefined,
  warn: (message: string, details: { file: string; mode: string }) => void = (message) =>
    process.stderr.write(`warning: ${message}\n`),
): Keyring {
  return new Keyring(
    secretsFile ? readSecretsFile(secretsFile, { warn }) : secretsFromEnv(process.env, { warn }),
  );
}

/**
 * `sqlite:PATH` (the default, one host), `redis://…` / `rediss://…` / `redis-cluster://H:P,H:P`
 * (many instances) or `memory`
 * (tests). With `readOnly`, a missing SQLite file is not created: an empty in-memory store stands
 * in (nothing has been recorded yet).
 */
export async function openDedupe(
  given: string,
  options: { readOnly?: boolean; logger?: Logger; retentionMs?: number; tenant?: string } = {},
): Promise<DedupeStore> {
  const spec = lowerCaseScheme(given);
  if (spec.startsWith('sqlite:')) {
    const path = spec.slice('sqlite:'.length);
    if (!path) {
      throw new UsageError('--dedupe sqlite: needs a path, e.g. sqlite:/var/lib/partner-events/dedupe.db');
    }
    if (options.readOnly && !existsSync(path)) return createMemoryDedupe();
    try {
      return createSqliteDedupe({ path });
    } catch (error) {
      throw sqliteOpenError(path, error);
    }
  }
  if (spec === 'memory') return createMemoryDedupe();
  if (spec.startsWith('redis://') || spec.startsWith('rediss://') || spec.startsWith('redis-cluster://')) {
    let redis: typeof import('../dedupe/redis.js');
    try {
      redis = await import('../dedupe/redis.js');
    } catch (cause) {
      throw new ConfigError('--dedupe redis:// needs the ioredis package: npm install ioredis', { cause });
    }
    return redis.createRedisDedupe({
      url: spec,
      tenant: options.tenant ?? process.env.PARTNER_EVENTS_TENANT ?? 'default',
      ...(options.logger ? { logger: options.logger } : {}),
      ...(options.retentionMs ? { retentionMs: options.retentionMs } : {}),
    });
  }
  // Redacted: the spec may come from PARTNER_EVENTS_DEDUPE, a Redis URL with its password.
  throw new UsageError(
    `unknown --dedupe "${redact(given)}": expected sqlite:PATH, redis://HOST:PORT, redis-cluster://HOST:PORT,HOST:PORT or memory`,
  );
}

/**
 * A `scheme://…` spec with its scheme in lower case: URL schemes are case-insensitive (RFC 3986,
 * 3.1), so `Redis://…` is a Redis URL, not an unknown store, and the Redis module, which tells a
 * cluster by its `redis-cluster://` prefix, sees one spelling.
 */
function lowerCaseScheme(spec: string): string {
  const scheme = /^[a-z][a-z0-9+.-]*(?=:\/\/)/i.exec(spec)?.[0];
  return scheme ? scheme.toLowerCase() + spec.slice(scheme.length) : spec;
}

/** A SQLite store that cannot be opened, with the file system's reason (EACCES, ENOENT, …) and what to do. */
function sqliteOpenError(path: string, error: unknown): unknown {
  if (!isPartnerEventsError(error)) return error;
  const code = systemCode(error);
  // A file system refusal (EACCES, ENOTDIR, …) is about the directory; SQLite's own (SQLITE_NOTADB) about the file.
  const fix = code?.startsWith('SQLITE_')
    ? ''
    : `its directory ${dirname(resolve(path))} must exist (or be creatable) and be writable by this user; or `;
  return new DedupeUnavailableError(
    `cannot open SQLite dedupe store at ${path}${code ? ` (${code})` : ''}: ${fix}choose another file with --dedupe sqlite:PATH`,
    { cause: error },
  );
}

/** The first `code` such as EACCES down an error's cause chain. */
function systemCode(error: unknown): string | undefined {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^(E[A-Z]+|SQLITE_[A-Z_]+)$/.test(code)) return code;
  }
  return undefined;
}

/**
 * Exit 2 at start, naming the system's reason, when dead events could never be written to
 * `path` (rather than at the first dead event, retried for ever).
 */
export async function checkDeadLetterFile(path: string): Promise<void> {
  try {
    await checkAppendable(path);
  } catch (cause) {
    const code = systemCode(cause);
    throw new ConfigError(
      `dead-letter file ${path} cannot be written${code ? ` (${code})` : ''}: choose another path with --dead-letter PATH`,
      { cause },
    );
  }
}

/** For an ops port already taken: the ways out that exist (`--ops-port N`, `--no-ops`). */
export function opsPortHint(cause: unknown): string {
  return (cause as { code?: unknown }).code === 'EADDRINUSE'
    ? '; choose another with --ops-port N (0 = any free port), or turn them off with --no-ops'
    : '';
}

/**
 * Calls `stop` at the first SIGINT or SIGTERM (a drain); at a second one, says so and exits at
 * once with 128 + the signal's number (130, 143), without waiting for what is in flight: a
 * second Ctrl-C means "now". Returns the function that removes the handlers.
 */
export function onStopSignals(stop: (signal: NodeJS.Signals) => void): () => void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals) => {
    if (!stopping) {
      stopping = true;
      stop(signal);
      return;
    }
    process.stderr.write(
      `partner-events: second ${signal}: exiting now, without waiting for work in flight (events not acknowledged are delivered again)\n`,
    );
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return () => {
    process.off('SIGINT', handler);
    process.off('SIGTERM', handler);
  };
}

export function parsePositiveInt(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0)
    throw new UsageError(`${name} must be a positive integer, got "${value}"`);
  return n;
}

/** Reads FILE, or standard input for `-`. */
export function readInput(file: string): string {
  try {
    return readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read ${file}: ${errorMessage(error)}`);
  }
}

export function writeLine(text: string): void {
  process.stdout.write(`${text}\n`);
}
