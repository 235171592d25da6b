import { createSecretKey, type KeyObject } from 'node:crypto';
import { closeSync, fstatSync, openSync, readFileSync, unwatchFile, watchFile } from 'node:fs';
import { basename } from 'node:path';
import { ConfigError } from './errors.js';
import { formatMode } from './private-file.js';

/** One signing secret as configured. The secret is used as its UTF-8 bytes (or the bytes given). */
export interface SigningSecret {
  /** Shown in logs and results when this secret verified an event; never the secret itself. */
  readonly id: string;
  readonly secret: string | Uint8Array;
  /** After this moment the secret no longer verifies anything (end of a rotation grace window). */
  readonly notAfter?: Date | number;
}

export interface ActiveKey {
  readonly id: string;
  readonly key: KeyObject;
  readonly notAfterMs: number;
}

export const ENV_SECRET = 'PARTNER_EVENTS_SIGNING_SECRET';
export const ENV_SECRET_PREVIOUS = 'PARTNER_EVENTS_SIGNING_SECRET_PREVIOUS';
export const ENV_SECRET_PREVIOUS_NOT_AFTER = 'PARTNER_EVENTS_SIGNING_SECRET_PREVIOUS_NOT_AFTER';
export const ENV_SECRETS_FILE = 'PARTNER_EVENTS_SECRETS_FILE';

/**
 * The set of secrets that currently verify events: the current one and, during a rotation's
 * grace window, the previous one(s). `replace` swaps the whole set atomically, so a reload never
 * leaves a message verified against a half-updated ring.
 */
export class Keyring {
  #keys: readonly ActiveKey[] = [];

  constructor(secrets: readonly SigningSecret[]) {
    this.replace(secrets);
  }

  replace(secrets: readonly SigningSecret[]): void {
    this.#keys = toActiveKeys(secrets);
  }

  /** Keys usable at `nowMs`, in configured order (current first). */
  active(nowMs: number = Date.now()): readonly ActiveKey[] {
    const keys = this.#keys;
    for (const k of keys) {
      if (k.notAfterMs <= nowMs) return keys.filter((key) => key.notAfterMs > nowMs);
    }
    return keys;
  }

  /** Ids of all configured keys, for start-up logs and readiness checks. */
  get ids(): readonly string[] {
    return this.#keys.map((k) => k.id);
  }
}

function toActiveKeys(secrets: readonly SigningSecret[]): ActiveKey[] {
  if (secrets.length === 0) {
    throw new ConfigError(
      `no signing secret configured: set ${ENV_SECRET} (and ${ENV_SECRET_PREVIOUS} during a rotation) or a secrets file`,
      { code: 'SECRET_INVALID' },
    );
  }
  const seen = new Set<string>();
  return secrets.map((s) => {
    if (typeof s.id !== 'string' || s.id.trim() === '') {
      throw new ConfigError('every signing secret needs a non-empty id', { code: 'SECRET_INVALID' });
    }
    if (seen.has(s.id))
      throw new ConfigError(`signing secret id "${s.id}" is used twice`, { code: 'SECRET_INVALID' });
    seen.add(s.id);
    assertStrongSecret(s.id, s.secret);
    const bytes = typeof s.secret === 'string' ? Buffer.from(s.secret, 'utf8') : Buffer.from(s.secret);
    const notAfterMs = s.notAfter === undefined ? Number.POSITIVE_INFINITY : new Date(s.notAfter).getTime();
    if (Number.isNaN(notAfterMs)) {
      throw new ConfigError(`signing secret "${s.id}" has an invalid notAfter date`, {
        code: 'SECRET_INVALID',
      });
    }
    return { id: s.id, key: createSecretKey(bytes), notAfterMs };
  });
}

// Refuse the mistakes that silently make every signature fail: an empty value, or a value with
// a stray space or newline (copied from a terminal, `echo` into a file, a YAML block scalar).
function assertStrongSecret(id: string, secret: string | Uint8Array): void {
  if (typeof secret === 'string') {
    if (secret.length === 0)
      throw new ConfigError(`signing secret "${id}" is empty`, { code: 'SECRET_INVALID' });
    if (secret.trim() !== secret) {
      throw new ConfigError(
        `signing secret "${id}" has whitespace at its start or end; remove it (a trailing newline is the usual cause)`,
        { code: 'SECRET_INVALID' },
      );
    }
  } else if (secret.byteLength === 0) {
    throw new ConfigError(`signing secret "${id}" is empty`, { code: 'SECRET_INVALID' });
  }
}

/**
 * Reads secrets from the environment: `PARTNER_EVENTS_SECRETS_FILE` if set, else
 * `PARTNER_EVENTS_SIGNING_SECRET` (id "current") and, during a rotation,
 * `PARTNER_EVENTS_SIGNING_SECRET_PREVIOUS` (id "previous", optionally ending at
 * `PARTNER_EVENTS_SIGNING_SECRET_PREVIOUS_NOT_AFTER`, an ISO 8601 time).
 */
export function secretsFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  options: ReadSecretsFileOptions = {},
): SigningSecret[] {
  const file = env[ENV_SECRETS_FILE];
  if (file) return readSecretsFile(file, options);
  const secrets: SigningSecret[] = [];
  const current = env[ENV_SECRET];
  if (current !== undefined) secrets.push({ id: 'current', secret: current });
  const previous = env[ENV_SECRET_PREVIOUS];
  if (previous !== undefined && previous !== '') {
    const notAfter = env[ENV_SECRET_PREVIOUS_NOT_AFTER];
    secrets.push(
      notAfter
        ? { id: 'previous', secret: previous, notAfter: parseDate(notAfter) }
        : { id: 'previous', secret: previous },
    );
  }
  return secrets;
}

