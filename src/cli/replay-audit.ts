import { hostname, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import { appendLine } from '../core/durable-append.js';
import { redact } from '../core/redact.js';
import type { ReplayFilter } from './filters.js';

/** The replay log's name: one per folder of dead-letter files, one line per replay. */
export const REPLAY_LOG_NAME = 'partner-events-replays.jsonl';

/** Where a replay's audit record goes: beside its dead-letter file. */
export function replayLogPath(deadLetterPath: string): string {
  return join(dirname(deadLetterPath), REPLAY_LOG_NAME);
}

/** One replay, as the audit log keeps it (docs/cli.md, "Replay log"). */
export interface ReplayAuditRecord {
  readonly started_at: string;
  readonly finished_at: string;
  readonly user: string;
  readonly host: string;
  readonly pid: number;
  /** The command line, each argument redacted (no SAS signature or password is kept). */
  readonly argv: readonly string[];
  readonly source: string;
  readonly target: string | null;
  readonly dry_run: boolean;
  readonly force: boolean;
  /** The `--config` file's header names a replay did not send (another origin); absent when none. */
  readonly headers_withheld?: readonly string[];
  readonly filters: Record<string, unknown>;
  readonly exit_code: number;
  readonly interrupted: boolean;
  /** The run's summary (the last `--json` line). */
  readonly counts: Record<string, unknown>;
}

/** The filters as given, for the record. */
export function filtersOf(
  filter: ReplayFilter,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    ...(filter.types.length > 0 ? { type: filter.types } : {}),
    ...(filter.eventIds.size > 0 ? { event_id: [...filter.eventIds] } : {}),
    ...(filter.codes.size > 0 ? { code: [...filter.codes] } : {}),
    ...(filter.since !== undefined ? { since: new Date(filter.since * 1000).toISOString() } : {}),
    ...(filter.until !== undefined ? { until: new Date(filter.until * 1000).toISOString() } : {}),
    ...extra,
  };
}

/** Who runs this: the login name, else the user id. */
function whoRuns(): string {
  try {
    return userInfo().username;
  } catch {
    return String(process.getuid?.() ?? 'unknown');
  }
}

/**
 * Appends the record (created 0600, synced). A replay whose log cannot be written has still
 * done its work: the failure is said on stderr, and the exit code is not changed.
 */
export async function appendReplayAudit(
  path: string,
  run: Omit<ReplayAuditRecord, 'user' | 'host' | 'pid' | 'argv' | 'finished_at'>,
): Promise<void> {
  const record: ReplayAuditRecord = {
    started_at: run.started_at,
    finished_at: new Date().toISOString(),
    user: whoRuns(),
    host: hostname(),
    pid: process.pid,
    argv: process.argv.slice(2).map((arg) => redact(arg)),
    source: run.source,
    target: run.target,
    dry_run: run.dry_run,
    force: run.force,
    ...(run.headers_withheld ? { headers_withheld: run.headers_withheld } : {}),
    filters: run.filters,
    exit_code: run.exit_code,
    interrupted: run.interrupted,
    counts: run.counts,
  };
  try {
    await appendLine(path, JSON.stringify(record));
  } catch (error) {
    process.stderr.write(`partner-events replay: could not write the replay log ${path}: ${String(error)}\n`);
  }
}
