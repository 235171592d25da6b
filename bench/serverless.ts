/**
 * `npm run bench -- --only serverless`: the cold-start cost of the serverless subpaths, from the
 * built package (dist/, built first when missing). Each run is a fresh Node process, as a new
 * function instance is: it times `import` of the subpath (and of the root entry alone, as a
 * baseline), then the first event end to end (building the consumer and the handler, verifying,
 * claiming, handling, answering), then a second event (warm). Medians of the runs.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { fmtFixed, sig, table } from './stats.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const dist = (path: string) => pathToFileURL(join(ROOT, 'dist', path)).href;

export type ServerlessEntry = 'root' | 'lambda' | 'azure-functions (queue)' | 'azure-functions (event hub)';

export interface ServerlessRow {
  readonly entry: ServerlessEntry;
  readonly runs: number;
  /** `import` of the entry in a fresh process, ms (median). */
  readonly importMs: number;
  /** The first event through the handler (consumer and handler built on the way), ms (median). */
  readonly firstEventMs: number | null;
  /** The second event, ms (median). */
  readonly warmEventMs: number | null;
}

// One child per run. The child prints one JSON line: { importMs, firstEventMs, warmEventMs }.
const CHILD = `
const [entry, rootUrl, lambdaUrl, azureUrl] = process.argv.slice(2);
const t0 = performance.now();
const root = await import(rootUrl);
const rootMs = performance.now() - t0;
if (entry === 'root') {
  console.log(JSON.stringify({ importMs: performance.now() - t0, firstEventMs: null, warmEventMs: null }));
  process.exit(0);
}
const functions = entry === 'lambda' ? {} : await import('@azure/functions');
const InvocationContext = functions.InvocationContext ?? functions.default?.InvocationContext;
const s0 = performance.now();
const mod = await import(entry === 'lambda' ? lambdaUrl : azureUrl);
// The root entry's share and the subpath's own; @azure/functions (the app's own import) left out.
const importMs = rootMs + (performance.now() - s0);
const secret = 'bench-signing-secret-for-cold-start';
const envelope = () => {
  const body = JSON.stringify({ event_id: 'evt_' + crypto.randomUUID(), event_type: 'partner.bench', user_id: 'u1' });
  const signedAt = Math.floor(Date.now() / 1000);
  return JSON.stringify({ event_id: JSON.parse(body).event_id, event_type: 'partner.bench', signed_at: signedAt, signature: root.sign(body, secret, signedAt), body });
};
const consumer = () => root.createConsumer({ secrets: [{ id: 'k', secret }], dedupe: root.createMemoryDedupe(), logger: root.silentLogger() }).onUnknown(() => undefined);
let handler;
const invoke = async (raw, context) => {
  if (entry === 'lambda') {
    handler ??= mod.sqsHandler(consumer(), { allowEphemeralDedupe: true });
    const now = String(Date.now());
    const record = { messageId: crypto.randomUUID(), receiptHandle: 'r', body: raw, attributes: { ApproximateReceiveCount: '1', SentTimestamp: now, SenderId: 'S', ApproximateFirstReceiveTimestamp: now }, messageAttributes: {}, md5OfBody: '', eventSource: 'aws:sqs', eventSourceARN: 'arn:aws:sqs:eu-west-1:123456789012:bench', awsRegion: 'eu-west-1' };
    const answer = await handler({ Records: [record] }, { getRemainingTimeInMillis: () => 30000 });
    if (answer.batchItemFailures.length) throw new Error('the event failed');
  } else if (entry === 'azure-functions (queue)') {
    handler ??= mod.storageQueueHandler(consumer(), { allowEphemeralDedupe: true });
    await handler(JSON.parse(raw), context);
  } else {
    handler ??= mod.eventHubHandler(consumer(), { allowEphemeralDedupe: true });
    await handler([JSON.parse(raw)], context);
  }
};
// The host builds the InvocationContext: made before the clock starts.
const contextFor = () =>
  entry === 'azure-functions (queue)'
    ? new InvocationContext({ triggerMetadata: { id: crypto.randomUUID(), dequeueCount: 1, insertionTime: new Date().toISOString() } })
    : entry === 'lambda'
      ? undefined
      : new InvocationContext({ triggerMetadata: { partitionContext: { partitionId: '0' }, enqueuedTimeUtcArray: [new Date().toISOString()], sequenceNumberArray: [1], offsetArray: ['0'] } });
const first = envelope();
const firstContext = contextFor();
const e0 = performance.now();
await invoke(first, firstContext);
const firstEventMs = performance.now() - e0;
const second = envelope();
const secondContext = contextFor();
const w0 = performance.now();
await invoke(second, secondContext);
console.log(JSON.stringify({ importMs, firstEventMs, warmEventMs: performance.now() - w0 }));
`;

