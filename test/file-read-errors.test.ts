/**
 * A file source whose read fails is not read to its end: the failure is an `AdapterError` naming
 * the path, the lines read before it are still handled, and the source ends short of `done`, so
 * `run` and `replay` exit 1 instead of reporting a finished file.
 *
 * Real failures where the system gives them: a missing path (ENOENT on open), a directory (EISDIR
 * on the first read), Linux's `/proc/self/mem` (EIO on the first read: address 0 is not mapped).
 * An I/O error after some lines has no such stand-in, so one test gives the file source a read
 * stream that fails after the file's text (a path ending `.eio.jsonl`; every other path is read as
 * it is).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createFileSource } from '../adapters/file/index.js';
import { createConsumer, type SettledReport } from '../src/consumer/consumer.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { createMemoryDedupe } from '../src/dedupe/memory.js';
import { runCli, runReplay } from './support/cli.js';
import { tempDir } from './support/harness.js';
import { jsonLines } from './support/records.js';

vi.mock('node:fs', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs')>();
  const { Readable } = await import('node:stream');
  /** The file's text, then EIO where its end would be. */
  const failingAfterText = (path: string) => {
    let sent = false;
    return new Readable({
      read() {
        if (!sent) {
          sent = true;
          this.push(fs.readFileSync(path));
          return;
        }
        const error = Object.assign(new Error('EIO: i/o error, read'), { code: 'EIO', syscall: 'read' });
        this.destroy(error);
      },
    }).setEncoding('utf8');
  };
  const createReadStream = ((path: import('node:fs').PathLike, options?: unknown) =>
    String(path).endsWith('.eio.jsonl')
      ? failingAfterText(String(path))
      : fs.createReadStream(
          path,
          options as Parameters<typeof fs.createReadStream>[1],
        )) as typeof fs.createReadStream;
  return { ...fs, default: { ...fs, createReadStream }, createReadStream };
});

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-file-read-');
});
afterEach(() => dir.cleanup());

const never = new AbortController().signal;
const PROC_MEM = '/proc/self/mem';

