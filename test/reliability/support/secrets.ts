/**
 * Signing secrets for the reliability suites, and a scanner that looks for them in everything a
 * suite produced: log lines, error messages, dead-letter records, metrics.
 *
 * Each secret is fresh per run (`rel-<label>-<32 random hex digits>`), so a hit can only
 * be a leak. Besides the secret as written, the scanner looks for its hex, base64 and base64url
 * encodings, its JSON-escaped and URL-encoded forms, and for any 12-character slice of the random
 * part (a truncated or partially masked secret is still a leak).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';

export function suiteSecret(label: string): string {
  return `rel-${label}-${randomBytes(16).toString('hex')}`;
}

export interface SecretHit {
  readonly where: string;
  readonly form: string;
  readonly excerpt: string;
}

export class SecretScan {
  readonly #needles: { form: string; text: string }[] = [];
  readonly hits: SecretHit[] = [];
  bytesScanned = 0;
  sources = 0;

  constructor(secrets: readonly string[]) {
    for (const secret of secrets) {
      const bytes = Buffer.from(secret, 'utf8');
      const core = secret.slice(secret.lastIndexOf('-') + 1);
      this.#add('as written', secret);
      this.#add('hex', bytes.toString('hex'));
      this.#add('base64', bytes.toString('base64').replace(/=+$/, ''));
      this.#add('base64url', bytes.toString('base64url'));
      this.#add('JSON-escaped', JSON.stringify(secret).slice(1, -1));
      this.#add('URL-encoded', encodeURIComponent(secret));
      for (let i = 0; i + 12 <= core.length; i += 4) this.#add('12-character slice', core.slice(i, i + 12));
    }
  }

  #add(form: string, text: string): void {
    if (!this.#needles.some((n) => n.text === text)) this.#needles.push({ form, text });
  }

  /** Scans one output; returns the number of hits in it. */
  scan(where: string, content: string | Uint8Array): number {
    const text = typeof content === 'string' ? content : Buffer.from(content).toString('utf8');
    this.bytesScanned += Buffer.byteLength(text, 'utf8');
    this.sources++;
    let found = 0;
    for (const needle of this.#needles) {
      let at = text.indexOf(needle.text);
      while (at !== -1) {
        found++;
        this.hits.push({
          where,
          form: needle.form,
          excerpt: text.slice(Math.max(0, at - 60), at + needle.text.length + 60),
        });
        at = text.indexOf(needle.text, at + 1);
      }
    }
    return found;
  }

  /** Scans a file when it exists (a missing dead-letter file means no dead letters). */
  scanFile(where: string, path: string): number {
    let content: Buffer;
    try {
      content = readFileSync(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
      throw error;
    }
    return this.scan(where, content);
  }

  get figures(): { secret_hits: number; outputs_scanned: number; bytes_scanned: number } {
    return { secret_hits: this.hits.length, outputs_scanned: this.sources, bytes_scanned: this.bytesScanned };
  }
}
