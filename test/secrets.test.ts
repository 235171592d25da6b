/**
 * Signing secrets: the Keyring's refusals, reading from env and files, and reloading without a
 * restart (file change, SIGHUP).
 */
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createTestEnvelope } from '../src/consumer/testing.js';
import { ConfigError } from '../src/core/errors.js';
import {
  ENV_SECRET,
  ENV_SECRET_PREVIOUS,
  ENV_SECRET_PREVIOUS_NOT_AFTER,
  ENV_SECRETS_FILE,
  Keyring,
  readSecretsFile,
  type SigningSecret,
  secretsFromEnv,
  watchSecrets,
} from '../src/core/secrets.js';
import { verifyMessage } from '../src/core/verify.js';
import { thrownBy } from './support/thrown.js';

const NOW_MS = 1_780_000_000_000;
const SECRET = 'whsec-9f2c7b1e4d8a6035-not-a-real-one';

/** Runs `fn`, expects a ConfigError with code SECRET_INVALID, returns it. */
function secretInvalid(fn: () => unknown): ConfigError {
  const thrown = thrownBy(fn);
  expect(thrown).toBeInstanceOf(ConfigError);
  const error = thrown as ConfigError;
  expect(error.code).toBe('SECRET_INVALID');
  return error;
}

/** Everything about an error a log line might show. */
function shown(error: Error): string {
  return [
    error.message,
    error.stack,
    String(error),
    JSON.stringify(error),
    JSON.stringify(error.cause ?? null),
  ].join('\n');
}

/** The id of the key that verifies a message signed with `secret`, or the error code. */
function verifiedBy(keyring: Keyring, secret: string, now = NOW_MS): string {
  const msg = createTestEnvelope('daily.data.steps.created', { secret, signedAt: Math.floor(now / 1000) });
  try {
    return verifyMessage(msg.raw, { keyring, now }).keyId;
  } catch (error) {
    return (error as { code: string }).code;
  }
}

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'phe-secrets-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** Replaces a file atomically (write + rename), as secret managers and kubelet do. */
function replaceFile(path: string, text: string): void {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}

describe('Keyring refuses unusable secrets', () => {
  it.each<[string, string]>([
    ['empty', ''],
    ['a leading space', ` ${SECRET}`],
    ['a trailing newline', `${SECRET}\n`],
    ['a trailing CRLF', `${SECRET}\r\n`],
    ['a trailing space', `${SECRET} `],
    ['a leading tab', `\t${SECRET}`],
    ['only whitespace', '   '],
  ])('%s → SECRET_INVALID, and the message does not contain the secret', (_name, secret) => {
    const error = secretInvalid(() => new Keyring([{ id: 'current', secret }]));
    expect(error.message).toContain('"current"');
    if (secret.trim() !== '') expect(shown(error)).not.toContain(SECRET);
  });

  it('an empty Uint8Array secret', () => {
    secretInvalid(() => new Keyring([{ id: 'bytes', secret: new Uint8Array(0) }]));
  });

  it('no secrets at all', () => {
    const error = secretInvalid(() => new Keyring([]));
    expect(error.message).toContain(ENV_SECRET);
  });

  it('duplicate ids', () => {
    const error = secretInvalid(
      () =>
        new Keyring([
          { id: 'k', secret: SECRET },
          { id: 'k', secret: `${SECRET}-2` },
        ]),
    );
    expect(error.message).toContain('"k"');
    expect(shown(error)).not.toContain(SECRET);
  });

  it('empty or blank ids', () => {
    secretInvalid(() => new Keyring([{ id: '', secret: SECRET }]));
    secretInvalid(() => new Keyring([{ id: '  ', secret: SECRET }]));
  });

  it('an invalid notAfter', () => {
    secretInvalid(() => new Keyring([{ id: 'k', secret: SECRET, notAfter: new Date('not a date') }]));
    secretInvalid(() => new Keyring([{ id: 'k', secret: SECRET, notAfter: Number.NaN }]));
  });

  it('a bad replace leaves the ring as it was', () => {
    const ring = new Keyring([{ id: 'current', secret: SECRET }]);
    secretInvalid(() => ring.replace([{ id: 'current', secret: `${SECRET}\n` }]));
    secretInvalid(() => ring.replace([]));
    expect(ring.ids).toEqual(['current']);
    expect(verifiedBy(ring, SECRET)).toBe('current');
  });

  it('inner whitespace is fine; ids and order are kept', () => {
    const ring = new Keyring([
      { id: 'new', secret: 'two words' },
      { id: 'old', secret: SECRET, notAfter: NOW_MS + 1000 },
    ]);
    expect(ring.ids).toEqual(['new', 'old']);
    expect(ring.active(NOW_MS).map((k) => k.id)).toEqual(['new', 'old']);
    expect(ring.active(NOW_MS + 1000).map((k) => k.id)).toEqual(['new']);
    // The active list never exposes the secret material as a string.
    expect(JSON.stringify(ring.active(NOW_MS))).not.toContain(SECRET);
  });
});

