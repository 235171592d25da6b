/**
 * The decision table of docs/concepts.md, read from the page and checked row by row against
 * `decide` (src/core/outcome.ts): each row's decision, delay and dedupe claim, at the first
 * attempt and at the last. A row the test cannot read, a row without a case here, or a case
 * without a row fails: the page and the function cannot drift apart.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  DeadLetterError,
  ERROR_CODES,
  type ErrorCode,
  ForwardError,
  RetryLaterError,
  VerificationError,
} from '../src/core/errors.js';
import { type ClaimAction, type DecisionPolicy, decide, type Facts } from '../src/core/outcome.js';

const POLICY: DecisionPolicy = {
  retry: { maxAttempts: 5, baseDelayMs: 1000, maxDelayMs: 600_000 },
  leaseMs: 45_000,
  handlerTimeoutMs: 20_000,
  unknownEventTypes: 'ack',
};
const LAST = POLICY.retry.maxAttempts;

type Variant = 'running' | 'visibility-lost' | 'with-delay';

/** One way a row comes about; `variants` name what a cell treats differently. */
interface Sample {
  readonly facts: Facts;
  readonly variants?: readonly Variant[];
  readonly policy?: Partial<DecisionPolicy>;
}
interface Case {
  /** For rows whose first cell does not start with the code. */
  readonly code?: ErrorCode;
  readonly samples: readonly Sample[];
}

const running = new Promise<void>(() => undefined);
const verification = (code: VerificationError['code']): Sample => ({
  facts: { kind: 'unverified', error: new VerificationError(code, `failed: ${code}`) },
});
const rejected = (code: VerificationError['code']): Sample => ({
  facts: { kind: 'rejected', code, reason: `rejected: ${code}` },
});

