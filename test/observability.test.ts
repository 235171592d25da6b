/**
 * What ships for operators: the Prometheus alert rules (deploy/prometheus/alerts.yaml and the same
 * groups as a PrometheusRule), their unit tests (deploy/prometheus/alerts.test.yaml), the Grafana
 * dashboard (deploy/grafana/partner-events.json) and the metrics they read. The rules, their tests
 * and the dashboard's queries go through `promtool` (Debian's prometheus package, installed by
 * .ci/run), and every metric they name must be in a live /metrics scrape of `partner-events run`.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments, stringify } from 'yaml';
import type { SettledReport } from '../src/consumer/consumer.js';
import { createTestEnvelope, forgedEnvelope } from '../src/consumer/testing.js';
import {
  DeadLetterError,
  ERROR_CODES,
  ForwardError,
  RetryLaterError,
  VERIFICATION_CODES,
  VerificationError,
} from '../src/core/errors.js';
import { type AbortCause, DEFAULT_RETRY_POLICY, decide, type Facts } from '../src/core/outcome.js';
import { createSqliteDedupe } from '../src/dedupe/sqlite.js';
import { ConsumerMetrics, collectProcessMetrics } from '../src/sidecar/metrics.js';
import { postEnvelope, startApp, startRun } from './support/cli.js';
import { tempDir } from './support/harness.js';

const HAS_PROMTOOL = spawnSync('promtool', ['--version'], { stdio: 'ignore' }).status === 0;
if (!HAS_PROMTOOL && process.env.CI) {
  throw new Error('promtool is missing in CI: .ci/run must install it (apt-get install prometheus)');
}
if (!HAS_PROMTOOL)
  console.warn('promtool not installed (apt-get install prometheus): its checks are skipped');

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  annotations?: Record<string, string>;
}
interface RuleGroups {
  groups: { name: string; rules: Rule[] }[];
}
/** promtool's rule test file: series as /metrics would expose them, and the alerts expected. */
interface RuleTests {
  rule_files: string[];
  tests: {
    name: string;
    input_series: { series: string; values: string }[];
    alert_rule_test?: { alertname: string; exp_alerts?: unknown[] }[];
  }[];
}
interface Panel {
  title: string;
  description?: string;
  targets?: { expr: string }[];
}

const alerts = parse(readFileSync('deploy/prometheus/alerts.yaml', 'utf8')) as RuleGroups;
const dashboard = JSON.parse(readFileSync('deploy/grafana/partner-events.json', 'utf8')) as {
  panels: Panel[];
  templating: { list: { query: unknown }[] };
};
const alertRules = alerts.groups.flatMap((g) => g.rules);
const ALERT_TESTS = 'deploy/prometheus/alerts.test.yaml';
const alertTests = parse(readFileSync(ALERT_TESTS, 'utf8')) as RuleTests;

/** The dashboard's queries with Grafana's variables replaced, as Prometheus would receive them. */
function dashboardQueries(): { panel: string; expr: string }[] {
  return dashboard.panels.flatMap((p) =>
    (p.targets ?? []).map((t) => ({
      panel: p.title,
      expr: t.expr.replaceAll('$__rate_interval', '5m').replaceAll(/\$(job|instance)\b/g, '.*'),
    })),
  );
}

/** A series as `name{a="1",b="2"}` with its labels sorted (job and instance left out), to compare fixtures with /metrics. */
function seriesKey(name: string, labels: string): string {
  const pairs = [...labels.matchAll(/(\w+)="([^"]*)"/g)]
    .filter((m) => m[1] !== 'job' && m[1] !== 'instance')
    .map((m) => `${m[1]}="${m[2]}"`)
    .sort();
  return `${name}{${pairs.join(',')}}`;
}

/** The scrapes at which a promtool input series has a sample: '0x4 1+1x3', '_', '_x3', 'stale'. */
function sampled(values: string): boolean[] {
  return values
    .trim()
    .split(/\s+/)
    .flatMap((token) => {
      const blanks = /^_(?:x(\d+))?$/.exec(token);
      if (blanks) return new Array<boolean>(Number(blanks[1] ?? 1)).fill(false);
      if (token === 'stale') return [false];
      const times = /x(\d+)$/.exec(token); // 'axn' and 'a+bxn' are n + 1 samples
      return new Array<boolean>(times ? Number(times[1]) + 1 : 1).fill(true);
    });
}

/** The metric names a PromQL expression reads, histogram series (_bucket, _sum, _count) as their family. */
function metricFamilies(expr: string): string[] {
  return [...expr.matchAll(/\bpartner_events_[a-z_]+\b/g)].map((m) =>
    m[0].replace(/_(bucket|sum|count)$/, ''),
  );
}