describe('secretsFromEnv', () => {
  it('current only', () => {
    expect(secretsFromEnv({ [ENV_SECRET]: SECRET })).toEqual([{ id: 'current', secret: SECRET }]);
  });

  it('current + previous + PREVIOUS_NOT_AFTER', () => {
    const env = {
      [ENV_SECRET]: 'new-secret',
      [ENV_SECRET_PREVIOUS]: SECRET,
      [ENV_SECRET_PREVIOUS_NOT_AFTER]: '2026-05-28T20:26:50Z',
    };
    const secrets = secretsFromEnv(env);
    expect(secrets).toEqual([
      { id: 'current', secret: 'new-secret' },
      { id: 'previous', secret: SECRET, notAfter: new Date('2026-05-28T20:26:50Z') },
    ]);
    const ring = new Keyring(secrets);
    const end = Date.parse('2026-05-28T20:26:50Z');
    expect(verifiedBy(ring, SECRET, end - 1000)).toBe('previous');
    expect(verifiedBy(ring, 'new-secret', end - 1000)).toBe('current');
    expect(verifiedBy(ring, SECRET, end)).toBe('SIGNATURE_MISMATCH');
    expect(verifiedBy(ring, 'new-secret', end + 1000)).toBe('current');
  });

  it('previous without an end date stays active', () => {
    const secrets = secretsFromEnv({ [ENV_SECRET]: 'new-secret', [ENV_SECRET_PREVIOUS]: SECRET });
    expect(secrets).toEqual([
      { id: 'current', secret: 'new-secret' },
      { id: 'previous', secret: SECRET },
    ]);
  });

  it('an empty previous is ignored (unset during no rotation)', () => {
    expect(secretsFromEnv({ [ENV_SECRET]: SECRET, [ENV_SECRET_PREVIOUS]: '' })).toEqual([
      { id: 'current', secret: SECRET },
    ]);
  });

  it('an unparseable PREVIOUS_NOT_AFTER is SECRET_INVALID', () => {
    const error = secretInvalid(() =>
      secretsFromEnv({
        [ENV_SECRET]: 'new-secret',
        [ENV_SECRET_PREVIOUS]: SECRET,
        [ENV_SECRET_PREVIOUS_NOT_AFTER]: 'next tuesday',
      }),
    );
    expect(shown(error)).not.toContain(SECRET);
  });

  it('nothing set → no secrets → the Keyring refuses with SECRET_INVALID', () => {
    expect(secretsFromEnv({})).toEqual([]);
    secretInvalid(() => new Keyring(secretsFromEnv({})));
  });

  it('a secret with a trailing newline (from `echo`) is refused without echoing it', () => {
    const error = secretInvalid(() => new Keyring(secretsFromEnv({ [ENV_SECRET]: `${SECRET}\n` })));
    expect(shown(error)).not.toContain(SECRET);
    secretInvalid(() => new Keyring(secretsFromEnv({ [ENV_SECRET]: '' })));
  });

  it('defaults to process.env', () => {
    const saved = process.env[ENV_SECRET];
    const savedFile = process.env[ENV_SECRETS_FILE];
    try {
      process.env[ENV_SECRET] = SECRET;
      delete process.env[ENV_SECRETS_FILE];
      expect(secretsFromEnv()).toContainEqual({ id: 'current', secret: SECRET });
    } finally {
      if (saved === undefined) delete process.env[ENV_SECRET];
      else process.env[ENV_SECRET] = saved;
      if (savedFile !== undefined) process.env[ENV_SECRETS_FILE] = savedFile;
    }
  });
});

