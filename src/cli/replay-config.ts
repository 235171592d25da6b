import { DEFAULT_MAX_ENVELOPE_BYTES } from '../core/envelope.js';
import { ConfigError } from '../core/errors.js';
import { configFromFile, envName, resolveSidecarConfig } from '../sidecar/config.js';
import { parsePositiveInt } from './common.js';
import { terminalSafe } from './terminal-safe.js';

/** The store `run` reads from the environment (its config key `dedupe`), and `replay` too. */
export const ENV_DEDUPE = envName(['dedupe']);

/** The largest envelope `run` accepts, from the environment (its config key `maxEnvelopeBytes`); `replay` too. */
export const ENV_MAX_ENVELOPE_BYTES = envName(['maxEnvelopeBytes']);

/**
 * The app's URL `run` reads from the environment (`forward.url`), and `replay` too: how the
 * console hands its replay child the worker's URL, whose query may hold a key (`?code=`).
 */
export const ENV_FORWARD_URL = envName(['forward', 'url']);

/**
 * What `replay --config FILE` takes from the worker's own config file: where and how it forwards
 * (URL, timeout, extra headers such as an internal token, which a replay must send too but which
 * must never be on a command line), its dedupe store, secrets and dedupe keys, and the largest
 * envelope it accepts.
 */
export interface WorkerSettings {
  readonly forward:
    | { readonly url: string; readonly timeoutMs: number; readonly headers: Readonly<Record<string, string>> }
    | undefined;
  /** The file's headers that `forward` leaves out, because `--forward` names another app than the file. */
  readonly withheldHeaders: WithheldHeaders | undefined;
  readonly dedupe: string;
  readonly secretsFile: string | undefined;
  /** Only when the file sets them: else the store's defaults (and PARTNER_EVENTS_TENANT) hold. */
  readonly tenant: string | undefined;
  readonly retentionMs: number | undefined;
  /** The file's `maxEnvelopeBytes`, only when it sets one. */
  readonly maxEnvelopeBytes: number | undefined;
}

/** The replay flags that win over the file. */
export interface ReplayFlagsLayer {
  readonly forward: string | undefined;
  /** `--to`: events are injected, so nothing of the file's `forward` is used. */
  readonly to: string | undefined;
  readonly dedupe: string | undefined;
  readonly secretsFile: string | undefined;
  /** `--send-config-headers`: the file's headers go to `--forward URL` even on another origin. */
  readonly sendConfigHeaders: boolean;
}

/**
 * The file's `forward.headers` not sent: `--forward URL` is not on the origin of the file's
 * `forward.url`, the app the headers (an internal token, say) were written for.
 */
export interface WithheldHeaders {
  /** The header names, never their values. */
  readonly names: readonly string[];
  /** The origin of the file's `forward.url`. */
  readonly fileOrigin: string;
  /** The origin of `--forward URL`. */
  readonly forwardOrigin: string;
}

// The file is a worker's: its source, and its destination when a replay sends elsewhere, may be
// missing (given to `run` as flags) or beside the point; these stand in for them in the check.
const NOT_READ = '(not read by replay)';

/**
 * The worker's config file, read by `run`'s own loader and checked by its schema, with replay's
 * flags as the flags layer (flags win, field by field). The environment is not read: a replay
 * takes what the file says, not what the operator's shell has. The file's headers go with
 * `--forward URL` only to the origin of the file's own `forward.url` (`withheldHeaders`).
 */
export function workerSettings(path: string, flags: ReplayFlagsLayer): WorkerSettings {
  const { forward, handlers: _handlers, ...file } = configFromFile(path);
  const forwards = flags.to === undefined && (forward !== undefined || flags.forward !== undefined);
  const config = resolveSidecarConfig({
    file: { source: NOT_READ, ...file, ...(forwards ? { forward } : { handlers: NOT_READ }) },
    flags: forwards
      ? { forward: flags.forward, dedupe: flags.dedupe, secretsFile: flags.secretsFile }
      : { dedupe: flags.dedupe, secretsFile: flags.secretsFile },
  });
  const withheld = config.forward && withheldHeaders(forward, config.forward, flags);
  return {
    forward: config.forward && withheld ? { ...config.forward, headers: {} } : config.forward,
    withheldHeaders: withheld,
    dedupe: config.dedupe,
    secretsFile: config.secretsFile,
    tenant: 'tenant' in file ? config.tenant : undefined,
    retentionMs: 'retentionMs' in file ? config.retentionMs : undefined,
    maxEnvelopeBytes: 'maxEnvelopeBytes' in file ? config.maxEnvelopeBytes : undefined,
  };
}

