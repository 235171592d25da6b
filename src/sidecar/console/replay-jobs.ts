import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { createPrivateFile } from '../../core/private-file.js';

/**
 * How the console runs `partner-events replay`: the same engine and guarantees as the CLI, in a
 * child process (its own dedupe connection, its own report, its audit record), on a file of the
 * selected letters.
 */
export interface ConsoleReplayCommand {
  /** The program and its first arguments that run the CLI (`node …/main.js`). */
  readonly command: readonly string[];
  /** Arguments after `replay FILE`: where events go and the worker's dedupe store and secrets. */
  readonly args: readonly string[];
  /** For the page: where a replay sends events (URLs redacted). */
  readonly description: string;
  /** Environment of the child (the worker's, which holds the signing secrets). */
  readonly env?: NodeJS.ProcessEnv;
}

export interface ReplayJob {
  readonly id: string;
  readonly dryRun: boolean;
  readonly letters: number;
  readonly startedAt: string;
  state: 'running' | 'done' | 'failed';
  /** One entry per record the replay reported, in order (the --json lines, without bodies). */
  readonly records: Record<string, unknown>[];
  summary: Record<string, unknown> | undefined;
  exitCode: number | null;
  /** The end of the child's stderr when it failed. */
  error: string | undefined;
}

const KEEP_JOBS = 20;

/** Replays started from the console, newest last; at most one runs at a time. */
export class ReplayJobs {
  readonly #replay: ConsoleReplayCommand;
  readonly #directory: string;
  readonly #jobs = new Map<string, ReplayJob>();

  constructor(replay: ConsoleReplayCommand, deadLetterPath: string) {
    this.#replay = replay;
    this.#directory = dirname(deadLetterPath);
  }

  get description(): string {
    return this.#replay.description;
  }

  get(id: string): ReplayJob | undefined {
    return this.#jobs.get(id);
  }

  get running(): boolean {
    return [...this.#jobs.values()].some((job) => job.state === 'running');
  }

  /** Writes the selected lines to a private file beside the dead letters and replays it. */
  start(lines: readonly string[], dryRun: boolean): ReplayJob {
    const id = randomUUID();
    const file = join(
      this.#directory,
      `console-replay-${new Date().toISOString().replace(/[:.]/g, '')}-${id.slice(0, 8)}.jsonl`,
    );
    createPrivateFile(file);
    writeFileSync(file, lines.map((line) => `${line}\n`).join(''));
    const job: ReplayJob = {
      id,
      dryRun,
      letters: lines.length,
      startedAt: new Date().toISOString(),
      state: 'running',
      records: [],
      summary: undefined,
      exitCode: null,
      error: undefined,
    };
    this.#remember(job);
    const [program, ...first] = this.#replay.command;
    const args = [...first, 'replay', file, ...this.#replay.args, '--json', ...(dryRun ? ['--dry-run'] : [])];
    const child = spawn(program as string, args, {
      env: { ...process.env, ...this.#replay.env, LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr = (stderr + d).slice(-4000);
    });
    createInterface({ input: child.stdout }).on('line', (line) => record(job, line));
    child.on('close', (code) => {
      job.exitCode = code;
      // Exit 1 is the replay's "some events still fail": a finished report, not a crash.
      job.state = job.summary && (code === 0 || code === 1) ? 'done' : 'failed';
      if (job.state === 'failed') job.error = stderr.trim() || `replay exited with ${code}`;
      // A dry run leaves nothing worth keeping; a replay's input stays for its audit trail.
      if (dryRun) rmSync(file, { force: true });
    });
    return job;
  }

  #remember(job: ReplayJob): void {
    this.#jobs.set(job.id, job);
    while (this.#jobs.size > KEEP_JOBS) this.#jobs.delete(this.#jobs.keys().next().value as string);
  }
}

function record(job: ReplayJob, line: string): void {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return;
  }
  if (!parsed || typeof parsed !== 'object') return;
  const entry = parsed as Record<string, unknown>;
  // The last line is the summary (docs/cli.md, "--json summary"); the others are per record.
  if ('total' in entry && 'dry_run' in entry) {
    job.summary = entry;
  } else {
    job.records.push(entry);
  }
}
