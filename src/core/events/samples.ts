import { randomUUID } from 'node:crypto';
import type { EventMap, EventType } from './schemas.js';

const MEASUREMENTS: Partial<Record<EventType, { value: number; unit: string }>> = {
  'daily.data.heart_rate.created': { value: 62, unit: 'bpm' },
  'daily.data.blood_pressure.created': { value: 118, unit: 'mmHg' },
  'daily.data.blood_oxygen.created': { value: 97, unit: '%' },
  'daily.data.glucose.created': { value: 94, unit: 'mg/dL' },
  'daily.data.hrv.created': { value: 48, unit: 'ms' },
  'daily.data.steps.created': { value: 8412, unit: 'count' },
  'daily.data.calories_active.created': { value: 512, unit: 'kcal' },
  'daily.data.distance.created': { value: 6230, unit: 'm' },
  'daily.data.weight.created': { value: 71.4, unit: 'kg' },
  'daily.data.fat.created': { value: 18.2, unit: '%' },
  'daily.data.stress_level.created': { value: 32, unit: 'score' },
};

/** A user id shared by samples unless overridden, so fixtures read alike. */
export const SAMPLE_USER_ID = '6f1c2b1e-4a5d-4c3b-9f8e-2d7a1b0c9e11';

/**
 * A body that passes the schema of `type`: the spec's vital-event shape for measurements,
 * summary fields for sleep and workouts, `nudge_id` + `target` for nudges. `fields` override.
 */
export function sampleEvent<T extends EventType>(type: T, fields: Record<string, unknown> = {}): EventMap[T] {
  const base = {
    event_id: `evt_${randomUUID()}`,
    event_type: type,
    user_id: SAMPLE_USER_ID,
    timestamp: new Date().toISOString(),
  };
  const measurement = MEASUREMENTS[type];
  let body: Record<string, unknown>;
  if (measurement) {
    body = { ...base, ...measurement, provider: 'garmin', source_device: 'forerunner-965', raw_data: {} };
  } else if (type === 'daily.data.sleep.created') {
    body = { ...base, provider: 'oura', duration_seconds: 27_360, efficiency: 0.91, raw_data: {} };
  } else if (type === 'daily.data.workout.created') {
    body = {
      ...base,
      provider: 'garmin',
      activity: 'run',
      duration_seconds: 2_700,
      calories: 430,
      raw_data: {},
    };
  } else {
    body = {
      ...base,
      nudge_id: `nudge_${randomUUID()}`,
      target: { type: 'card', card_item_id: randomUUID() },
    };
  }
  return { ...body, ...fields } as EventMap[T];
}