let dir: ReturnType<typeof tempDir>;
beforeAll(() => {
  dir = tempDir('phe-observability-');
});
afterAll(() => dir.cleanup());

function promtool(args: string[]) {
  const result = spawnSync('promtool', args, { encoding: 'utf8' });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

describe.skipIf(!HAS_PROMTOOL)('promtool', () => {
  it('accepts the alert rules', () => {
    const result = promtool(['check', 'rules', 'deploy/prometheus/alerts.yaml']);
    expect(result.output).toContain('SUCCESS');
    expect(result.status, result.output).toBe(0);
  });

  it("passes the alerts' unit tests: each fires when it should and stays quiet when it should", () => {
    const result = promtool(['test', 'rules', ALERT_TESTS]);
    expect(result.status, result.output).toBe(0);
    expect(result.output).toContain('SUCCESS');
  });

  it('accepts the PrometheusRule beside the Kubernetes example, which holds the same groups', () => {
    const docs = parseAllDocuments(readFileSync('examples/kubernetes/prometheus-rule.yaml', 'utf8')).map(
      (d) => d.toJS() as { kind: string; spec: RuleGroups },
    );
    const rule = docs.find((d) => d.kind === 'PrometheusRule');
    expect(rule?.spec.groups).toEqual(alerts.groups);
    const file = join(dir.path, 'prometheus-rule-groups.yaml');
    writeFileSync(file, stringify({ groups: rule?.spec.groups }));
    const result = promtool(['check', 'rules', file]);
    expect(result.status, result.output).toBe(0);
  });

  it('parses every query of the dashboard (as recording rules)', () => {
    const rules = dashboardQueries().map((q, i) => ({ record: `dashboard:query_${i}`, expr: q.expr }));
    expect(rules.length).toBeGreaterThan(10);
    const file = join(dir.path, 'dashboard-queries.yaml');
    writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules }] }));
    const result = promtool(['check', 'rules', file]);
    expect(result.status, result.output).toBe(0);
  });
});