const ENTRIES: readonly ServerlessEntry[] = [
  'root',
  'lambda',
  'azure-functions (queue)',
  'azure-functions (event hub)',
];

/** Builds dist/ with tsup when the serverless entries are missing from it. */
function ensureBuilt(): void {
  if (
    existsSync(join(ROOT, 'dist/serverless/lambda.js')) &&
    existsSync(join(ROOT, 'dist/serverless/azure-functions.js'))
  )
    return;
  console.log('    (building dist/ with tsup first)');
  execFileSync(process.execPath, [join(ROOT, 'node_modules/tsup/dist/cli-default.js')], {
    cwd: ROOT,
    stdio: 'pipe',
  });
}

interface ChildResult {
  readonly importMs: number;
  readonly firstEventMs: number | null;
  readonly warmEventMs: number | null;
}

function runChild(
  script: string,
  entry: ServerlessEntry,
): Promise<{ importMs: number; firstEventMs: number | null; warmEventMs: number | null }> {
  const args = [
    script,
    entry,
    dist('index.js'),
    dist('serverless/lambda.js'),
    dist('serverless/azure-functions.js'),
  ];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    child.on('exit', (code) => {
      const line = out.trim().split('\n').at(-1) ?? '';
      if (code === 0 && line.startsWith('{')) resolve(JSON.parse(line));
      else reject(new Error(`serverless bench child (${entry}) exited ${code}: ${err.slice(-2000)}`));
    });
  });
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

export async function runServerlessBench(options: { runs: number }): Promise<ServerlessRow[]> {
  ensureBuilt();
  // The child sits in the repository so that `@azure/functions` resolves from its node_modules.
  const script = join(ROOT, 'dist', `.bench-serverless-${process.pid}.mjs`);
  writeFileSync(script, CHILD);
  const rows: ServerlessRow[] = [];
  try {
    for (const entry of ENTRIES) {
      const results: ChildResult[] = [];
      for (let i = 0; i < options.runs; i++) results.push(await runChild(script, entry));
      const pick = (key: 'firstEventMs' | 'warmEventMs') =>
        results[0]?.[key] === null ? null : sig(median(results.map((r) => r[key] as number)), 3);
      rows.push({
        entry,
        runs: options.runs,
        importMs: sig(median(results.map((r) => r.importMs)), 3),
        firstEventMs: pick('firstEventMs'),
        warmEventMs: pick('warmEventMs'),
      });
    }
  } finally {
    rmSync(script, { force: true });
  }
  return rows;
}

export function printServerlessRows(rows: readonly ServerlessRow[]): void {
  const ms = (v: number | null) => (v === null ? '' : fmtFixed(v, 1));
  console.log(
    table([
      ['entry', 'runs', 'import ms', 'first event ms', 'warm event ms'],
      ...rows.map((r) => [r.entry, String(r.runs), ms(r.importMs), ms(r.firstEventMs), ms(r.warmEventMs)]),
    ]),
  );
  console.log(
    '    import = the entry (the root entry included) in a fresh process; first event = consumer and handler built, one event verified, claimed, handled, answered',
  );
}

// Run alone: `npx tsx bench/serverless.ts [runs]`.
if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const runs = Number(process.argv[2] ?? 5);
  printServerlessRows(await runServerlessBench({ runs }));
}
