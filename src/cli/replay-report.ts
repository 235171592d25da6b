import { terminalSafe } from './terminal-safe.js';

/** What became of one replayed record. */
export type ReplayOutcome = 'forwarded' | 'injected' | 'duplicate' | 'rejected' | 'failed';

const OUTCOMES: readonly ReplayOutcome[] = ['forwarded', 'injected', 'duplicate', 'rejected', 'failed'];

/** The key for records that were bare envelopes, not dead-letter records (they have no code). */
export const NO_CODE = 'none';

export type OutcomeCounts = Record<ReplayOutcome, number>;

function zero(): OutcomeCounts {
  return { forwarded: 0, injected: 0, duplicate: 0, rejected: 0, failed: 0 };
}

/**
 * The end-of-run counts: by outcome, by the code each record was dead-lettered with (so "of the
 * 120 HANDLER_FAILED, 118 went through" reads straight off), and by the code of what still fails.
 */
export class ReplayTally {
  total = 0;
  readonly byOutcome: OutcomeCounts = zero();
  readonly byCode: Record<string, OutcomeCounts> = {};
  readonly failureCodes: Record<string, number> = {};

  add(outcome: ReplayOutcome, recordedCode: string | undefined, failureCode?: string): void {
    this.total++;
    this.byOutcome[outcome]++;
    const key = recordedCode ?? NO_CODE;
    this.byCode[key] ??= zero();
    this.byCode[key][outcome]++;
    if (failureCode !== undefined) this.failureCodes[failureCode] = (this.failureCodes[failureCode] ?? 0) + 1;
  }

  /** `forwarded 2 duplicates 1 …`, for the progress line. */
  brief(): string {
    const o = this.byOutcome;
    const sent = o.injected > 0 ? `injected ${o.injected}` : `forwarded ${o.forwarded}`;
    return `${sent} duplicates ${o.duplicate} rejected ${o.rejected} failed ${o.failed}`;
  }

  /** A table per recorded code, then the codes that still fail; one string per line. */
  table(): string[] {
    const columns = OUTCOMES.filter((o) => this.byOutcome[o] > 0 || o === 'duplicate' || o === 'failed');
    const header = ['RECORDED CODE', 'EVENTS', ...columns.map((c) => c.toUpperCase())];
    const rows = Object.entries(this.byCode)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([code, counts]) => [
        code,
        String(OUTCOMES.reduce((n, o) => n + counts[o], 0)),
        ...columns.map((c) => String(counts[c])),
      ]);
    const lines = ['by recorded code:', ...formatTable([header, ...rows]).map((l) => `  ${l}`)];
    const failing = Object.entries(this.failureCodes).sort(([, a], [, b]) => b - a);
    if (failing.length > 0) {
      lines.push('still failing, by code:');
      lines.push(...formatTable(failing.map(([code, n]) => [code, String(n)])).map((l) => `  ${l}`));
    }
    return lines;
  }
}

/** Rows as aligned lines; cells are made terminal-safe first (a recorded code is the record's word). */
export function formatTable(rows: readonly (readonly string[])[]): string[] {
  const safe = rows.map((row) => row.map(terminalSafe));
  const widths: number[] = [];
  for (const row of safe) {
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, cell.length);
    });
  }
  return safe.map((row) =>
    row
      .map((cell, i) => cell.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd(),
  );
}
