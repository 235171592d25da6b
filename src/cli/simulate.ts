import { randomInt } from 'node:crypto';
import { redact } from '../core/redact.js';
import { ENV_SECRET } from '../core/secrets.js';
import { onStopSignals, parse, parsePositiveInt, UsageError, writeLine } from './common.js';
import { signingSecret, typesMatching } from './publish.js';
import { parsePercent, parseRate } from './rate.js';
import {
  type DeliveryRecord,
  RETRY_SCHEDULE_SECONDS,
  type SimulationOptions,
  type SimulationResult,
  simulate,
} from './simulator.js';
import { openTarget, TARGET_FORMS, type Target } from './targets.js';
import { terminalSafe } from './terminal-safe.js';

/** A run publishes at most this many new events (rate × duration). */
const MAX_EVENTS = 1_000_000;

export const SIMULATE_USAGE = `Usage: partner-events simulate --to TARGET [--rate N/s] [--duration S] [options]

The publisher, locally: signs catalog events and delivers them to TARGET the way the service
does (at-least-once), with the trouble a real queue brings, then prints what it sent and the set
of event ids your consumer must handle exactly once. Bounded: rate x duration new events, then
at most --drain seconds for due retries. Traffic goes only to TARGET.

  --to TARGET          ${TARGET_FORMS}
  --rate N/s           new events per second (default 10/s)
  --duration S         seconds of new events (default 10)
  --duplicates P%      share of events whose envelope is delivered twice, as is (default 5%)
  --retries P%         share re-sent later, re-signed, same event_id, on the spec's schedule
                       (${RETRY_SCHEDULE_SECONDS.map((s) => `${s}s`).join(', ')}; default 5%). With an HTTP ingress, every
                       answer that is not 2xx is retried on that schedule too
  --forged P%          share signed with a secret that is not yours: must never be handled (default 1%)
  --stale P%           share signed 10+ minutes ago (a replayed capture): never handled (default 1%)
  --types PATTERNS     catalog types to draw from, * wildcards, comma-separated (default all)
  --time-scale X       divide the retry schedule by X (3600: 1 h per second; default 1)
  --drain S            seconds after --duration to keep sending due retries (default 30)
  --seed N             fixes every random choice (event ids stay unique); printed in the summary
  --concurrency N      sends at once (default 16)
  --secret-env NAME    sign with the secret in variable NAME (default ${ENV_SECRET})
  --json               one JSON line per delivery, then a summary object as the last line

Exit: 0 when every send reached the target, 1 when some failed or on interrupt, 2 on usage errors.`;

export async function simulateCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, SIMULATE_OPTIONS);
  if (values.help) {
    writeLine(SIMULATE_USAGE);
    return 0;
  }
  // Redacted: a stray argument is often a URL that lost its flag, query key and all.
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${redact(positionals[0] ?? '')}"`);
  if (!values.to) throw new UsageError('simulate needs --to TARGET');
  const settings = simulationSettings(values);
  const target = await openTarget(values.to, { concurrency: settings.concurrency });
  const result = await runSimulation(target, settings, values.json);
  if (values.json) writeLine(JSON.stringify(summaryOf(result, target.name, settings.seed)));
  else printSummary(result, target.name, settings.seed);
  return result.errors === 0 && !result.interrupted ? 0 : 1;
}