describe('alert rules and dashboard', () => {
  it('have the alerts the kit documents, each with a runbook link to a heading of docs/replay-runbook.md', () => {
    expect(alertRules.map((r) => r.alert).sort()).toEqual([
      'PartnerEventsAbandonedClaims',
      'PartnerEventsDeadLettered',
      'PartnerEventsDedupeUnavailable',
      'PartnerEventsDown',
      'PartnerEventsEventAgeHigh',
      'PartnerEventsGcBound',
      'PartnerEventsNotReady',
      'PartnerEventsSignatureMismatchRising',
    ]);
    const runbook = readFileSync('docs/replay-runbook.md', 'utf8');
    const anchors = new Set(
      [...runbook.matchAll(/^#+ (.+)$/gm)].map((m) =>
        (m[1] ?? '')
          .toLowerCase()
          .replace(/[^\p{L}\p{N} -]/gu, '')
          .replaceAll(' ', '-'),
      ),
    );
    const observability = readFileSync('docs/observability.md', 'utf8');
    for (const rule of alertRules) {
      const [file, anchor] = String(rule.annotations?.runbook_url).split('#');
      expect(file, rule.alert).toBe('docs/replay-runbook.md');
      expect(anchors, `${rule.alert} → #${anchor}`).toContain(anchor);
      expect(observability, `docs/observability.md explains ${rule.alert}`).toContain(String(rule.alert));
    }
  });

  it('have unit tests for every alert, a case where it fires and one where it must not', () => {
    expect(alertTests.rule_files).toEqual(['alerts.yaml']);
    const checks = alertTests.tests.flatMap((t) => t.alert_rule_test ?? []);
    for (const rule of alertRules) {
      const own = checks.filter((c) => c.alertname === rule.alert);
      expect(
        own.some((c) => (c.exp_alerts ?? []).length > 0),
        `${rule.alert} fires`,
      ).toBe(true);
      expect(
        own.some((c) => (c.exp_alerts ?? []).length === 0),
        `${rule.alert} stays quiet`,
      ).toBe(true);
    }
  });

  it('test the alerts on series shaped like /metrics: its names, codes, buckets and series at 0 from the start', async () => {
    const registry = new ConsumerMetrics().registry;
    // run's /metrics also has the process's own (PartnerEventsGcBound reads two of them).
    const processMetrics = new Registry();
    collectProcessMetrics(processMetrics);
    const families = new Set(
      [...registry.getMetricsAsArray(), ...processMetrics.getMetricsAsArray()].map((m) => m.name),
    );
    const ageBuckets = (await registry.getSingleMetric('partner_events_event_age_seconds')?.get())?.values
      .filter((v) => v.labels.le !== undefined) // the _bucket values (not _sum, _count)
      .map((v) => String(v.labels.le));
    expect(ageBuckets?.length).toBeGreaterThan(5);
    // What a worker exposes before its first delivery: every series there at 0, and the label
    // values (codes, outcomes) a labelled family has them for.
    const atStart = new Set(
      [...(await registry.metrics()).matchAll(/^(\w+)(?:\{(.*)\})? 0$/gm)].map((m) =>
        seriesKey(m[1] ?? '', m[2] ?? ''),
      ),
    );
    const labelledAtStart = new Set(
      [...atStart].filter((k) => !k.endsWith('{}')).map((k) => k.replace(/\{.*/, '')),
    );
    expect(atStart).toContain('partner_events_dead_lettered_total{code="HANDLER_FAILED"}');
    for (const test of alertTests.tests) {
      const bucketsUsed: string[] = [];
      /** A worker's first scrape: its received_total's first sample, else the test's start. */
      const firstScrape = new Map<string, number>();
      for (const { series, values } of test.input_series) {
        const [, name = '', labels = ''] = /^(\w+)\{(.*)\}$/.exec(series) ?? [];
        if (name === 'partner_events_received_total') {
          firstScrape.set(/\binstance="([^"]+)"/.exec(labels)?.[1] ?? '', sampled(values).indexOf(true));
        }
      }
      for (const { series, values } of test.input_series) {
        const [, name = '', labels = ''] = /^(\w+)\{(.*)\}$/.exec(series) ?? [];
        if (name === 'up') continue; // Prometheus's own series of each target
        expect(families, `${test.name}: ${series}`).toContain(name.replace(/_(bucket|sum|count)$/, ''));
        const code = /\bcode="([^"]+)"/.exec(labels)?.[1];
        if (code !== undefined) expect(ERROR_CODES, series).toContain(code);
        const le = /\ble="([^"]+)"/.exec(labels)?.[1];
        if (name === 'partner_events_event_age_seconds_bucket' && le !== undefined) bucketsUsed.push(le);
        const key = seriesKey(name, labels);
        // A labelled family's series at the start are the only label values it can have.
        if (labelledAtStart.has(name)) expect(atStart, `${test.name}: ${series} can occur`).toContain(key);
        if (atStart.has(key)) {
          const instance = /\binstance="([^"]+)"/.exec(labels)?.[1] ?? '';
          expect(
            sampled(values).indexOf(true),
            `${test.name}: ${series} is at 0 from its worker's first scrape, not missing until it counts`,
          ).toBe(firstScrape.get(instance) ?? 0);
        }
      }
      if (bucketsUsed.length > 0) {
        // One histogram per instance, each with exactly the buckets the live metric has.
        const instances = bucketsUsed.length / (ageBuckets?.length ?? 1);
        expect(instances, test.name).toBe(Math.round(instances));
        expect(new Set(bucketsUsed), test.name).toEqual(new Set(ageBuckets));
      }
    }
  });

  it('explain every dashboard panel in docs/observability.md', () => {
    const observability = readFileSync('docs/observability.md', 'utf8');
    for (const panel of dashboard.panels) {
      expect(panel.description, panel.title).toBeTruthy();
      expect(observability, panel.title).toContain(`| ${panel.title} |`);
    }
  });
});

