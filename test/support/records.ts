import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { deadLetterRecord } from '../../src/core/dead-letter-record.js';
import type { ErrorCode } from '../../src/core/errors.js';

/** The JSON objects among a command's output lines. */
export function jsonLines(text: string): Record<string, unknown>[] {
  return text
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/**
 * A JSONL file's records (dead letters, a replay's failed file): fails on a line that is not
 * whole JSON or a missing final newline.
 */
export function readJsonl(path: string): Record<string, unknown>[] {
  const text = readFileSync(path, 'utf8');
  expect(text.endsWith('\n')).toBe(true);
  return text
    .slice(0, -1)
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

export function writeJsonl(dir: string, name: string, lines: readonly string[]): string {
  const path = join(dir, name);
  writeFileSync(path, `${lines.join('\n')}\n`);
  return path;
}

/** A dead-letter record as the worker writes it. */
export function deadRecord(
  raw: string,
  options: { code?: ErrorCode; enqueuedAt?: number; id?: string } = {},
): string {
  const message = {
    id: options.id ?? 'sqs-1',
    body: raw,
    attempt: 10,
    ...(options.enqueuedAt === undefined ? {} : { enqueuedAt: options.enqueuedAt }),
  };
  return JSON.stringify(
    deadLetterRecord(message, { code: options.code ?? 'HANDLER_FAILED', reason: 'app was down' }, 'sqs:q'),
  );
}
