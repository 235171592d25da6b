/**
 * What may be printed of a source, a target, a forward URL or an error text that quotes one:
 * every printer (CLI text and `--json`, logs, errors, /readyz) goes through `redact`, so a SAS
 * token, a password or a connection string's key never reaches a terminal or a log.
 *
 * The rules, applied wherever they match in the text:
 * - a URL keeps its scheme, host, port and path; its userinfo (`user:password@`), its whole query
 *   and its fragment are removed. The whole query, not a list of credential parameters: SAS
 *   (`sig`, `se`, `sp`, `sv`, `skoid`…), S3 (`X-Amz-*`) and Functions (`code`) credentials all
 *   live there, and a list would miss the next one.
 * - a credential `KEY=value` pair (connection strings, loose SAS tokens) keeps its key and loses
 *   its value: `SharedAccessKey=[redacted]`.
 */

export const REDACTED = '[redacted]';

// `http:`, `https:`, `ws:`, `wss:` and `ftp:` take an authority even without `//` (WHATWG URL
// parsing: `http:user:pw@host` is a URL with a password), with either slash; other schemes
// (`redis:`, `sb:`, `amqps:`) need `//`. The authority runs to the first `/`, `\`, `?` or `#`.
const URL_IN_TEXT =
  /\b(?:(https?|wss?|ftp):[\\/]*|([a-z][a-z0-9+.-]*):\/\/)([^\s"'<>`/\\?#]+)([^\s"'<>`?#]*)([?#][^\s"'<>`]*)?/gi;

// Keys whose value is a credential, in connection strings (`;Key=value`), queries and SAS tokens.
const CREDENTIAL_PAIR =
  /(^|[\s;&?"'])(SharedAccessKey|AccountKey|SharedAccessSignature|sig|password|pwd|secret|token|access_token|X-Amz-Signature|X-Amz-Security-Token)=([^\s;&"'<>]*)/gi;

/** `text` with every URL's userinfo, query and fragment removed and credential values blanked. */
export function redact(text: string): string {
  return text
    .replace(
      URL_IN_TEXT,
      (_match, special: string | undefined, scheme: string | undefined, authority: string, path: string) => {
        const host = authority.slice(authority.lastIndexOf('@') + 1);
        return special ? `${special}://${host}${path}` : `${scheme}://${host}${path}`;
      },
    )
    .replace(CREDENTIAL_PAIR, (_match, before: string, key: string) => `${before}${key}=${REDACTED}`);
}

/**
 * One URL, as it may be printed: scheme, host and path (`redact` of its parsed form, so what is
 * removed is exactly what `fetch` would have read as credentials and query); `(invalid url)`
 * when it does not parse.
 */
export function redactUrl(url: string | URL): string {
  let href: string;
  try {
    href = new URL(url).href;
  } catch {
    return '(invalid url)';
  }
  return redact(href);
}