/** Every row of the table, by its first cell up to the first " (". */
const CASES: Readonly<Record<string, Case>> = {
  'none: the handlers succeeded': { samples: [{ facts: { kind: 'handled' } }] },
  'none: the store says the event is done': { samples: [{ facts: { kind: 'duplicate' } }] },
  'none: no handler wants the type': {
    samples: [
      { facts: { kind: 'unrouted', eventType: 'daily.data.steps.created', known: true } },
      { facts: { kind: 'unrouted', eventType: 'daily.data.new.created', known: false } },
      {
        facts: { kind: 'unrouted', eventType: 'daily.data.steps.created', known: true },
        policy: { unknownEventTypes: 'dead-letter' },
      },
    ],
  },
  '`MALFORMED_ENVELOPE`': { samples: [verification('MALFORMED_ENVELOPE')] },
  '`ENVELOPE_TOO_LARGE`': { samples: [verification('ENVELOPE_TOO_LARGE')] },
  '`BODY_NOT_JSON`': { samples: [verification('BODY_NOT_JSON')] },
  '`ENVELOPE_MISMATCH`': { samples: [verification('ENVELOPE_MISMATCH')] },
  '`ENCODING_MISMATCH`': { samples: [rejected('ENCODING_MISMATCH')] },
  '`TIMESTAMP_TOO_OLD`': { samples: [verification('TIMESTAMP_TOO_OLD')] },
  '`TIMESTAMP_TOO_NEW`': { samples: [verification('TIMESTAMP_TOO_NEW')] },
  '`SIGNATURE_MISMATCH`': { samples: [verification('SIGNATURE_MISMATCH')] },
  '`INTERNAL_ERROR`': {
    samples: [{ facts: { kind: 'unverified', error: new TypeError('Cannot read properties of undefined') } }],
  },
  '`UNKNOWN_EVENT_TYPE`': {
    samples: [
      {
        facts: { kind: 'unrouted', eventType: 'daily.data.new.created', known: false },
        policy: { unknownEventTypes: 'dead-letter' },
      },
    ],
  },
  '`DEAD_LETTER_TRUNCATED`': { samples: [verification('DEAD_LETTER_TRUNCATED')] },
  '`SCHEMA_INVALID`': { samples: [{ facts: { kind: 'schema-invalid', reason: 'body does not match' } }] },
  '`HANDLER_FAILED`': {
    samples: [
      { facts: { kind: 'handler-threw', error: new Error('app down') } },
      { facts: { kind: 'handler-threw', error: 'a string' } },
    ],
  },
  '`HANDLER_REQUESTED_RETRY`': {
    samples: [
      { facts: { kind: 'handler-threw', error: new RetryLaterError('later') } },
      {
        facts: { kind: 'handler-threw', error: new RetryLaterError('later', { delayMs: 1234 }) },
        variants: ['with-delay'],
      },
      // Not a delay: the backoff instead (NaN would retry at once, every attempt in milliseconds).
      ...[Number.NaN, -1, Number.POSITIVE_INFINITY].map((delayMs) => ({
        facts: { kind: 'handler-threw', error: new RetryLaterError('later', { delayMs }) } as const,
      })),
    ],
  },
  '`HANDLER_REQUESTED_DEAD_LETTER`': {
    samples: [{ facts: { kind: 'handler-threw', error: new DeadLetterError('never') } }],
  },
  '`FORWARD_REDIRECTED`': {
    samples: [
      { facts: { kind: 'handler-threw', error: new ForwardError('FORWARD_REDIRECTED', 'HTTP 302') } },
    ],
  },
  '`FORWARD_ANSWER_INCOMPLETE`': {
    samples: [
      {
        facts: {
          kind: 'handler-threw',
          error: new ForwardError('FORWARD_ANSWER_INCOMPLETE', 'HTTP 200, then cut off'),
        },
      },
    ],
  },
  '`HANDLER_TIMEOUT`': {
    samples: [
      { facts: { kind: 'handler-aborted', cause: 'handler-timeout', running }, variants: ['running'] },
      { facts: { kind: 'handler-aborted', cause: 'handler-timeout' } },
    ],
  },
  '`LEASE_LOST`': {
    samples: [
      { facts: { kind: 'handler-aborted', cause: 'lease-lost', running }, variants: ['running'] },
      { facts: { kind: 'handler-aborted', cause: 'lease-lost' } },
      { facts: { kind: 'handler-aborted', cause: 'visibility-lost' }, variants: ['visibility-lost'] },
      {
        facts: { kind: 'handler-aborted', cause: 'visibility-lost', running },
        variants: ['visibility-lost', 'running'],
      },
    ],
  },
  '`HANDLER_ABANDONED`': { samples: [{ facts: { kind: 'abandoned', times: 3 } }] },
  'a bug of the kit after verification, `INTERNAL_ERROR`': {
    code: 'INTERNAL_ERROR',
    samples: [{ facts: { kind: 'kit-failed', error: new TypeError('x is undefined') } }],
  },
  '`DEDUPE_UNAVAILABLE`': {
    samples: [{ facts: { kind: 'store-unavailable', error: new Error('refused') } }],
  },
  '`IN_PROGRESS`': {
    samples: [
      { facts: { kind: 'in-progress', retryAfterMs: 30 } },
      { facts: { kind: 'in-progress', retryAfterMs: 700 } },
      { facts: { kind: 'in-progress', retryAfterMs: 59_000 } },
    ],
  },
  '`SHUTDOWN`': {
    samples: [
      { facts: { kind: 'handler-aborted', cause: 'shutdown' } },
      // At a shutdown the claim is released at once, even while the handler still runs.
      { facts: { kind: 'handler-aborted', cause: 'shutdown', running } },
    ],
  },
  'received after stop, `SHUTDOWN`': { code: 'SHUTDOWN', samples: [{ facts: { kind: 'not-handled' } }] },
  "the dead outcome's code, when its dead-letter write failed": {
    code: 'TIMESTAMP_TOO_OLD',
    samples: [
      {
        facts: {
          kind: 'dead-letter-failed',
          dead: { kind: 'dead', code: 'TIMESTAMP_TOO_OLD', reason: 'signed_at is 900s older' },
        },
      },
    ],
  },
};

