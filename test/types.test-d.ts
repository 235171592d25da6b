import { describe, expectTypeOf, it } from 'vitest';
import {
  type Consumer,
  createConsumer,
  type EventMap,
  type HandlerContext,
  type PartnerEvent,
  type UnknownEvent,
} from '../src/index.js';

declare const consumer: Consumer;

describe('typed handlers', () => {
  it('gives an exact type its own fields', () => {
    consumer.on('daily.data.heart_rate.created', (event, context) => {
      expectTypeOf(event.value).toEqualTypeOf<number>();
      expectTypeOf(event.unit).toEqualTypeOf<string>();
      expectTypeOf(event.event_type).toEqualTypeOf<'daily.data.heart_rate.created'>();
      expectTypeOf(context).toEqualTypeOf<HandlerContext>();
      expectTypeOf(context.signal).toEqualTypeOf<AbortSignal>();
    });
    consumer.on('coach.nudge.created', (event) => {
      expectTypeOf(event.nudge_id).toEqualTypeOf<string>();
      expectTypeOf(event.target.type).toExtend<string>();
      // Unknown fields are kept (additive v1) but untyped: a nudge has no typed `value`.
      expectTypeOf(event.value).toEqualTypeOf<unknown>();
    });
  });

  it('gives a wildcard the union of the types it matches', () => {
    consumer.on('daily.data.*', (event) => {
      expectTypeOf(event.event_type).toExtend<`daily.data.${string}`>();
      // @ts-expect-error a nudge is not a daily.data event
      expectTypeOf(event.event_type).toExtend<'coach.nudge.created'>();
    });
    consumer.on('*', (event) => {
      expectTypeOf(event).toEqualTypeOf<PartnerEvent>();
    });
    consumer.onUnknown((event) => {
      expectTypeOf(event).toEqualTypeOf<UnknownEvent>();
      expectTypeOf(event.event_id).toEqualTypeOf<string>();
    });
  });

  it('rejects handlers that expect the wrong event', () => {
    // @ts-expect-error a heart-rate handler cannot take a nudge
    consumer.on('daily.data.heart_rate.created', (event: EventMap['coach.nudge.created']) => event.nudge_id);
  });

  it('validates option names and types', () => {
    // @ts-expect-error concurrency is a number
    createConsumer({ concurrency: 'many' });
    // @ts-expect-error unknownEventTypes is 'ack' or 'dead-letter'
    createConsumer({ unknownEventTypes: 'drop' });
  });
});