describe('FileSource: a read that fails is not the end of the file', () => {
  it('a missing file: receive throws an AdapterError naming the path, then the source ends short of done', async () => {
    const path = join(dir.path, 'missing.jsonl');
    const source = createFileSource({ path });
    await expect(source.receive(10, never)).rejects.toMatchObject({
      name: 'AdapterError',
      code: 'ADAPTER_ERROR',
      message: expect.stringContaining(`cannot read ${path}: ENOENT`),
      details: { path, line: 0, errno: 'ENOENT' },
    });
    // Told once; then drained (nothing was read) and ended, not as a file read to its end.
    expect(await source.receive(10, never)).toBeNull();
    expect(source.progress).toEqual({
      done: false,
      pendingRetries: 0,
      nextRetryAt: undefined,
      failure: expect.stringContaining(`cannot read ${path}: ENOENT`),
    });
    await source.close();
  });

  it('a directory (EISDIR on the first read): the same', async () => {
    const source = createFileSource({ path: dir.path });
    await expect(source.receive(10, never)).rejects.toMatchObject({
      code: 'ADAPTER_ERROR',
      details: { path: dir.path, errno: 'EISDIR' },
    });
    expect(await source.receive(10, never)).toBeNull();
    expect(source.progress).toMatchObject({ done: false, failure: expect.stringContaining('EISDIR') });
    await source.close();
  });

  it('an I/O error after some lines: those lines are handled (a retry included), the consumer stops, the source is not done', async () => {
    const path = join(dir.path, 'events.eio.jsonl');
    const events = [1, 2, 3].map(() => createTestEnvelope('daily.data.steps.created'));
    writeFileSync(path, `${events.map((e) => e.raw).join('\n')}\n`);
    const logs: Record<string, unknown>[] = [];
    const source = createFileSource({ path });
    const reports: SettledReport[] = [];
    const consumer = createConsumer({
      source,
      dedupe: createMemoryDedupe(),
      secrets: [{ id: 'current', secret: TEST_SIGNING_SECRET }],
      deadLetter: join(dir.path, 'dead.jsonl'),
      logger: pino({ level: 'warn' }, { write: (line: string) => logs.push(JSON.parse(line)) }),
      onSettled: (report) => reports.push(report),
    });
    let failed = false;
    consumer.on('*', (event) => {
      if (event.event_id !== events[1]?.eventId || failed) return;
      failed = true;
      throw new Error('app down once');
    });
    await consumer.start();
    await consumer.stopped;

    expect(
      reports
        .filter((r) => r.outcome.kind === 'ack')
        .map((r) => r.eventId)
        .sort(),
    ).toEqual(events.map((e) => e.eventId).sort());
    expect(reports.filter((r) => r.outcome.kind === 'retry').map((r) => r.eventId)).toEqual([
      events[1]?.eventId,
    ]);
    expect(source.stats).toEqual({ lines: 3, acked: 3, dead: 0 });
    expect(source.progress).toMatchObject({
      done: false,
      pendingRetries: 0,
      failure: expect.stringMatching(/^cannot read .*events\.eio\.jsonl after line 3: EIO/),
    });
    expect(logs.map((l) => [l.level, l.msg, l.err])).toContainEqual([
      50,
      'receive failed',
      expect.stringContaining('after line 3: EIO'),
    ]);
  });

  it.skipIf(!existsSync(PROC_MEM))('an I/O error on the first read (EIO from /proc/self/mem)', async () => {
    const source = createFileSource({ path: PROC_MEM });
    await expect(source.receive(10, never)).rejects.toMatchObject({ details: { errno: 'EIO' } });
    expect(await source.receive(10, never)).toBeNull();
    expect(source.progress).toMatchObject({ done: false, failure: expect.stringContaining('EIO') });
    await source.close();
  });
});

describe('the CLI over a file it cannot read', () => {
  it('run --source file:DIR is a usage error (exit 2), as replay DIR is', async () => {
    const result = await runCli(['run', '--source', `file:${dir.path}`, '--forward', 'http://127.0.0.1:9/']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('is a directory: run reads one JSONL file');
  });

  it.skipIf(!existsSync(PROC_MEM))(
    'run --source file: whose read fails (EIO) exits 1, logging the read failure, instead of ending as a finished file',
    async () => {
      const result = await runCli([
        'run',
        '--source',
        `file:${PROC_MEM}`,
        '--forward',
        'http://127.0.0.1:9/',
      ]);
      expect(result.code).toBe(1);
      const logs = jsonLines(result.stdout);
      expect(logs).toContainEqual(
        expect.objectContaining({ msg: 'receive failed', err: expect.stringContaining('EIO') }),
      );
    },
  );

  it.skipIf(!existsSync(PROC_MEM))(
    'replay of a file whose read fails (EIO) exits 1, with read_failed in the summary',
    async () => {
      const deadLetter = join(dir.path, 'failed.jsonl');
      const result = await runReplay(PROC_MEM, [
        '--forward',
        'http://127.0.0.1:9/',
        '--dead-letter',
        deadLetter,
      ]);
      expect(result.code).toBe(1);
      expect(result.summary).toMatchObject({
        total: 0,
        read_failed: expect.stringContaining(`cannot read ${PROC_MEM}: EIO`),
      });
    },
  );

  it.skipIf(!existsSync(PROC_MEM))('replay --dry-run of that file exits 1 the same way', async () => {
    const result = await runReplay(PROC_MEM, ['--forward', 'http://127.0.0.1:9/', '--dry-run']);
    expect(result.code).toBe(1);
    expect(result.summary).toMatchObject({
      dry_run: true,
      total: 0,
      read_failed: expect.stringContaining(`cannot read ${PROC_MEM}: EIO`),
    });
  });
});