const SIMULATE_OPTIONS = {
  to: { type: 'string' },
  rate: { type: 'string', default: '10/s' },
  duration: { type: 'string', default: '10' },
  duplicates: { type: 'string' },
  retries: { type: 'string' },
  forged: { type: 'string' },
  stale: { type: 'string' },
  types: { type: 'string', multiple: true },
  'time-scale': { type: 'string', default: '1' },
  drain: { type: 'string', default: '30' },
  seed: { type: 'string' },
  concurrency: { type: 'string' },
  'secret-env': { type: 'string' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

type SimulateValues = ReturnType<typeof parse<typeof SIMULATE_OPTIONS>>['values'];

/** What the flags ask for: everything `simulate` takes but the target and the run's hooks. */
type SimulationSettings = Omit<SimulationOptions, 'target' | 'signal' | 'onDelivery'>;

/** Checks every flag (a usage error before anything is opened). */
function simulationSettings(values: SimulateValues): SimulationSettings {
  const rate = parseRate('--rate', values.rate);
  const durationSeconds = nonNegative('--duration', values.duration, true);
  if (rate * durationSeconds > MAX_EVENTS) {
    throw new UsageError(
      `--rate x --duration is ${Math.round(rate * durationSeconds)} events; the limit is ${MAX_EVENTS}`,
    );
  }
  const drainSeconds = nonNegative('--drain', values.drain, false);
  const timeScale = nonNegative('--time-scale', values['time-scale'], true);
  const duplicates = parsePercent('--duplicates', values.duplicates, 0.05);
  const retries = parsePercent('--retries', values.retries, 0.05);
  const forged = parsePercent('--forged', values.forged, 0.01);
  const stale = parsePercent('--stale', values.stale, 0.01);
  if (forged + stale > 1) throw new UsageError('--forged and --stale add up to more than 100%');
  const seed = values.seed === undefined ? randomInt(2 ** 31) : parseSeed(values.seed);
  const types = typesMatching('--types', values.types);
  const concurrency = parsePositiveInt('--concurrency', values.concurrency, 16);
  const secret = signingSecret(values['secret-env']);
  return {
    secret,
    types,
    rate,
    durationSeconds,
    drainSeconds,
    duplicates,
    retries,
    forged,
    stale,
    timeScale,
    seed,
    concurrency,
  };
}

function parseSeed(text: string): number {
  const seed = Number(text);
  if (!Number.isSafeInteger(seed) || seed < 0)
    throw new UsageError(`--seed must be a non-negative integer, got "${text}"`);
  return seed;
}

/**
 * Runs the simulation to `target` until done or SIGINT / SIGTERM, then closes the target. Each
 * delivery is a JSON line with `json`, else progress on stderr about once a second.
 */
async function runSimulation(
  target: Target,
  settings: SimulationSettings,
  json: boolean,
): Promise<SimulationResult> {
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  const unhookSignals = onStopSignals(onSignal);
  let lastProgress = 0;
  let deliveries = 0;
  const onDelivery = (record: DeliveryRecord) => {
    deliveries++;
    if (json) writeLine(JSON.stringify(record));
    else if (record.t_ms - lastProgress >= 1000) {
      lastProgress = record.t_ms;
      process.stderr.write(`simulate: ${deliveries} sent, t=${(record.t_ms / 1000).toFixed(1)}s\n`);
    }
  };
  try {
    return await simulate({ ...settings, target, signal: abort.signal, onDelivery });
  } finally {
    unhookSignals();
    await target.close();
  }
}

/** The `--json` summary (the last line). */
function summaryOf(result: SimulationResult, target: string, seed: number) {
  return {
    target,
    seed,
    duration_ms: result.durationMs,
    sent: result.sent,
    accepted: result.accepted,
    errors: result.errors,
    by_kind: result.byKind,
    unique_events: result.expected.length,
    expected_event_ids: result.expected,
    must_not_handle: result.mustNotHandle,
    undelivered_event_ids: result.undelivered,
    abandoned: result.abandoned,
    ...(result.interrupted ? { interrupted: true } : {}),
  };
}

/** The text summary: counts by kind, then the event ids the consumer must handle exactly once. */
function printSummary(result: SimulationResult, target: string, seed: number): void {
  const k = result.byKind;
  writeLine(
    `simulate: ${result.sent} messages to ${terminalSafe(target)} in ${(result.durationMs / 1000).toFixed(1)} s (seed ${seed}): ` +
      `${k.first} events, ${k.duplicate} duplicates, ${k.retry} retries, ${k.forged} forged, ${k.stale} stale; ` +
      `${result.errors} send errors${result.abandoned > 0 ? `, ${result.abandoned} deliveries not sent in time` : ''}` +
      `${result.interrupted ? ' (interrupted)' : ''}`,
  );
  if (result.undelivered.length > 0) {
    writeLine(`${result.undelivered.length} events were never accepted by the target (listed with --json)`);
  }
  writeLine(
    `your consumer must handle each of these ${result.expected.length} event ids exactly once, ` +
      `and none of the ${result.mustNotHandle.length} forged or stale ones:`,
  );
  for (const id of result.expected) writeLine(id);
}

function nonNegative(flag: string, text: string, positive: boolean): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n) || n < 0 || (positive && n === 0)) {
    throw new UsageError(`${flag} must be a ${positive ? 'positive' : 'non-negative'} number, got "${text}"`);
  }
  return n;
}
