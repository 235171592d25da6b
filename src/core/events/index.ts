export {
  EVENT_TYPES,
  type EventMap,
  type EventType,
  eventSchemas,
  isKnownEventType,
  type PartnerEvent,
  type UnknownEvent,
} from './schemas.js';
