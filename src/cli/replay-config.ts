import { configFromFile, envName, resolveSidecarConfig } from '../sidecar/config.js';

/** The store `run` reads from the environment (its config key `dedupe`), and `replay` too. */
export const ENV_DEDUPE = envName(['dedupe']);

/**
 * What `replay --config FILE` takes from the worker's own config file: where and how it forwards
 * (URL, timeout, extra headers such as an internal token, which a replay must send too but which
 * must never be on a command line) and its dedupe store, secrets and dedupe keys.
 */
export interface WorkerSettings {
  readonly forward:
    | { readonly url: string; readonly timeoutMs: number; readonly headers: Readonly<Record<string, string>> }
    | undefined;
  readonly dedupe: string;
  readonly secretsFile: string | undefined;
  /** Only when the file sets them: else the store's defaults (and PARTNER_EVENTS_TENANT) hold. */
  readonly tenant: string | undefined;
  readonly retentionMs: number | undefined;
}

/** The replay flags that win over the file. */
export interface ReplayFlagsLayer {
  readonly forward: string | undefined;
  /** `--to`: events are injected, so nothing of the file's `forward` is used. */
  readonly to: string | undefined;
  readonly dedupe: string | undefined;
  readonly secretsFile: string | undefined;
}

// The file is a worker's: its source, and its destination when a replay sends elsewhere, may be
// missing (given to `run` as flags) or beside the point; these stand in for them in the check.
const NOT_READ = '(not read by replay)';

/**
 * The worker's config file, read by `run`'s own loader and checked by its schema, with replay's
 * flags as the flags layer (flags win, field by field: `--forward URL` keeps the file's headers).
 * The environment is not read: a replay takes what the file says, not what the operator's shell has.
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
  return {
    forward: config.forward,
    dedupe: config.dedupe,
    secretsFile: config.secretsFile,
    tenant: 'tenant' in file ? config.tenant : undefined,
    retentionMs: 'retentionMs' in file ? config.retentionMs : undefined,
  };
}
