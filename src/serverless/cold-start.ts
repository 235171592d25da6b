import { tmpdir } from 'node:os';
import { relative, resolve, sep } from 'node:path';
import type { Consumer } from '../consumer/consumer.js';
import { errorMessage } from '../core/errors.js';
import { type SigningSecret, secretsFromEnv } from '../core/secrets.js';
import type { RawMessage } from '../core/source-adapter.js';
import type { DedupeStore } from '../dedupe/types.js';
import { EphemeralDedupeError } from './errors.js';

/** Loads the signing secrets (e.g. from Secrets Manager or Key Vault with your own client). */
export type SecretsLoader = () => readonly SigningSecret[] | Promise<readonly SigningSecret[]>;

/**
 * The consumer a function runs: built once per instance, either by you at module load (secrets
 * from the environment, as `createConsumer` reads them) or by a factory that gets the secrets the
 * wrapper's `secrets` loader returned.
 */
export type ConsumerSource<M extends RawMessage> =
  | Consumer<M>
  | ((secrets: readonly SigningSecret[]) => Consumer<M> | Promise<Consumer<M>>);

/** The options both serverless wrappers share. */
export interface ColdStartOptions {
  /**
   * Where the signing secrets come from when the consumer is a factory: called on the first
   * invocation of an instance (its cold start), then again once `secretsRefreshMs` have passed,
   * so a rotated secret is picked up without a redeploy. A failed refresh keeps the previous keys.
   * Default: the environment (`PARTNER_EVENTS_SIGNING_SECRET`, …), read once.
   */
  secrets?: SecretsLoader;
  /** How old loaded secrets may get before the next invocation reloads them. Default 300000 (5 min). */
  secretsRefreshMs?: number;
  /**
   * Accept a dedupe store that does not outlive the instance (memory, a SQLite file under the
   * temporary folder): for tests only. Default false: such a store is refused with an
   * `EphemeralDedupeError`.
   */
  allowEphemeralDedupe?: boolean;
}

const DEFAULT_SECRETS_REFRESH_MS = 5 * 60_000;

/**
 * What a function instance sets up once: the consumer (with its secrets) and the check that its
 * dedupe store outlives the instance. `ready()` is awaited at the start of every invocation: the
 * first one builds, later ones only refresh the secrets when due.
 */
export class ColdStart<M extends RawMessage> {
  readonly #source: ConsumerSource<M>;
  readonly #options: ColdStartOptions;
  #consumer: Promise<Consumer<M>> | undefined;
  #secretsLoadedAt = 0;

  constructor(source: ConsumerSource<M>, options: ColdStartOptions) {
    this.#source = source;
    this.#options = options;
    // A consumer built at module load is checked there, so a wrong store fails the deployment's
    // first start rather than its first event.
    if (typeof source !== 'function') checkDedupeOutlivesInstance(source.dedupeStore, options);
  }

  async ready(): Promise<Consumer<M>> {
    if (!this.#consumer) {
      const building = this.#build();
      this.#consumer = building;
      // A failed cold start is retried by the next invocation, not remembered.
      building.catch(() => {
        if (this.#consumer === building) this.#consumer = undefined;
      });
      return building;
    }
    const consumer = await this.#consumer;
    await this.#refreshSecrets(consumer);
    return consumer;
  }

  async #build(): Promise<Consumer<M>> {
    const source = this.#source;
    if (typeof source !== 'function') return source;
    const secrets = await this.#load();
    const consumer = await source(secrets);
    checkDedupeOutlivesInstance(consumer.dedupeStore, this.#options);
    return consumer;
  }

  async #load(): Promise<readonly SigningSecret[]> {
    const secrets = await (this.#options.secrets ?? (() => secretsFromEnv()))();
    this.#secretsLoadedAt = Date.now();
    return secrets;
  }

  async #refreshSecrets(consumer: Consumer<M>): Promise<void> {
    if (typeof this.#source !== 'function' || !this.#options.secrets) return;
    const refreshMs = this.#options.secretsRefreshMs ?? DEFAULT_SECRETS_REFRESH_MS;
    if (Date.now() - this.#secretsLoadedAt < refreshMs) return;
    try {
      consumer.keyring.replace(await this.#load());
      consumer.logger.info({ key_ids: consumer.keyring.ids }, 'signing secrets reloaded');
    } catch (error) {
      // The old keys keep verifying; the next invocation tries again.
      consumer.logger.error(
        { err: errorMessage(error) },
        'signing secrets reload failed: keeping the previous keys',
      );
    }
  }
}

/** Throws `EphemeralDedupeError` for a store whose state ends with the instance. */
export function checkDedupeOutlivesInstance(store: DedupeStore, options: ColdStartOptions): void {
  if (options.allowEphemeralDedupe) return;
  const persistence = store.persistence;
  if (persistence?.kind === 'process') {
    throw new EphemeralDedupeError(
      'the consumer’s dedupe store lives in memory, which ends with the function instance: a redelivery to another instance would run the handlers again. Use Redis (partner-health-events/redis) or a SQLite file on a mounted file share (EFS, Azure Files)',
      persistence,
    );
  }
  if (persistence?.kind === 'file' && (persistence.path === ':memory:' || persistence.path === '')) {
    throw new EphemeralDedupeError(
      'the consumer’s dedupe store is an in-memory SQLite database, which ends with the function instance. Use Redis or a SQLite file on a mounted file share (EFS, Azure Files)',
      persistence,
    );
  }
  if (persistence?.kind === 'file' && isUnder(persistence.path, [tmpdir(), '/tmp'])) {
    throw new EphemeralDedupeError(
      `the consumer’s dedupe store is a SQLite file in the instance’s temporary folder (${persistence.path}), which is lost with the instance: a redelivery to another instance would run the handlers again. Put the file on a mounted file share (EFS, Azure Files) or use Redis (allowEphemeralDedupe: true is for tests)`,
      persistence,
    );
  }
}

function isUnder(path: string, folders: readonly string[]): boolean {
  const full = resolve(path);
  return folders.some((folder) => {
    const rel = relative(resolve(folder), full);
    return rel !== '' && !rel.startsWith(`..${sep}`) && rel !== '..' && !rel.startsWith(sep);
  });
}