/**
 * The largest envelope a replay accepts, resolved as `run` resolves the worker's: the flag
 * (`--max-envelope-bytes`), then the environment, then the `--config` file, then the default.
 * With a smaller limit than the worker's, an event the worker accepted would be rejected as
 * ENVELOPE_TOO_LARGE ("retrying will not help"), and could never be re-driven.
 */
export function replayEnvelopeLimit(
  flag: string | undefined,
  env: NodeJS.ProcessEnv,
  fromFile: number | undefined,
): number {
  const fromEnv = env[ENV_MAX_ENVELOPE_BYTES] || undefined; // empty counts as unset, as for run
  const envBytes = fromEnv === undefined ? undefined : Number(fromEnv);
  // A bad variable is the worker's configuration, reported as run reports it (exit 2, CONFIG_INVALID).
  if (envBytes !== undefined && !(Number.isSafeInteger(envBytes) && envBytes > 0))
    throw new ConfigError(`${ENV_MAX_ENVELOPE_BYTES} must be a positive integer, got "${fromEnv}"`);
  return parsePositiveInt('--max-envelope-bytes', flag, envBytes ?? fromFile ?? DEFAULT_MAX_ENVELOPE_BYTES);
}

/**
 * The file's headers when they must not go to `--forward URL`, as a browser or curl drops
 * credentials on a redirect to another origin: the file names its app (`forward.url`) and the flag
 * names another scheme, host or port, with no `--send-config-headers`. A file without
 * `forward.url` leaves the URL to a flag (as `run --forward` gets it), so the flag's URL is the
 * app its headers are for.
 */
function withheldHeaders(
  fileForward: unknown,
  forward: { readonly url: string; readonly headers: Readonly<Record<string, string>> },
  flags: ReplayFlagsLayer,
): WithheldHeaders | undefined {
  const names = Object.keys(forward.headers);
  const fileUrl = urlOf(fileForward);
  if (flags.forward === undefined || fileUrl === undefined || names.length === 0 || flags.sendConfigHeaders)
    return undefined;
  const fileOrigin = originOf(fileUrl);
  const forwardOrigin = originOf(forward.url) ?? forward.url;
  if (fileOrigin === forwardOrigin) return undefined;
  return { names, fileOrigin: fileOrigin ?? '(its forward.url is not a URL)', forwardOrigin };
}

/** `forward: URL` or `forward: { url: URL }` of the file, as written. */
function urlOf(fileForward: unknown): string | undefined {
  if (typeof fileForward === 'string') return fileForward;
  const url =
    typeof fileForward === 'object' && fileForward !== null
      ? (fileForward as { url?: unknown }).url
      : undefined;
  return typeof url === 'string' ? url : undefined;
}

/** The WHATWG origin (scheme, host, port; a default port is dropped); undefined for none. */
function originOf(url: string): string | undefined {
  try {
    const { origin } = new URL(url);
    return origin === 'null' ? undefined : origin;
  } catch {
    return undefined;
  }
}

/** What replay says on stderr when it withholds the file's headers: their names and why, never a value. */
export function withheldHeadersNote(withheld: WithheldHeaders): string {
  return terminalSafe(
    `NOT SENT: the --config file's forward.headers ${withheld.names.join(', ')}: ` +
      `the file's headers are for ${withheld.fileOrigin}, not ${withheld.forwardOrigin}; ` +
      `give --send-config-headers to send them to ${withheld.forwardOrigin} anyway`,
  );
}