describe('metrics', () => {
  it('every metric the dashboard and the alerts read is in a live /metrics scrape of `partner-events run`', async () => {
    const app = await startApp();
    const beforeStart = Date.now() / 1000;
    const run = await startRun(
      [
        '--ops-port',
        '0',
        '--source',
        'http://127.0.0.1:0/events',
        '--forward',
        app.url,
        '--dedupe',
        'memory',
      ],
      { env: { PARTNER_EVENTS_DEAD_LETTER: join(dir.path, 'dead.jsonl') } },
    );
    try {
      // Before any traffic, each code's series is there at 0, so the first increment is seen.
      const fresh = await (await fetch(`${run.ops}/metrics`)).text();
      const afterStart = Date.now() / 1000;
      for (const series of [
        'partner_events_dead_lettered_total{code="MALFORMED_ENVELOPE"}',
        'partner_events_dead_lettered_total{code="HANDLER_FAILED"}',
        'partner_events_rejected_total{code="SIGNATURE_MISMATCH"}',
        'partner_events_retried_total{code="SIGNATURE_MISMATCH"}',
        'partner_events_processing_seconds_count{outcome="dead"}',
      ]) {
        expect(fresh.split('\n'), series).toContain(`${series} 0`);
      }
      // Some traffic, so that labelled series have samples too.
      expect(
        (await postEnvelope(run.ingress, createTestEnvelope('daily.data.steps.created').raw)).status,
      ).toBe(200);
      await postEnvelope(run.ingress, forgedEnvelope('daily.data.steps.created').raw);
      await postEnvelope(run.ingress, '{"not": "an envelope"}');
      const scrape = await (await fetch(`${run.ops}/metrics`)).text();
      const exposed = new Map(
        [...scrape.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1] as string, m[2] as string]),
      );
      const queries = [
        ...dashboardQueries(),
        ...dashboard.templating.list.map((v) => ({ panel: 'variable', expr: JSON.stringify(v.query) })),
        ...alertRules.map((r) => ({ panel: String(r.alert), expr: r.expr })),
      ];
      const used = new Set(queries.flatMap((q) => metricFamilies(q.expr)));
      expect(used.size).toBeGreaterThan(10);
      for (const name of used) expect(exposed.has(name), `${name} in /metrics`).toBe(true);
      // Series read as histograms are histograms.
      for (const q of queries) {
        for (const m of q.expr.matchAll(/\b(partner_events_[a-z_]+)_bucket\b/g)) {
          expect(exposed.get(m[1] as string), q.panel).toBe('histogram');
        }
      }
      // The process's own metrics (prom-client's defaults) too, but no gauge named like a counter:
      // the whole scrape passes promtool's lint.
      for (const name of [
        'process_cpu_seconds_total',
        'process_resident_memory_bytes',
        'nodejs_heap_size_used_bytes',
        'nodejs_eventloop_lag_p99_seconds',
      ]) {
        expect(exposed.has(name), `${name} in /metrics`).toBe(true);
      }
      expect(exposed.get('nodejs_gc_duration_seconds')).toBe('histogram');
      expect([...exposed].filter(([name, type]) => name.endsWith('_total') && type !== 'counter')).toEqual(
        [],
      );
      if (HAS_PROMTOOL) {
        const lint = spawnSync('promtool', ['check', 'metrics'], { input: scrape, encoding: 'utf8' });
        expect(lint.status, lint.stdout + lint.stderr).toBe(0);
      }
      expect(scrape).toMatch(/^partner_events_dedupe_available 1$/m);
      // When the worker started (PartnerEventsDeadLettered tells a new worker from a scrape gap
      // by it): within the run's start, and the same at every scrape.
      const startTime = (text: string) =>
        Number(/^partner_events_start_time_seconds (\S+)$/m.exec(text)?.[1]);
      expect(startTime(fresh)).toBeGreaterThanOrEqual(Math.floor(beforeStart));
      expect(startTime(fresh)).toBeLessThanOrEqual(afterStart);
      expect(startTime(scrape)).toBe(startTime(fresh));
      expect(scrape).toMatch(/^partner_events_abandoned_claims_total 0$/m);
      expect(scrape).toMatch(/^partner_events_dead_lettered_total\{code="MALFORMED_ENVELOPE"\} 1$/m);
      expect(scrape).toMatch(/^partner_events_dead_lettered_total\{code="HANDLER_FAILED"\} 0$/m);
    } finally {
      await run.stop();
      await app.close();
    }
  });

  it('follow the Prometheus naming conventions: a unit suffix or _total, snake case, one prefix', () => {
    const names = new ConsumerMetrics().registry
      .getMetricsAsArray()
      .map((m) => ({ name: m.name, type: String(m.type) }));
    for (const { name, type } of names) {
      expect(name).toMatch(/^partner_events_[a-z]+(_[a-z]+)*$/);
      if (type === 'counter') expect(name).toMatch(/_total$/);
      else expect(name).not.toMatch(/_total$/);
      if (type === 'histogram') expect(name).toMatch(/_seconds$/);
    }
  });

  it("share a registry with prom-client's default metrics: the start time is our own series, not process_start_time_seconds", async () => {
    const registry = new Registry();
    collectDefaultMetrics({ register: registry });
    new ConsumerMetrics({ registry });
    const text = await registry.metrics();
    expect(text).toMatch(/^process_start_time_seconds \d+$/m);
    const started = Number(/^partner_events_start_time_seconds (\S+)$/m.exec(text)?.[1]);
    expect(started).toBeGreaterThan(0);
    expect(started).toBeLessThanOrEqual(Date.now() / 1000);
    registry.resetMetrics(); // a reset leaves it as it was: it is set at each scrape
    expect(await registry.metrics()).toContain(`partner_events_start_time_seconds ${started}\n`);
  });

  it('start a series at 0 for exactly the codes a delivery can be rejected, retried and dead-lettered with', async () => {
    // Every decision of decide(), at the first and the last attempt, reported as the consumer does.
    const policy = {
      retry: DEFAULT_RETRY_POLICY,
      leaseMs: 30_000,
      handlerTimeoutMs: 30_000,
      unknownEventTypes: 'dead-letter',
    } as const;
    const causes: AbortCause[] = ['shutdown', 'handler-timeout', 'lease-lost', 'visibility-lost'];
    const unverified: Facts[] = [
      ...VERIFICATION_CODES.map((code) => ({ kind: 'rejected', code, reason: 'bad' }) as const),
      ...VERIFICATION_CODES.map(
        (code) => ({ kind: 'unverified', error: new VerificationError(code, 'bad') }) as const,
      ),
      { kind: 'unverified', error: new Error('a bug') },
    ];
    const verified: Facts[] = [
      { kind: 'unrouted', eventType: 'no.such.type', known: false },
      { kind: 'in-progress', retryAfterMs: 100 },
      { kind: 'store-unavailable', error: new Error('down') },
      { kind: 'abandoned', times: 3 },
      { kind: 'schema-invalid', reason: 'bad' },
      ...[
        new Error('failed'),
        new RetryLaterError(),
        new DeadLetterError('no'),
        new ForwardError('FORWARD_REDIRECTED', '3xx'),
        new ForwardError('FORWARD_ANSWER_INCOMPLETE', '2xx, then cut off'),
      ].map((error) => ({ kind: 'handler-threw', error }) as const),
      ...causes.map((cause) => ({ kind: 'handler-aborted', cause }) as const),
      { kind: 'not-handled' },
    ];
    const observed = new ConsumerMetrics();
    const report = (facts: Facts, attempt: number, keyId: string | undefined) => {
      const { outcome } = decide(facts, attempt, policy);
      observed.observe({ outcome, keyId, attempt, durationMs: 1 } as SettledReport);
      // Its dead-letter record not written: retried with the same code.
      if (outcome.kind === 'dead') report({ kind: 'dead-letter-failed', dead: outcome }, attempt, keyId);
    };
    for (const attempt of [1, policy.retry.maxAttempts]) {
      for (const facts of unverified) report(facts, attempt, undefined);
      for (const facts of verified) report(facts, attempt, 'current');
    }
    /** The codes of a counter's series, with the values they have. */
    const codes = async (metrics: ConsumerMetrics, name: string) =>
      ((await metrics.registry.getSingleMetric(`partner_events_${name}`)?.get())?.values ?? []).map((v) => ({
        code: String(v.labels.code),
        value: v.value,
      }));
    const fresh = new ConsumerMetrics();
    for (const name of ['rejected_total', 'retried_total', 'dead_lettered_total']) {
      const atStart = await codes(fresh, name);
      expect(
        atStart.every((s) => s.value === 0),
        name,
      ).toBe(true);
      const counted = (await codes(observed, name)).filter((s) => s.value > 0).map((s) => s.code);
      expect(counted.length, name).toBeGreaterThan(5);
      expect(new Set(atStart.map((s) => s.code)), name).toEqual(new Set(counted));
    }
  });

  it('counts a claim that finds an earlier one abandoned (its worker died mid-event)', async () => {
    let now = 1_000_000;
    const store = createSqliteDedupe({ path: join(dir.path, 'abandoned.db'), now: () => now });
    const metrics = new ConsumerMetrics();
    const counted = metrics.countAbandonedClaims(store);
    const value = async () =>
      (await metrics.registry.getSingleMetric('partner_events_abandoned_claims_total')?.get())?.values[0]
        ?.value;
    try {
      expect((await counted.claim('evt-1', 1000)).status).toBe('claimed');
      expect(await value()).toBe(0);
      now += 5000; // the lease ran out without complete or release
      const second = await counted.claim('evt-1', 1000);
      expect(second).toMatchObject({ status: 'claimed', abandoned: 1 });
      expect(await value()).toBe(1);
      if (second.status !== 'claimed') throw new Error('not claimed');
      expect(await counted.complete('evt-1', second.token, 60_000)).toBe(true);
      expect(await counted.peek('evt-1')).toBe('done');
      expect(counted.forget).toBeTypeOf('function');
    } finally {
      await counted.close();
    }
  });
});