describe('secrets files (PARTNER_EVENTS_SECRETS_FILE)', () => {
  it('JSON format: keys in order, not_after parsed; the file wins over the env secret', () => {
    const path = join(dir, 'secrets.json');
    writeFileSync(
      path,
      JSON.stringify({
        keys: [
          { id: '2026-11', secret: 'november-secret' },
          { id: '2026-08', secret: SECRET, not_after: '2026-05-28T20:30:00Z' },
        ],
      }),
    );
    const secrets = secretsFromEnv({ [ENV_SECRETS_FILE]: path, [ENV_SECRET]: 'ignored-env-secret' });
    expect(secrets).toEqual([
      { id: '2026-11', secret: 'november-secret' },
      { id: '2026-08', secret: SECRET, notAfter: new Date('2026-05-28T20:30:00Z') },
    ]);
    const ring = new Keyring(secrets);
    expect(verifiedBy(ring, 'november-secret')).toBe('2026-11');
    expect(verifiedBy(ring, SECRET)).toBe('2026-08');
    expect(verifiedBy(ring, 'ignored-env-secret')).toBe('SIGNATURE_MISMATCH');
    expect(verifiedBy(ring, SECRET, Date.parse('2026-05-28T20:30:00Z'))).toBe('SIGNATURE_MISMATCH');
  });

  it('JSON format with leading whitespace and pretty-printing', () => {
    const path = join(dir, 'secrets.json');
    writeFileSync(path, `\n  ${JSON.stringify({ keys: [{ id: 'a', secret: SECRET }] }, null, 2)}\n`);
    expect(readSecretsFile(path)).toEqual([{ id: 'a', secret: SECRET }]);
  });

  it('raw single-secret file: one trailing newline stripped, id from the file name', () => {
    const path = join(dir, 'signing-secret');
    writeFileSync(path, `${SECRET}\n`);
    const secrets = secretsFromEnv({ [ENV_SECRETS_FILE]: path });
    expect(secrets).toEqual([{ id: 'file:signing-secret', secret: SECRET }]);
    expect(verifiedBy(new Keyring(secrets), SECRET)).toBe('file:signing-secret');

    writeFileSync(path, `${SECRET}\r\n`);
    expect(readSecretsFile(path)).toEqual([{ id: 'file:signing-secret', secret: SECRET }]);
    writeFileSync(path, SECRET);
    expect(readSecretsFile(path)).toEqual([{ id: 'file:signing-secret', secret: SECRET }]);
  });

  it('raw file with two trailing newlines: only one is stripped, so the Keyring refuses it', () => {
    const path = join(dir, 'signing-secret');
    writeFileSync(path, `${SECRET}\n\n`);
    expect(readSecretsFile(path)).toEqual([{ id: 'file:signing-secret', secret: `${SECRET}\n` }]);
    const error = secretInvalid(() => new Keyring(readSecretsFile(path)));
    expect(shown(error)).not.toContain(SECRET);
  });

  it('an empty raw file is refused', () => {
    const path = join(dir, 'empty');
    writeFileSync(path, '');
    secretInvalid(() => new Keyring(readSecretsFile(path)));
  });

  it('a missing file is SECRET_INVALID', () => {
    secretInvalid(() => readSecretsFile(join(dir, 'nope.json')));
    secretInvalid(() => secretsFromEnv({ [ENV_SECRETS_FILE]: join(dir, 'nope') }));
  });

  it.each<[string, string]>([
    ['broken JSON', `{"keys": [{"id": "a", "secret": "${SECRET}"`],
    ['no keys array', `{"secret": "${SECRET}"}`],
    ['keys not an array', `{"keys": {"id": "a", "secret": "${SECRET}"}}`],
    ['a key without secret', '{"keys": [{"id": "a"}]}'],
    ['a key with a numeric secret', '{"keys": [{"id": "a", "secret": 12345678}]}'],
    ['a key without id', `{"keys": [{"secret": "${SECRET}"}]}`],
    ['a key that is not an object', '{"keys": ["a"]}'],
    ['a bad not_after', `{"keys": [{"id": "a", "secret": "${SECRET}", "not_after": "soon"}]}`],
    ['a numeric not_after', `{"keys": [{"id": "a", "secret": "${SECRET}", "not_after": 1780000000}]}`],
  ])('JSON file with %s → SECRET_INVALID, secret not shown', (_name, text) => {
    const path = join(dir, 'secrets.json');
    writeFileSync(path, text);
    const error = secretInvalid(() => readSecretsFile(path));
    expect(shown(error)).not.toContain(SECRET);
  });

  it('a JSON file whose secrets are unusable is refused by the Keyring without showing them', () => {
    const path = join(dir, 'secrets.json');
    writeFileSync(path, JSON.stringify({ keys: [{ id: 'a', secret: `${SECRET}\n` }] }));
    const error = secretInvalid(() => new Keyring(readSecretsFile(path)));
    expect(shown(error)).not.toContain(SECRET);
    writeFileSync(path, JSON.stringify({ keys: [] }));
    secretInvalid(() => new Keyring(readSecretsFile(path)));
  });
});

