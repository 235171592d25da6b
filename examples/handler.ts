/**
 * A partner's handlers, written as plain functions so they can be unit-tested without a queue
 * (examples/handler.test.ts): daily steps go to a store, coach nudges to a notifier.
 */
import { type Consumer, type EventMap, type Handler, RetryLaterError } from 'partner-health-events';

export interface StepsStore {
  addSteps(userId: string, day: string, steps: number): Promise<void>;
}

export interface Notifier {
  notify(userId: string, nudgeId: string, kind: string): Promise<void>;
}

export function stepsHandler(store: StepsStore): Handler<EventMap['daily.data.steps.created']> {
  return async (event) => {
    await store.addSteps(event.user_id, event.timestamp.slice(0, 10), event.value);
  };
}

export function nudgeHandler(notifier: Notifier): Handler<EventMap['coach.nudge.created']> {
  return async (event) => {
    const kind = event.target.type;
    if (kind === 'card' || kind === 'health_action') {
      await notifier.notify(event.user_id, event.nudge_id, kind);
      return;
    }
    // A target this app does not know yet (v1 is additive): try again later, after an upgrade.
    throw new RetryLaterError(`unknown nudge target ${kind}`, { delayMs: 60_000 });
  };
}

/** Production wiring: `registerHandlers(createConsumer({ source, … }), deps)`. */
export function registerHandlers(
  consumer: Consumer,
  deps: { steps: StepsStore; notifier: Notifier },
): Consumer {
  return consumer
    .on('daily.data.steps.created', stepsHandler(deps.steps))
    .on('coach.nudge.created', nudgeHandler(deps.notifier));
}
