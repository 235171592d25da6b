/**
 * Text for a terminal: fields nobody signed (an envelope's `event_id`, a dead-letter record's
 * code, an ingress's answer) can hold `ESC]0;…BEL` (set the window title), `ESC[2J` (clear the
 * screen), `\r` (overwrite the row, so "FAILED" reads "ok") or bidi overrides (show text in
 * another order than it is). Every human-readable line the CLI prints goes through
 * `terminalSafe`; `--json` output is JSON-escaped already.
 *
 * Escaped, as `\xNN` or `\uNNNN`: C0 controls (U+0000–U+001F), DEL, C1 controls (U+0080–U+009F;
 * U+009B is a one-character CSI on some terminals), the bidi embeddings, overrides and isolates
 * (U+202A–U+202E, U+2066–U+2069) and marks (U+200E, U+200F, U+061C), and the line and paragraph
 * separators (U+2028, U+2029). Everything else, other scripts and emoji included, is kept.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

export function terminalSafe(text: string): string {
  return text.replace(UNSAFE, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff
      ? `\\x${code.toString(16).padStart(2, '0')}`
      : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

/** `terminalSafe` line by line: the text's own line breaks are kept (multi-line error messages). */
export function terminalSafeLines(text: string): string {
  return text.split('\n').map(terminalSafe).join('\n');
}
