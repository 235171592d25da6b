import { redact } from '../core/redact.js';
import type { Target } from '../core/target.js';
import type { TargetContext } from '../core/transport.js';
import { specForms, transportFor } from '../transports.js';
import { UsageError } from './common.js';

export type { Delivery, OutgoingMessage, Target } from '../core/target.js';

/**
 * Where `replay --to`, `trigger --to` and `simulate --to` put envelopes: the same forms as
 * `run --source`, seen from the publisher's side (an HTTP URL is POSTed to, not listened on).
 */
export const TARGET_FORMS = specForms('target');

/**
 * Opens the target a `--to` value names, through the transport registry. Queue SDKs are imported
 * only when used. `concurrency`: sends in flight at once, at most.
 */
export async function openTarget(spec: string, context: TargetContext): Promise<Target> {
  const transport = transportFor(spec, 'target');
  if (!transport?.target) throw new UsageError(`unknown --to "${redact(spec)}": expected ${TARGET_FORMS}`);
  return transport.target.open(spec, context);
}