function parseDate(text: string): Date {
  const d = new Date(text);
  if (Number.isNaN(d.getTime())) {
    throw new ConfigError(`${ENV_SECRET_PREVIOUS_NOT_AFTER} is not a date: expected ISO 8601`, {
      code: 'SECRET_INVALID',
    });
  }
  return d;
}

interface SecretsFileKey {
  id?: unknown;
  secret?: unknown;
  not_after?: unknown;
}

export interface ReadSecretsFileOptions {
  /**
   * Told when the file is readable by group or others (as ssh warns about a key file): the
   * message names the file and its mode, never its content. Default: `process.emitWarning`.
   */
  warn?: (message: string, details: { file: string; mode: string }) => void;
}

/**
 * A secrets file is either JSON — `{"keys": [{"id": "2026-11", "secret": "…", "not_after": "…"}]}`,
 * current key first — or a single raw secret (a mounted Kubernetes secret), whose one trailing
 * newline is removed. A file that group or others may read still loads, with a warning.
 */
export function readSecretsFile(path: string, options: ReadSecretsFileOptions = {}): SigningSecret[] {
  let text: string;
  let mode: number;
  try {
    const fd = openSync(path, 'r');
    try {
      mode = fstatSync(fd).mode;
      text = readFileSync(fd, 'utf8');
    } finally {
      closeSync(fd);
    }
  } catch (cause) {
    throw new ConfigError(`cannot read secrets file ${path}`, { code: 'SECRET_INVALID', cause });
  }
  // Writable matters as much as readable: whoever can write the file can add a key of their own
  // (reloaded without a restart) and sign events that verify.
  if ((mode & 0o066) !== 0 && process.platform !== 'win32') {
    const details = { file: path, mode: formatMode(mode) };
    const access = [mode & 0o044 ? 'readable' : '', mode & 0o022 ? 'writable' : '']
      .filter(Boolean)
      .join(' and ');
    const message = `secrets file ${path} is ${access} by group or others (mode ${details.mode}): chmod 600 it`;
    if (options.warn) options.warn(message, details);
    else process.emitWarning(message, { code: 'PARTNER_EVENTS_SECRETS_FILE_MODE' });
  }
  if (text.trimStart().startsWith('{')) return parseSecretsJson(path, text);
  return [{ id: `file:${basename(path)}`, secret: text.replace(/\r?\n$/, '') }];
}

function parseSecretsJson(path: string, text: string): SigningSecret[] {
  let doc: { keys?: unknown };
  try {
    doc = JSON.parse(text) as { keys?: unknown };
  } catch {
    throw new ConfigError(`secrets file ${path} is not valid JSON`, { code: 'SECRET_INVALID' });
  }
  if (!Array.isArray(doc.keys)) {
    throw new ConfigError(`secrets file ${path} must have a "keys" array`, { code: 'SECRET_INVALID' });
  }
  return doc.keys.map((raw: SecretsFileKey, i) => {
    if (
      typeof raw !== 'object' ||
      raw === null ||
      typeof raw.id !== 'string' ||
      typeof raw.secret !== 'string'
    ) {
      throw new ConfigError(`secrets file ${path}: keys[${i}] needs string "id" and "secret"`, {
        code: 'SECRET_INVALID',
      });
    }
    if (raw.not_after === undefined) return { id: raw.id, secret: raw.secret };
    if (typeof raw.not_after !== 'string' || Number.isNaN(Date.parse(raw.not_after))) {
      throw new ConfigError(`secrets file ${path}: keys[${i}].not_after must be an ISO 8601 time`, {
        code: 'SECRET_INVALID',
      });
    }
    return { id: raw.id, secret: raw.secret, notAfter: new Date(raw.not_after) };
  });
}

export interface SecretsReloadOptions {
  /** Files whose change triggers a reload (polled, so symlink swaps of mounted secrets are seen). */
  files?: readonly string[];
  /** Reload on SIGHUP as well. Default true. */
  sighup?: boolean;
  pollIntervalMs?: number;
  onReload?: (ids: readonly string[]) => void;
  onError?: (error: unknown) => void;
}

/**
 * Re-reads secrets without a restart when a secrets file changes or the process gets SIGHUP.
 * A reload that fails keeps the previous keys (and reports the error): a half-written file never
 * takes verification down. Returns a function that stops watching.
 */
export function watchSecrets(
  keyring: Keyring,
  load: () => readonly SigningSecret[],
  options: SecretsReloadOptions = {},
): () => void {
  const reload = () => {
    try {
      const secrets = load();
      keyring.replace(secrets);
      options.onReload?.(keyring.ids);
    } catch (error) {
      options.onError?.(error);
    }
  };
  const files = options.files ?? [];
  const interval = options.pollIntervalMs ?? 1000;
  for (const file of files) watchFile(file, { interval, persistent: false }, reload);
  const sighup = options.sighup ?? true;
  if (sighup) process.on('SIGHUP', reload);
  return () => {
    for (const file of files) unwatchFile(file, reload);
    if (sighup) process.off('SIGHUP', reload);
  };
}
