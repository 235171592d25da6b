import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** Whether `openssl` is on PATH. CI installs it (.ci/run). */
export const HAS_OPENSSL = spawnSync('openssl', ['version'], { stdio: 'ignore' }).status === 0;

if (!HAS_OPENSSL && process.env.CI) {
  throw new Error('openssl is missing in CI: .ci/run must install it (apt-get install openssl)');
}

export interface SelfSignedCert {
  readonly key: string;
  readonly cert: string;
  /** The certificate's file: give it to a child as `NODE_EXTRA_CA_CERTS` so it trusts the server. */
  readonly certPath: string;
}

/** A fresh self-signed EC certificate for `localhost` (a day long), written to `dir`. */
export function selfSignedLocalhostCert(dir: string): SelfSignedCert {
  const keyPath = join(dir, 'localhost-key.pem');
  const certPath = join(dir, 'localhost-cert.pem');
  const made = spawnSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=DNS:localhost',
      '-keyout',
      keyPath,
      '-out',
      certPath,
    ],
    { encoding: 'utf8' },
  );
  if (made.status !== 0) throw new Error(`openssl could not make a certificate: ${made.stderr}`);
  return { key: readFileSync(keyPath, 'utf8'), cert: readFileSync(certPath, 'utf8'), certPath };
}