/** Codes that are never a message's outcome (thrown at start-up, or by adapters). */
const NOT_OUTCOMES: ReadonlySet<ErrorCode> = new Set(['CONFIG_INVALID', 'SECRET_INVALID', 'ADAPTER_ERROR']);

/** The equal-jitter backoff of `attempt` lies in [ceiling / 2, ceiling]. */
function expectBackoff(delay: number | undefined, attempt: number): void {
  const { baseDelayMs, maxDelayMs } = POLICY.retry;
  const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
  expect(delay).toBeGreaterThanOrEqual(ceiling / 2);
  expect(delay).toBeLessThanOrEqual(ceiling);
}

function is(sample: Sample, variant: Variant): boolean {
  return sample.variants?.includes(variant) ?? false;
}

type DelayCheck = (delay: number | undefined, sample: Sample, attempt: number) => void;

/** What each text of the "delay" column means. */
const DELAYS: Readonly<Record<string, DelayCheck>> = {
  '': (delay) => expect(delay).toBeUndefined(),
  backoff: (delay, _s, attempt) => expectBackoff(delay, attempt),
  '0': (delay) => expect(delay).toBe(0),
  '`leaseMs`': (delay) => expect(delay).toBe(POLICY.leaseMs),
  "`leaseMs`; 0 when the broker's visibility was lost": (delay, sample) =>
    expect(delay).toBe(is(sample, 'visibility-lost') ? 0 : POLICY.leaseMs),
  "the error's `delayMs`, else backoff": (delay, sample, attempt) =>
    is(sample, 'with-delay') ? expect(delay).toBe(1234) : expectBackoff(delay, attempt),
  '`max(100 ms, min(remaining lease, backoff))`': (delay, sample, attempt) => {
    const remaining = sample.facts.kind === 'in-progress' ? sample.facts.retryAfterMs : Number.NaN;
    const ceiling = Math.min(POLICY.retry.maxDelayMs, POLICY.retry.baseDelayMs * 2 ** (attempt - 1));
    expect(delay).toBeGreaterThanOrEqual(Math.max(100, Math.min(remaining, ceiling / 2)));
    expect(delay).toBeLessThanOrEqual(Math.max(100, Math.min(remaining, ceiling)));
  },
};

type ClaimCheck = (claim: ClaimAction, sample: Sample) => void;

/** What each text of the "dedupe claim" column means. */
const CLAIMS: Readonly<Record<string, ClaimCheck>> = {
  '': (claim) => expect(claim).toBe('none'),
  'never taken': (claim) => expect(claim).toBe('none'),
  'held by the other delivery': (claim) => expect(claim).toBe('none'),
  'unchanged: settled when the code was decided': (claim) => expect(claim).toBe('none'),
  completed: (claim) => expect(claim).toBe('complete'),
  released: (claim) => expect(claim).toBe('release'),
  'kept until the handler stops, at most until the lease expires': (claim, sample) =>
    expect(claim).toBe(is(sample, 'running') ? 'release-when-stopped' : 'release'),
};

interface Row {
  readonly key: string;
  readonly cells: readonly string[];
}

