import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError } from '../core/errors.js';

/**
 * Why a `--handlers` module could not be imported, naming where: the file and line of a syntax
 * error or of a throw while the module loaded. The error itself stays the cause, which the CLI
 * prints under the message (`SyntaxError: Unexpected token ';'`, `Cannot find package 'x'
 * imported from …`).
 */
export function handlersLoadError(modulePath: string, cause: unknown): ConfigError {
  const file = resolve(modulePath);
  if (!existsSync(file)) {
    // Node's own message names the kit's file as the importer: only confusing here.
    return new ConfigError(`--handlers module ${modulePath} not found (looked for ${file})`);
  }
  const where = cause instanceof SyntaxError ? syntaxErrorLocation(file) : loadFrame(cause);
  return new ConfigError(`cannot load --handlers module ${modulePath}${where ? ` (at ${where})` : ''}`, {
    cause,
  });
}

/**
 * An ES module's syntax error carries no location in its stack (Node prints one only when the
 * error is uncaught). `node --check` names it as `FILE:LINE` on its first line of output.
 */
function syntaxErrorLocation(file: string): string | undefined {
  if (!['.js', '.mjs', '.cjs'].includes(extname(file))) return undefined;
  const check = spawnSync(process.execPath, ['--check', file], { encoding: 'utf8', timeout: 10_000 });
  const first = check.stderr?.split('\n', 1)[0] ?? '';
  return /^.+:\d+$/.test(first) ? first : undefined;
}

/**
 * Where a module threw while it loaded: the first stack frame in a file, among the frames above
 * the loader's `ModuleJob.run` (below it is the code that imported the module: the kit).
 */
function loadFrame(cause: unknown): string | undefined {
  const stack = cause instanceof Error ? (cause.stack ?? '') : '';
  for (const line of stack.split('\n').slice(1)) {
    if (line.includes('node:internal/modules/esm/module_job')) return undefined;
    const frame = /^\s+at (?:.*\()?((?:file:\/\/|\/).+?:\d+:\d+)\)?$/.exec(line)?.[1];
    if (frame && !frame.includes('/node_modules/tsx/')) {
      return frame.startsWith('file:') ? fileLocation(frame) : frame;
    }
  }
  return undefined;
}

/** `file:///a/b.mjs:1:7` as `/a/b.mjs:1:7`. */
function fileLocation(frame: string): string {
  const [, url = frame, position = ''] = /^(.*?)((?::\d+){2})$/.exec(frame) ?? [];
  try {
    return `${fileURLToPath(url)}${position}`;
  } catch {
    return frame;
  }
}
