import { eventSchemas, isKnownEventType, type PartnerEvent } from './schemas.js';

export type ValidationResult =
  | { readonly ok: true; readonly known: true; readonly event: PartnerEvent }
  | { readonly ok: true; readonly known: false; readonly event: Record<string, unknown> }
  | { readonly ok: false; readonly code: 'SCHEMA_INVALID'; readonly reason: string };

/**
 * Checks a verified body against the schema of its type. Types outside the catalog pass as
 * `known: false` (what happens to them is the consumer's `unknownEventTypes` choice).
 */
export function validateEvent(eventType: string, payload: Record<string, unknown>): ValidationResult {
  if (!isKnownEventType(eventType)) return { ok: true, known: false, event: payload };
  const parsed = eventSchemas[eventType].safeParse(payload);
  if (parsed.success) return { ok: true, known: true, event: parsed.data };
  const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ');
  return { ok: false, code: 'SCHEMA_INVALID', reason: `body does not match ${eventType}: ${issues}` };
}