/** The rows of the table under "### Decision table" in docs/concepts.md. */
function decisionTable(): Row[] {
  const page = readFileSync(new URL('../docs/concepts.md', import.meta.url), 'utf8');
  const section = page.split('\n### Decision table\n')[1]?.split('\n#')[0] ?? '';
  const lines = section.split('\n').filter((line) => line.startsWith('|'));
  expect(lines[0]).toBe('| code | decision | delay | dedupe claim | why |');
  return lines.slice(2).map((line) => {
    // Cells split on `|` outside backticks (a cell may quote code containing one).
    const cells = line
      .slice(1, -1)
      .split(/\|(?=(?:[^`]*`[^`]*`)*[^`]*$)/)
      .map((cell) => cell.trim());
    return { key: (cells[0] ?? '').split(' (')[0] ?? '', cells };
  });
}

const rows = decisionTable();

/** The code a row is about: its first cell's, or its case's. */
function codeOf(row: Row): ErrorCode | undefined {
  return CASES[row.key]?.code ?? (row.key.match(/^`([A-Z_]+)`$/)?.[1] as ErrorCode | undefined);
}

describe('the decision table in docs/concepts.md', () => {
  it('has one row per case here, and a row for every code a message can end with', () => {
    expect(rows.length).toBeGreaterThan(20);
    expect(rows.map((r) => r.key).sort()).toEqual(Object.keys(CASES).sort());
    const documented = new Set(rows.map(codeOf));
    const outcomes = ERROR_CODES.filter((code) => !NOT_OUTCOMES.has(code));
    expect(outcomes.filter((code) => !documented.has(code))).toEqual([]);
  });

  let sameClaim: string | undefined;
  for (const row of rows) {
    const [, decisionText = '', delayText = '', claimCell = ''] = row.cells;
    // "same" repeats the claim of the row above.
    const claimText = claimCell === 'same' ? (sameClaim ?? '') : claimCell;
    sameClaim = claimText;

    it(`${row.key}: ${decisionText}`, () => {
      const testCase = CASES[row.key];
      expect(testCase, `no case for row ${row.key}`).toBeDefined();
      const delayCheck = DELAYS[delayText];
      const claimCheck = CLAIMS[claimText];
      expect(delayCheck, `unknown delay text: ${delayText}`).toBeDefined();
      expect(claimCheck, `unknown dedupe claim text: ${claimText}`).toBeDefined();
      const code = codeOf(row);
      for (const sample of testCase?.samples ?? []) {
        const policy = { ...POLICY, ...sample.policy };
        const first = decide(sample.facts, 1, policy);
        const last = decide(sample.facts, LAST, policy);
        const beforeLast = decide(sample.facts, LAST - 1, policy);
        checkDecision(decisionText, code, { first, last, beforeLast });
        for (const [attempt, decision] of [
          [1, first],
          [LAST - 1, beforeLast],
        ] as const) {
          const delay = decision.outcome.kind === 'retry' ? decision.outcome.delayMs : undefined;
          delayCheck?.(delay, sample, attempt);
          claimCheck?.(decision.claim, sample);
        }
        // The claim does not depend on the attempt.
        expect(last.claim).toBe(first.claim);
      }
    });
  }
});

type Decided = Record<'first' | 'last' | 'beforeLast', ReturnType<typeof decide>>;

/** Checks the "decision" column: what happens at the first attempt, the one before the last, and the last. */
function checkDecision(
  text: string,
  code: ErrorCode | undefined,
  { first, last, beforeLast }: Decided,
): void {
  const ack = text.match(/^ack `(handled|duplicate|ignored)`$/);
  if (ack) {
    for (const decision of [first, beforeLast, last]) {
      expect(decision.outcome).toEqual({ kind: 'ack', result: ack[1] });
    }
  } else if (text.startsWith('dead at once')) {
    for (const decision of [first, beforeLast, last]) {
      expect(decision.outcome).toMatchObject({ kind: 'dead', code });
    }
  } else if (text === 'retry, dead after N') {
    expect(first.outcome).toMatchObject({ kind: 'retry', code });
    expect(beforeLast.outcome).toMatchObject({ kind: 'retry', code });
    expect(last.outcome).toMatchObject({
      kind: 'dead',
      code,
      reason: expect.stringMatching(/gave up after 5 attempts/),
    });
  } else if (text === 'retry, **never dead-lettered**') {
    for (const decision of [first, beforeLast, last]) {
      expect(decision.outcome).toMatchObject({ kind: 'retry', code });
    }
  } else {
    expect.fail(`unknown decision text: ${text}`);
  }
}