/** A promise for the next call of a callback, plus the callback to hand out. */
function nextCall<T extends unknown[]>() {
  const waiters: Array<(args: T) => void> = [];
  const calls: T[] = [];
  return {
    calls,
    fn: (...args: T) => {
      calls.push(args);
      for (const w of waiters.splice(0)) w(args);
    },
    next: () => new Promise<T>((resolve) => waiters.push(resolve)),
  };
}

/**
 * Replaces `path` with `text` until `settled` resolves. The first poll of `fs.watchFile` takes
 * the baseline asynchronously, so a write that lands before it would go unseen; writing the same
 * content again is harmless and makes the wait depend only on the callback.
 */
async function replaceUntil<T>(path: string, text: string, settled: Promise<T>): Promise<T> {
  let done = false;
  const result = settled.then((value) => {
    done = true;
    return value;
  });
  replaceFile(path, text);
  while (!done) {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([result, new Promise((r) => (timer = setTimeout(r, 250)))]);
    clearTimeout(timer);
    if (!done) replaceFile(path, text);
  }
  return result;
}

/**
 * Writes `text` to the file `name` in the test's directory, then watches it (polled every 50 ms,
 * no SIGHUP): its path, the Keyring read from it, and the reload and error callbacks.
 */
function watchedFile(name: string, text: string) {
  const path = join(dir, name);
  writeFileSync(path, text);
  const ring = new Keyring(readSecretsFile(path));
  const reloads = nextCall<[readonly string[]]>();
  const errors = nextCall<[unknown]>();
  const stop = watchSecrets(ring, () => readSecretsFile(path), {
    files: [path],
    sighup: false,
    pollIntervalMs: 50,
    onReload: reloads.fn,
    onError: errors.fn,
  });
  return { path, ring, reloads, errors, stop };
}

