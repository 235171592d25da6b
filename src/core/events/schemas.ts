import { z } from 'zod';

/**
 * zod schemas of the event catalog (spec, Events → Event catalog). v1 changes are additive, so
 * every object schema is loose: unknown fields are kept, never rejected. Where the spec shows
 * only some values of an enumeration ("value X occurs"), the type names those values and still
 * accepts any other string.
 *
 * Required is what the spec shows for each event: `event_id`, `event_type`, `user_id` always;
 * `timestamp`, `value` and `unit` for measurement events; `timestamp` for sleep and workout
 * summaries; `nudge_id` and `target.type` for nudges. Fields the spec lists but a real source
 * may lack (`provider`, `source_device`, `raw_data`) are optional. See docs/events.md.
 */

/** A string enumeration that names the known values but accepts future ones (additive v1). */
function openEnum<const T extends readonly [string, ...string[]]>(values: T) {
  return z.union([z.enum(values), z.string()]) as unknown as z.ZodType<T[number] | (string & {})>;
}

const baseFields = {
  event_id: z.string().min(1),
  user_id: z.guid(),
  timestamp: z.iso.datetime({ offset: true }),
};

function measurementEvent<const T extends string>(type: T) {
  return z.looseObject({
    ...baseFields,
    event_type: z.literal(type),
    value: z.number(),
    unit: z.string(),
    provider: z.string().optional(),
    source_device: z.string().optional(),
    raw_data: z.record(z.string(), z.unknown()).optional(),
  });
}

function summaryEvent<const T extends string>(type: T) {
  return z.looseObject({
    ...baseFields,
    event_type: z.literal(type),
    provider: z.string().optional(),
    source_device: z.string().optional(),
    raw_data: z.record(z.string(), z.unknown()).optional(),
  });
}

export const eventSchemas = {
  'daily.data.heart_rate.created': measurementEvent('daily.data.heart_rate.created'),
  'daily.data.blood_pressure.created': measurementEvent('daily.data.blood_pressure.created'),
  'daily.data.blood_oxygen.created': measurementEvent('daily.data.blood_oxygen.created'),
  'daily.data.glucose.created': measurementEvent('daily.data.glucose.created'),
  'daily.data.hrv.created': measurementEvent('daily.data.hrv.created'),
  'daily.data.steps.created': measurementEvent('daily.data.steps.created'),
  'daily.data.calories_active.created': measurementEvent('daily.data.calories_active.created'),
  'daily.data.distance.created': measurementEvent('daily.data.distance.created'),
  'daily.data.weight.created': measurementEvent('daily.data.weight.created'),
  'daily.data.fat.created': measurementEvent('daily.data.fat.created'),
  // Same shape as the sleep summary endpoint, whose field names the spec does not show.
  'daily.data.sleep.created': summaryEvent('daily.data.sleep.created'),
  'daily.data.workout.created': summaryEvent('daily.data.workout.created'),
  'daily.data.stress_level.created': measurementEvent('daily.data.stress_level.created'),
  'coach.nudge.created': z.looseObject({
    event_id: z.string().min(1),
    event_type: z.literal('coach.nudge.created'),
    user_id: z.guid(),
    timestamp: z.iso.datetime({ offset: true }).optional(),
    // Identifies the nudge across retries; the envelope event_id stays the idempotency key.
    nudge_id: z.string().min(1),
    target: z.looseObject({ type: openEnum(['card', 'health_action']) }),
  }),
} as const;

export type EventType = keyof typeof eventSchemas;

/** Every event type of the spec's catalog. */
export const EVENT_TYPES = Object.keys(eventSchemas) as EventType[];

/** The typed body of each catalog event. */
export type EventMap = { [K in EventType]: z.infer<(typeof eventSchemas)[K]> };

export type PartnerEvent = EventMap[EventType];

/** A body whose type is not in this version's catalog: only the ids are known. */
export interface UnknownEvent {
  readonly event_id: string;
  readonly event_type: string;
  readonly [field: string]: unknown;
}

export function isKnownEventType(type: string): type is EventType {
  return Object.hasOwn(eventSchemas, type);
}
