import type { Consumer } from '../consumer/consumer.js';
import type { SourceAdapter } from '../core/source-adapter.js';
import type { Forwarder } from './forward.js';
import type { ReadinessCheck } from './ops-server.js';

export interface Readiness {
  readonly ready: boolean;
  readonly checks: {
    readonly source: ReadinessCheck;
    readonly dedupe: ReadinessCheck;
    readonly secrets: ReadinessCheck;
    readonly poller: ReadinessCheck;
    /** With `--forward`: the app answers (see `Forwarder.reachability`). */
    readonly forward?: ReadinessCheck;
  };
}

/**
 * What /readyz reports: the source reachable (its last receive did not fail), the dedupe store
 * reachable, at least one signing secret active, and the poll loop running and not hung — a
 * receive still pending `stallAfterMs` past the longest wait its source declares is a stall.
 * With a `forward`er, the app reachable too (its last forwards did not all go unanswered).
 */
export function readiness(
  consumer: Pick<Consumer, 'status' | 'keyring'>,
  source: Pick<SourceAdapter, 'connected' | 'maxReceiveWaitMs'>,
  stallAfterMs: number,
  now: number = Date.now(),
  forward?: Pick<Forwarder, 'reachability'>,
): Readiness {
  const status = consumer.status;
  const overdue =
    status.receivingSince !== undefined && source.maxReceiveWaitMs !== undefined
      ? now - status.receivingSince - source.maxReceiveWaitMs
      : 0;
  const activeKeys = consumer.keyring.active(now).length;
  const checks = {
    source: {
      ok: (source.connected ?? true) && status.lastReceiveError === undefined,
      ...(status.lastReceiveError ? { detail: status.lastReceiveError } : {}),
    },
    dedupe: { ok: status.dedupeAvailable },
    secrets: { ok: activeKeys > 0, detail: `${activeKeys} active of ${status.keyIds.join(', ')}` },
    poller:
      status.state !== 'running'
        ? { ok: false, detail: status.state }
        : overdue >= stallAfterMs
          ? {
              ok: false,
              detail: `a receive has been pending ${Math.round(overdue / 1000)}s past its longest wait`,
            }
          : { ok: true },
    ...(forward ? { forward: forward.reachability() } : {}),
  };
  return { ready: Object.values(checks).every((c) => c.ok), checks };
}