describe('watchSecrets', () => {
  const json = (keys: Array<{ id: string; secret: string }>) => JSON.stringify({ keys });

  it('reloads when the secrets file changes, and a broken file keeps the old keys', async () => {
    const { path, ring, reloads, errors, stop } = watchedFile(
      'secrets.json',
      json([{ id: 'v1', secret: 'secret-one' }]),
    );
    try {
      expect(verifiedBy(ring, 'secret-one')).toBe('v1');

      // A rotation: new current key, old one kept as previous.
      const [ids] = await replaceUntil(
        path,
        json([
          { id: 'v2', secret: 'secret-two' },
          { id: 'v1', secret: 'secret-one' },
        ]),
        reloads.next(),
      );
      expect(ids).toEqual(['v2', 'v1']);
      expect(ring.ids).toEqual(['v2', 'v1']);
      expect(verifiedBy(ring, 'secret-two')).toBe('v2');
      expect(verifiedBy(ring, 'secret-one')).toBe('v1');

      // A half-written file: the error is reported and the keys stay.
      const reloadsBefore = reloads.calls.length;
      const [error] = await replaceUntil(path, '{"keys": [{"id": "v3", "secret": "secr', errors.next());
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).code).toBe('SECRET_INVALID');
      expect(reloads.calls.length).toBe(reloadsBefore);
      expect(ring.ids).toEqual(['v2', 'v1']);
      expect(verifiedBy(ring, 'secret-two')).toBe('v2');

      // A file whose secret is unusable (trailing newline) is an error too, not a reload.
      const [error2] = await replaceUntil(
        path,
        json([{ id: 'v3', secret: 'secret-three\n' }]),
        errors.next(),
      );
      expect((error2 as ConfigError).code).toBe('SECRET_INVALID');
      expect(ring.ids).toEqual(['v2', 'v1']);

      // The end of the grace window: the old key removed.
      const [ids3] = await replaceUntil(path, json([{ id: 'v2', secret: 'secret-two' }]), reloads.next());
      expect(ids3).toEqual(['v2']);
      expect(verifiedBy(ring, 'secret-one')).toBe('SIGNATURE_MISMATCH');
      expect(verifiedBy(ring, 'secret-two')).toBe('v2');
    } finally {
      stop();
    }
  });

  it('reloads a raw single-secret file', async () => {
    const { path, ring, reloads, stop } = watchedFile('signing-secret', 'first-secret\n');
    try {
      expect(verifiedBy(ring, 'first-secret')).toBe('file:signing-secret');
      await replaceUntil(path, 'second-secret\n', reloads.next());
      expect(verifiedBy(ring, 'second-secret')).toBe('file:signing-secret');
      expect(verifiedBy(ring, 'first-secret')).toBe('SIGNATURE_MISMATCH');
    } finally {
      stop();
    }
  });

  it('a deleted secrets file keeps the old keys and reports the error', async () => {
    const { path, ring, reloads, errors, stop } = watchedFile(
      'secrets.json',
      json([{ id: 'v1', secret: 'secret-one' }]),
    );
    try {
      // Make sure the watcher has its baseline, then delete the file.
      await replaceUntil(path, json([{ id: 'v1b', secret: 'secret-one' }]), reloads.next());
      const failed = errors.next();
      rmSync(path);
      const [error] = await failed;
      expect((error as ConfigError).code).toBe('SECRET_INVALID');
      expect(ring.ids).toEqual(['v1b']);
      expect(verifiedBy(ring, 'secret-one')).toBe('v1b');
    } finally {
      stop();
    }
  });

  describe('SIGHUP', () => {
    it('reloads on SIGHUP; a failing load keeps the keys; stop() removes the handler', () => {
      const listenersBefore = process.listenerCount('SIGHUP');
      let secrets: SigningSecret[] = [{ id: 'a', secret: 'secret-a' }];
      let fail = false;
      const ring = new Keyring(secrets);
      const reloads: Array<readonly string[]> = [];
      const errors: unknown[] = [];
      const stop = watchSecrets(
        ring,
        () => {
          if (fail) throw new ConfigError('vault unreachable', { code: 'SECRET_INVALID' });
          return secrets;
        },
        { onReload: (ids) => reloads.push(ids), onError: (e) => errors.push(e) },
      );
      try {
        expect(process.listenerCount('SIGHUP')).toBe(listenersBefore + 1);

        secrets = [{ id: 'b', secret: 'secret-b' }];
        process.emit('SIGHUP', 'SIGHUP');
        expect(reloads).toEqual([['b']]);
        expect(verifiedBy(ring, 'secret-b')).toBe('b');
        expect(verifiedBy(ring, 'secret-a')).toBe('SIGNATURE_MISMATCH');

        fail = true;
        process.emit('SIGHUP', 'SIGHUP');
        expect(errors).toHaveLength(1);
        expect(reloads).toHaveLength(1);
        expect(verifiedBy(ring, 'secret-b')).toBe('b');

        fail = false;
        secrets = [{ id: 'c', secret: ' bad secret' }];
        process.emit('SIGHUP', 'SIGHUP');
        expect(errors).toHaveLength(2);
        expect((errors[1] as ConfigError).code).toBe('SECRET_INVALID');
        expect(ring.ids).toEqual(['b']);
      } finally {
        stop();
      }
      expect(process.listenerCount('SIGHUP')).toBe(listenersBefore);
      secrets = [{ id: 'd', secret: 'secret-d' }];
      process.emit('SIGHUP', 'SIGHUP');
      expect(ring.ids).toEqual(['b']);
    });

    it('sighup: false installs no handler', () => {
      const before = process.listenerCount('SIGHUP');
      const stop = watchSecrets(new Keyring([{ id: 'a', secret: 'secret-a' }]), () => [], { sighup: false });
      expect(process.listenerCount('SIGHUP')).toBe(before);
      stop();
    });

    it('reloads the secrets file from env on SIGHUP', () => {
      const path = join(dir, 'secrets.json');
      writeFileSync(path, json([{ id: 'one', secret: 'secret-one' }]));
      const env = { [ENV_SECRETS_FILE]: path };
      const ring = new Keyring(secretsFromEnv(env));
      const reloads: Array<readonly string[]> = [];
      const stop = watchSecrets(ring, () => secretsFromEnv(env), { onReload: (ids) => reloads.push(ids) });
      try {
        writeFileSync(path, json([{ id: 'two', secret: 'secret-two' }]));
        process.emit('SIGHUP', 'SIGHUP');
        expect(reloads).toEqual([['two']]);
        expect(verifiedBy(ring, 'secret-two')).toBe('two');
      } finally {
        stop();
      }
    });
  });
});
