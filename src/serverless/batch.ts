import type { Consumer } from '../consumer/consumer.js';
import type { ProcessResult } from '../consumer/pipeline.js';
import type { RawMessage } from '../core/source-adapter.js';

/**
 * How one message of an invocation ended: processed (with its result), or cut off by the
 * invocation's deadline, either while it ran (`unfinished`: its handler was told to stop) or
 * before it started (`not-started`). Only `processed` may ever be reported as success.
 */
export type BatchEntry =
  | { readonly kind: 'processed'; readonly result: ProcessResult }
  | { readonly kind: 'unfinished' }
  | { readonly kind: 'not-started' };

const NOT_STARTED: BatchEntry = { kind: 'not-started' };
const UNFINISHED: BatchEntry = { kind: 'unfinished' };

/** The abort reason the consumer's handlers see at the deadline (read as a shutdown: the claim is released). */
export const DEADLINE_REASON = 'invocation deadline';

/**
 * Runs `messages` through `consumer.process` at most `concurrency` at once, in order of start,
 * until `deadlineAt` (ms since the epoch). At the deadline every running handler's signal aborts
 * and whatever has not returned is `unfinished`: the function must answer before its own timeout,
 * and a message it did not see through is never reported as handled. `lanes` keeps order: the
 * messages of one lane run one after another, and after a lane's first message that did not end
 * in an ack the rest of that lane is not started (FIFO message groups, Event Hubs partitions).
 */
export async function processBatch<M extends RawMessage>(
  consumer: Consumer<M>,
  messages: readonly M[],
  deadlineAt: number,
  laneOf?: (message: M) => string | undefined,
): Promise<BatchEntry[]> {
  const entries: BatchEntry[] = messages.map(() => NOT_STARTED);
  const abort = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<typeof UNFINISHED>((resolve) => {
    const fire = () => {
      abort.abort(DEADLINE_REASON);
      resolve(UNFINISHED);
    };
    const left = deadlineAt - Date.now();
    if (left <= 0) fire();
    else timer = setTimeout(fire, left);
  });
  const runOne = async (index: number): Promise<BatchEntry> => {
    if (abort.signal.aborted) return NOT_STARTED;
    const message = messages[index] as M;
    const processing = consumer
      .process(message, abort.signal)
      .then((result): BatchEntry => ({ kind: 'processed', result }));
    const entry = await Promise.race([processing, deadline]);
    entries[index] = entry;
    return entry;
  };
  try {
    const lanes = groupIntoLanes(messages, laneOf);
    await runLanes(lanes, consumer.settings.concurrency, runOne);
  } finally {
    clearTimeout(timer);
  }
  return entries;
}

/** Indexes of the messages, one array per lane (each message its own lane without `laneOf`). */
function groupIntoLanes<M>(messages: readonly M[], laneOf?: (message: M) => string | undefined): number[][] {
  if (!laneOf) return messages.map((_, i) => [i]);
  const lanes = new Map<string, number[]>();
  const single: number[][] = [];
  messages.forEach((message, i) => {
    const lane = laneOf(message);
    const list = lane === undefined ? undefined : lanes.get(lane);
    if (lane === undefined) single.push([i]);
    else if (list) list.push(i);
    else lanes.set(lane, [i]);
  });
  return [...lanes.values(), ...single];
}

/** Runs lanes with at most `concurrency` messages at once; a lane stops at its first non-ack. */
async function runLanes(
  lanes: readonly (readonly number[])[],
  concurrency: number,
  runOne: (index: number) => Promise<BatchEntry>,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < lanes.length) {
      const lane = lanes[next++] as readonly number[];
      for (const index of lane) {
        const entry = await runOne(index);
        if (entry.kind !== 'processed' || entry.result.outcome.kind !== 'ack') break;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, lanes.length) }, worker));
}
