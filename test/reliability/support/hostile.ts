/**
 * Hostile input for the consumer: recipes for structured envelopes (every field valid, missing,
 * mistyped or at an edge; signatures right, wrong, malformed or for other bytes; prototype keys;
 * duplicate keys; deep nesting; BOMs, invalid UTF-8, exponent forms of numbers), byte-level
 * mutations of valid envelopes, and an independent oracle of what each message must become.
 *
 * The oracle re-implements the spec's verification (Verification 1–5 and the kit's documented
 * extras) with node:crypto, without calling the kit's verifier: for every message it says
 * "valid" (must be handled) or the one code the kit must dead-letter it with.
 */
import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { type EventType, eventSchemas, isKnownEventType } from '../../../src/core/events/schemas.js';

/** The consumer's fixed clock (ms): freshness decisions do not depend on when the suite runs. */
export const NOW = 1_790_000_000_000;
export const NOW_S = NOW / 1000;
export const MAX_BYTES = 1024 * 1024;
const MAX_AGE_S = 300;
const MAX_FUTURE_S = 300;
const USER_ID = '6f1c2b1e-4a5d-4c3b-9f8e-2d7a1b0c9e11';
const TIMESTAMP = new Date(NOW).toISOString();

export interface Keys {
  readonly current: string;
  readonly previous: string;
  readonly attacker: string;
}

export type Expected =
  | { readonly valid: true; readonly eventId: string; readonly signedAt: number; readonly body: string }
  | { readonly valid: false; readonly code: string };

const utf8 = new TextDecoder('utf-8', { fatal: true });
const HEX64 = /^[0-9a-fA-F]{64}$/;

function hmac(secret: string, signedAt: number, body: string): string {
  return createHmac('sha256', Buffer.from(secret, 'utf8'))
    .update(`${signedAt}.${body}`, 'utf8')
    .digest('hex');
}

/** `text` as a JSON object (not null, not an array), else undefined: envelope and body must both be one. */
function jsonObject(text: string): Record<string, unknown> | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

/** What the consumer must do with `raw` delivered with broker time `enqueuedAt`, at `NOW`. */
export function oracle(raw: string | Uint8Array, enqueuedAt: number, keys: Keys): Expected {
  const fail = (code: string): Expected => ({ valid: false, code });
  const size = typeof raw === 'string' ? Buffer.byteLength(raw, 'utf8') : raw.byteLength;
  if (size > MAX_BYTES) return fail('ENVELOPE_TOO_LARGE');
  let text: string;
  if (typeof raw === 'string') {
    text = raw.charCodeAt(0) === 0xfeff ? raw.slice(1) : raw;
  } else {
    try {
      text = utf8.decode(raw); // drops a leading BOM, refuses invalid sequences
    } catch {
      return fail('MALFORMED_ENVELOPE');
    }
  }
  const envelope = jsonObject(text);
  if (envelope === undefined) return fail('MALFORMED_ENVELOPE');
  const own = (key: string): unknown => (Object.hasOwn(envelope, key) ? envelope[key] : undefined);
  const eventId = own('event_id');
  const eventType = own('event_type');
  const signedAt = own('signed_at');
  const signature = own('signature');
  const body = own('body');
  if (typeof eventId !== 'string' || eventId === '') return fail('MALFORMED_ENVELOPE');
  if (typeof eventType !== 'string' || eventType === '') return fail('MALFORMED_ENVELOPE');
  if (typeof signedAt !== 'number' || !Number.isSafeInteger(signedAt) || signedAt < 0) {
    return fail('MALFORMED_ENVELOPE');
  }
  if (typeof signature !== 'string' || typeof body !== 'string') return fail('MALFORMED_ENVELOPE');
  if (!body.isWellFormed()) return fail('MALFORMED_ENVELOPE');
  if (signedAt - Math.floor(NOW / 1000) > MAX_FUTURE_S) return fail('TIMESTAMP_TOO_NEW');
  if (Math.floor(enqueuedAt / 1000) - signedAt > MAX_AGE_S) return fail('TIMESTAMP_TOO_OLD');
  const lower = signature.toLowerCase();
  if (
    !HEX64.test(signature) ||
    (lower !== hmac(keys.current, signedAt, body) && lower !== hmac(keys.previous, signedAt, body))
  ) {
    return fail('SIGNATURE_MISMATCH');
  }
  const payload = jsonObject(body);
  if (payload === undefined) return fail('BODY_NOT_JSON');
  if (payload.event_id !== eventId || payload.event_type !== eventType) return fail('ENVELOPE_MISMATCH');
  if (isKnownEventType(eventType) && !eventSchemas[eventType].safeParse(payload).success) {
    return fail('SCHEMA_INVALID');
  }
  return { valid: true, eventId, signedAt, body };
}

// ---------------------------------------------------------------------------------------------
// Recipes

const CATALOG = Object.keys(eventSchemas) as EventType[];

/** A deterministic valid body of a catalog type (no random ids: reruns give the same bytes). */
export function catalogBody(type: EventType, eventId: string): Record<string, unknown> {
  const base = { event_id: eventId, event_type: type, user_id: USER_ID, timestamp: TIMESTAMP };
  if (type === 'coach.nudge.created') {
    return { ...base, nudge_id: `nudge-${eventId}`, target: { type: 'card', card_item_id: 'card-1' } };
  }
  if (type === 'daily.data.sleep.created' || type === 'daily.data.workout.created') {
    return { ...base, provider: 'garmin', duration_seconds: 2700, raw_data: {} };
  }
  return { ...base, value: 62, unit: 'bpm', provider: 'garmin', source_device: 'fr965', raw_data: {} };
}

type BodyRecipe =
  | { readonly kind: 'catalog'; readonly type: EventType; readonly perturb: Perturb }
  | { readonly kind: 'unknown-type'; readonly type: string }
  | { readonly kind: 'proto'; readonly type: EventType; readonly where: 'top' | 'nested' | 'raw_data' }
  | {
      readonly kind: 'deep';
      readonly type: EventType;
      readonly depth: number;
      readonly shape: 'array' | 'object';
    }
  | { readonly kind: 'unicode'; readonly type: EventType; readonly text: string }
  | { readonly kind: 'lone-surrogate'; readonly type: EventType }
  | { readonly kind: 'not-json'; readonly text: string }
  | { readonly kind: 'json-non-object'; readonly json: string };

type Perturb =
  | 'none'
  | 'value-as-string'
  | 'no-user-id'
  | 'bad-timestamp'
  | 'extra-fields'
  | 'null-body-fields';

type IdRecipe = 'same' | 'other' | 'empty' | 'number' | 'null' | 'missing' | 'object';

type SignedAtRecipe =
  | { readonly kind: 'offset'; readonly seconds: number; readonly form: 'plain' | 'exponent' | 'dot-zero' }
  | { readonly kind: 'raw'; readonly text: string }
  | { readonly kind: 'missing' };

type SignatureRecipe =
  | 'current'
  | 'previous'
  | 'uppercase'
  | 'attacker'
  | 'random-hex'
  | 'short'
  | 'long'
  | 'non-hex'
  | 'empty'
  | 'number'
  | 'missing'
  | 'other-signed-at'
  | 'other-body';

type Extra =
  | { readonly kind: 'proto' }
  | { readonly kind: 'constructor' }
  | { readonly kind: 'prototype' }
  | { readonly kind: 'forged-body-after' }
  | { readonly kind: 'forged-body-before' }
  | { readonly kind: 'forged-signature-after' }
  | { readonly kind: 'extra'; readonly key: string; readonly value: string };

type Encoding =
  | { readonly kind: 'string' | 'bytes' | 'string-bom' | 'bytes-bom' | 'padded' }
  | { readonly kind: 'bytes-invalid-utf8'; readonly at: number; readonly sequence: number };

export interface Recipe {
  readonly body: BodyRecipe;
  readonly envelopeId: IdRecipe;
  readonly envelopeType: IdRecipe;
  readonly signedAt: SignedAtRecipe;
  readonly signature: SignatureRecipe;
  readonly extras: readonly Extra[];
  readonly encoding: Encoding;
  readonly enqueued: 'now' | 'old' | 'ahead';
}

/** Invalid UTF-8: overlong, stray continuation, 0xFF, a UTF-8-encoded surrogate, past U+10FFFF, truncated. */
export const INVALID_UTF8: readonly (readonly number[])[] = [
  [0xc0, 0x80],
  [0x80],
  [0xff],
  [0xed, 0xa0, 0x80],
  [0xf4, 0x90, 0x80, 0x80],
  [0xe0, 0x80, 0x80],
  [0xc3],
  [0xfe, 0xfe, 0xff, 0xff],
];

/** signed_at as JSON text at the edges: negative, 2^53 and around, floats, exponent forms, wrong types. */
const SIGNED_AT_EDGES = [
  '-1',
  '0',
  '-0',
  '9007199254740991',
  '9007199254740992',
  '9007199254740993',
  '1.5',
  `${NOW_S}.5`,
  `${NOW_S}.000000000000001`,
  '1e21',
  '1e400',
  '-1e400',
  `-${NOW_S}`,
  `${NOW_S / 1e9}e9`,
  `${NOW_S * 1000}e-3`,
  `${NOW_S}E0`,
  `"${NOW_S}"`,
  'null',
  'true',
  '[]',
  '{}',
  '0x6AB',
  'NaN',
  'Infinity',
  `${NOW_S + MAX_FUTURE_S}`,
  `${NOW_S + MAX_FUTURE_S + 1}`,
  `${NOW_S - MAX_AGE_S}`,
  `${NOW_S - MAX_AGE_S - 1}`,
];

const typeArb = fc.constantFrom(...CATALOG);

const bodyArb: fc.Arbitrary<BodyRecipe> = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.record({
      kind: fc.constant('catalog' as const),
      type: typeArb,
      perturb: fc.constantFrom<Perturb>(
        'none',
        'none',
        'none',
        'value-as-string',
        'no-user-id',
        'bad-timestamp',
        'extra-fields',
        'null-body-fields',
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('unknown-type' as const),
      type: fc.oneof(
        fc.string({ unit: 'binary', minLength: 1, maxLength: 30 }).filter((t) => !isKnownEventType(t)),
        fc.constantFrom('__proto__', 'constructor', 'toString', 'hasOwnProperty', 'daily.data.*', '*'),
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('proto' as const),
      type: typeArb,
      where: fc.constantFrom('top' as const, 'nested' as const, 'raw_data' as const),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('deep' as const),
      type: typeArb,
      depth: fc.constantFrom(64, 1_000, 20_000, 100_000),
      shape: fc.constantFrom('array' as const, 'object' as const),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('unicode' as const),
      type: typeArb,
      text: fc.string({ unit: 'binary', maxLength: 40 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('lone-surrogate' as const), type: typeArb }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('not-json' as const),
      text: fc.string({ unit: 'binary', maxLength: 40 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('json-non-object' as const),
      json: fc.oneof(
        fc.constantFrom('null', '[]', '1', '"x"', 'true', '[{"event_id":"x"}]'),
        fc.json({ maxDepth: 2 }).filter((j) => !j.trim().startsWith('{')),
      ),
    }),
  },
);

const idArb: fc.Arbitrary<IdRecipe> = fc.oneof(
  { weight: 12, arbitrary: fc.constant('same' as const) },
  {
    weight: 1,
    arbitrary: fc.constantFrom<IdRecipe>('other', 'other', 'empty', 'number', 'null', 'missing', 'object'),
  },
);

const signedAtArb: fc.Arbitrary<SignedAtRecipe> = fc.oneof(
  {
    weight: 16,
    arbitrary: fc.record({
      kind: fc.constant('offset' as const),
      seconds: fc.oneof(fc.integer({ min: -60, max: 60 }), fc.integer({ min: -400, max: 400 })),
      form: fc.constantFrom(
        'plain' as const,
        'plain' as const,
        'plain' as const,
        'exponent' as const,
        'dot-zero' as const,
      ),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({ kind: fc.constant('raw' as const), text: fc.constantFrom(...SIGNED_AT_EDGES) }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'missing' as const }) },
);

const signatureArb = fc.oneof(
  { weight: 12, arbitrary: fc.constantFrom<SignatureRecipe>('current', 'previous', 'uppercase') },
  {
    weight: 4,
    arbitrary: fc.constantFrom<SignatureRecipe>(
      'attacker',
      'random-hex',
      'short',
      'long',
      'non-hex',
      'empty',
      'number',
      'missing',
      'other-signed-at',
      'other-body',
    ),
  },
);

const extraArb: fc.Arbitrary<Extra> = fc.oneof(
  fc.constant({ kind: 'proto' as const }),
  fc.constant({ kind: 'constructor' as const }),
  fc.constant({ kind: 'prototype' as const }),
  fc.constant({ kind: 'forged-body-after' as const }),
  fc.constant({ kind: 'forged-body-before' as const }),
  fc.constant({ kind: 'forged-signature-after' as const }),
  fc.record({
    kind: fc.constant('extra' as const),
    key: fc.string({ unit: 'binary', maxLength: 12 }),
    value: fc.json({ maxDepth: 2 }),
  }),
);

const encodingArb: fc.Arbitrary<Encoding> = fc.oneof(
  { weight: 14, arbitrary: fc.constantFrom({ kind: 'string' as const }, { kind: 'bytes' as const }) },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      { kind: 'string-bom' as const },
      { kind: 'bytes-bom' as const },
      { kind: 'padded' as const },
    ),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('bytes-invalid-utf8' as const),
      at: fc.nat(),
      sequence: fc.nat(INVALID_UTF8.length - 1),
    }),
  },
);

export const recipeArb: fc.Arbitrary<Recipe> = fc.record({
  body: bodyArb,
  envelopeId: idArb,
  envelopeType: idArb,
  signedAt: signedAtArb,
  signature: signatureArb,
  extras: fc.oneof(
    { weight: 4, arbitrary: fc.constant([]) },
    { weight: 1, arbitrary: fc.array(extraArb, { maxLength: 3 }) },
  ),
  encoding: encodingArb,
  enqueued: fc.constantFrom(
    'now' as const,
    'now' as const,
    'now' as const,
    'now' as const,
    'old' as const,
    'ahead' as const,
  ),
});

/** A message to deliver: its bytes, the broker's enqueue time, and what it must become. */
export interface HostileCase {
  readonly id: string;
  readonly raw: string | Uint8Array;
  readonly enqueuedAt: number;
  /** Bodies signed with a real key by the builder, as `${signed_at}.${body}` (the handler's allow-list). */
  readonly signedPairs: readonly string[];
  readonly label: string;
}

function nest(depth: number, shape: 'array' | 'object'): string {
  return shape === 'array'
    ? `${'['.repeat(depth)}${']'.repeat(depth)}`
    : `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
}

/** The body text a recipe describes, for event `eventId`. */
function bodyText(recipe: BodyRecipe, eventId: string): { text: string; type: string } {
  switch (recipe.kind) {
    case 'catalog': {
      const body: Record<string, unknown> = catalogBody(recipe.type, eventId);
      if (recipe.perturb === 'value-as-string') body.value = 'sixty-two';
      if (recipe.perturb === 'no-user-id') delete body.user_id;
      if (recipe.perturb === 'bad-timestamp') body.timestamp = 'yesterday';
      if (recipe.perturb === 'extra-fields') Object.assign(body, { future_field: { x: [1, 2] }, v: 2 });
      if (recipe.perturb === 'null-body-fields') Object.assign(body, { raw_data: null, provider: null });
      return { text: JSON.stringify(body), type: recipe.type };
    }
    case 'unknown-type':
      return {
        text: JSON.stringify({ event_id: eventId, event_type: recipe.type, user_id: USER_ID }),
        type: recipe.type,
      };
    case 'proto': {
      const json = JSON.stringify(catalogBody(recipe.type, eventId));
      const evil =
        '"__proto__":{"polluted":"yes","event_id":"evil"},"constructor":{"prototype":{"polluted":"yes"}}';
      if (recipe.where === 'top') return { text: `{${evil},${json.slice(1)}`, type: recipe.type };
      if (recipe.where === 'nested')
        return { text: `${json.slice(0, -1)},"nested":{${evil}}}`, type: recipe.type };
      return { text: json.replace('"raw_data":{}', `"raw_data":{${evil}}`), type: recipe.type };
    }
    case 'deep': {
      const json = JSON.stringify(catalogBody(recipe.type, eventId));
      return { text: `${json.slice(0, -1)},"deep":${nest(recipe.depth, recipe.shape)}}`, type: recipe.type };
    }
    case 'unicode': {
      const body = {
        ...catalogBody(recipe.type, eventId),
        note: recipe.text,
        [recipe.text || 'k']: recipe.text,
      };
      return { text: JSON.stringify(body), type: recipe.type };
    }
    case 'lone-surrogate': {
      // The JSON escape is valid; the decoded string holds an unpaired surrogate.
      const json = JSON.stringify(catalogBody(recipe.type, eventId));
      return { text: `${json.slice(0, -1)},"s":"\ud800x"}`, type: recipe.type };
    }
    case 'not-json':
      return { text: `{${recipe.text}`, type: 'daily.data.steps.created' };
    case 'json-non-object':
      return { text: recipe.json, type: 'daily.data.steps.created' };
  }
}

function idJson(recipe: IdRecipe, value: string): string | undefined {
  switch (recipe) {
    case 'same':
      return JSON.stringify(value);
    case 'other':
      return JSON.stringify(`${value}-other`);
    case 'empty':
      return '""';
    case 'number':
      return '42';
    case 'null':
      return 'null';
    case 'missing':
      return undefined;
    case 'object':
      return JSON.stringify({ value });
  }
}

function signedAtJson(recipe: SignedAtRecipe): string | undefined {
  if (recipe.kind === 'missing') return undefined;
  if (recipe.kind === 'raw') return recipe.text;
  const value = NOW_S + recipe.seconds;
  if (recipe.form === 'exponent') return `${value / 1e9}e9`;
  if (recipe.form === 'dot-zero') return `${value}.0`;
  return String(value);
}

/** The numeric value JSON gives signed_at, or undefined when it is no number. */
function parsedNumber(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  try {
    const v = JSON.parse(text) as unknown;
    return typeof v === 'number' ? v : undefined;
  } catch {
    return undefined;
  }
}

const hex = (n: number, seed: string) =>
  createHmac('sha256', 'filler').update(seed).digest('hex').repeat(2).slice(0, n);

/** Builds the message a recipe describes, for event `eventId`. */
export function build(recipe: Recipe, eventId: string, keys: Keys): HostileCase {
  const { text: body, type } = bodyText(recipe.body, eventId);
  const signedAtText = signedAtJson(recipe.signedAt);
  const numeric = parsedNumber(signedAtText) ?? NOW_S;
  const signedPairs: string[] = [];
  const signWith = (secret: string, at: number, text: string, real: boolean) => {
    if (real) signedPairs.push(`${at}.${text}`);
    return hmac(secret, at, text);
  };
  let signature: string | undefined;
  switch (recipe.signature) {
    case 'current':
      signature = JSON.stringify(signWith(keys.current, numeric, body, true));
      break;
    case 'previous':
      signature = JSON.stringify(signWith(keys.previous, numeric, body, true));
      break;
    case 'uppercase':
      signature = JSON.stringify(signWith(keys.current, numeric, body, true).toUpperCase());
      break;
    case 'attacker':
      signature = JSON.stringify(signWith(keys.attacker, numeric, body, false));
      break;
    case 'random-hex':
      signature = JSON.stringify(hex(64, eventId));
      break;
    case 'short':
      signature = JSON.stringify(signWith(keys.current, numeric, body, true).slice(0, 63));
      break;
    case 'long':
      signature = JSON.stringify(`${signWith(keys.current, numeric, body, true)}0`);
      break;
    case 'non-hex':
      signature = JSON.stringify(`${signWith(keys.current, numeric, body, true).slice(0, 63)}g`);
      break;
    case 'empty':
      signature = '""';
      break;
    case 'number':
      signature = '12345';
      break;
    case 'missing':
      signature = undefined;
      break;
    case 'other-signed-at':
      signature = JSON.stringify(signWith(keys.current, numeric + 1, body, true));
      break;
    case 'other-body':
      signature = JSON.stringify(signWith(keys.current, numeric, `${body} `, true));
      break;
  }
  const fields: [string, string][] = [];
  const add = (key: string, json: string | undefined) => {
    if (json !== undefined) fields.push([JSON.stringify(key), json]);
  };
  const forged = JSON.stringify(body.replace(/"event_type"/, '"event_type_x"'));
  for (const extra of recipe.extras) if (extra.kind === 'forged-body-before') add('body', forged);
  add('event_id', idJson(recipe.envelopeId, eventId));
  add('event_type', idJson(recipe.envelopeType, type));
  add('signed_at', signedAtText);
  add('signature', signature);
  add('body', JSON.stringify(body));
  for (const extra of recipe.extras) {
    if (extra.kind === 'proto') add('__proto__', '{"event_id":"evil","polluted":"yes","signed_at":0}');
    if (extra.kind === 'constructor') add('constructor', '{"prototype":{"polluted":"yes"}}');
    if (extra.kind === 'prototype') add('prototype', '{"polluted":"yes"}');
    if (extra.kind === 'forged-body-after') add('body', forged);
    if (extra.kind === 'forged-signature-after') add('signature', JSON.stringify(hex(64, `${eventId}-sig`)));
    if (extra.kind === 'extra') add(extra.key, extra.value);
  }
  const text = `{${fields.map(([k, v]) => `${k}:${v}`).join(',')}}`;
  let raw: string | Uint8Array;
  const enc = recipe.encoding;
  switch (enc.kind) {
    case 'string':
      raw = text;
      break;
    case 'bytes':
      raw = new Uint8Array(Buffer.from(text, 'utf8'));
      break;
    case 'string-bom':
      raw = `\ufeff${text}`;
      break;
    case 'bytes-bom':
      raw = new Uint8Array(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text, 'utf8')]));
      break;
    case 'padded':
      raw = ` \n\t${text}\r\n `;
      break;
    case 'bytes-invalid-utf8': {
      const bytes = Buffer.from(text, 'utf8');
      const at = enc.at % (bytes.length + 1);
      const bad = Buffer.from(INVALID_UTF8[enc.sequence] as number[]);
      raw = new Uint8Array(Buffer.concat([bytes.subarray(0, at), bad, bytes.subarray(at)]));
      break;
    }
  }
  const enqueuedAt =
    recipe.enqueued === 'now' ? NOW : recipe.enqueued === 'old' ? NOW - 400_000 : NOW + 400_000;
  return { id: eventId, raw, enqueuedAt, signedPairs, label: `generated:${recipe.body.kind}` };
}

/** A valid recipe (the base of byte-level mutations). */
export const validRecipeArb: fc.Arbitrary<Recipe> = fc.record({
  body: fc.record({
    kind: fc.constant('catalog' as const),
    type: typeArb,
    perturb: fc.constant('none' as const),
  }),
  envelopeId: fc.constant('same' as const),
  envelopeType: fc.constant('same' as const),
  signedAt: fc.record({
    kind: fc.constant('offset' as const),
    seconds: fc.integer({ min: -200, max: 200 }),
    form: fc.constant('plain' as const),
  }),
  signature: fc.constantFrom<SignatureRecipe>('current', 'previous'),
  extras: fc.constant([]),
  encoding: fc.constant({ kind: 'bytes' as const }),
  enqueued: fc.constant('now' as const),
});

export type Mutation =
  | { readonly op: 'flip'; readonly at: number; readonly bit: number }
  | { readonly op: 'set'; readonly at: number; readonly byte: number }
  | { readonly op: 'insert'; readonly at: number; readonly bytes: readonly number[] }
  | { readonly op: 'delete'; readonly at: number; readonly length: number }
  | { readonly op: 'duplicate'; readonly at: number; readonly length: number; readonly to: number }
  | { readonly op: 'truncate'; readonly at: number }
  | { readonly op: 'swap'; readonly at: number; readonly with: number }
  | { readonly op: 'invalid-utf8'; readonly at: number; readonly sequence: number }
  | { readonly op: 'token'; readonly at: number; readonly token: string };

const TOKENS = [
  '"',
  '\\',
  '{',
  '}',
  '[',
  ']',
  ',',
  ':',
  ' ',
  '\n',
  '\\u0000',
  '\\ud800',
  '\ufeff',
  '"__proto__":{"event_id":"evil"},',
  '"constructor":{"prototype":{"polluted":1}},',
  '1e400',
  '-0',
  'e9',
  '.5',
  '0',
  'null',
];

export const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ op: fc.constant('flip' as const), at: fc.nat(), bit: fc.nat(7) }),
  fc.record({ op: fc.constant('set' as const), at: fc.nat(), byte: fc.nat(255) }),
  fc.record({
    op: fc.constant('insert' as const),
    at: fc.nat(),
    bytes: fc.array(fc.nat(255), { minLength: 1, maxLength: 8 }),
  }),
  fc.record({ op: fc.constant('delete' as const), at: fc.nat(), length: fc.integer({ min: 1, max: 16 }) }),
  fc.record({
    op: fc.constant('duplicate' as const),
    at: fc.nat(),
    length: fc.integer({ min: 1, max: 32 }),
    to: fc.nat(),
  }),
  fc.record({ op: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ op: fc.constant('swap' as const), at: fc.nat(), with: fc.nat() }),
  fc.record({
    op: fc.constant('invalid-utf8' as const),
    at: fc.nat(),
    sequence: fc.nat(INVALID_UTF8.length - 1),
  }),
  fc.record({ op: fc.constant('token' as const), at: fc.nat(), token: fc.constantFrom(...TOKENS) }),
);

export type Region = 'anywhere' | 'body' | 'signature' | 'signed_at' | 'ids';

/** Where a field's value lies in a valid envelope's bytes (as `build` lays them out). */
function regionOf(bytes: Buffer, region: Region): [number, number] {
  if (region === 'anywhere') return [0, bytes.length];
  const find = (key: string) => bytes.indexOf(Buffer.from(`"${key}":`)) + key.length + 3;
  if (region === 'ids') return [0, find('signed_at') - 12];
  if (region === 'signed_at') return [find('signed_at'), find('signature') - 13];
  if (region === 'signature') return [find('signature') + 1, find('signature') + 65];
  return [find('body') + 1, bytes.length - 2];
}

/** Applies byte-level mutations in order, at positions inside `region` of the (first) input. */
export function mutate(
  input: Uint8Array,
  mutations: readonly Mutation[],
  region: Region = 'anywhere',
): Uint8Array {
  let b = Buffer.from(input);
  const [start, end] = regionOf(b, region);
  for (const m of mutations) {
    const span = Math.max(1, Math.min(end, b.length) - start);
    const pos = (n: number) => (b.length === 0 ? 0 : Math.min(b.length - 1, start + (n % span)));
    const gap = (n: number) => Math.min(b.length, start + (n % (span + 1)));
    switch (m.op) {
      case 'flip':
        if (b.length > 0) b[pos(m.at)] = (b[pos(m.at)] as number) ^ (1 << m.bit);
        break;
      case 'set':
        if (b.length > 0) b[pos(m.at)] = m.byte;
        break;
      case 'insert': {
        const at = gap(m.at);
        b = Buffer.concat([b.subarray(0, at), Buffer.from(m.bytes), b.subarray(at)]);
        break;
      }
      case 'delete': {
        const at = pos(m.at);
        b = Buffer.concat([b.subarray(0, at), b.subarray(at + m.length)]);
        break;
      }
      case 'duplicate': {
        const at = pos(m.at);
        const piece = Buffer.from(b.subarray(at, at + m.length));
        const to = gap(m.to);
        b = Buffer.concat([b.subarray(0, to), piece, b.subarray(to)]);
        break;
      }
      case 'truncate':
        b = b.subarray(0, gap(m.at));
        break;
      case 'swap': {
        if (b.length > 1) {
          const i = pos(m.at);
          const j = pos(m.with);
          const t = b[i] as number;
          b[i] = b[j] as number;
          b[j] = t;
        }
        break;
      }
      case 'invalid-utf8': {
        const at = gap(m.at);
        b = Buffer.concat([
          b.subarray(0, at),
          Buffer.from(INVALID_UTF8[m.sequence] as number[]),
          b.subarray(at),
        ]);
        break;
      }
      case 'token': {
        const at = gap(m.at);
        b = Buffer.concat([b.subarray(0, at), Buffer.from(m.token, 'utf8'), b.subarray(at)]);
        break;
      }
    }
  }
  return new Uint8Array(b);
}

/** Oversize and near-limit envelopes: built once, not generated (each is a megabyte). */
export function sizeCases(keys: Keys, nextId: () => string): HostileCase[] {
  const out: HostileCase[] = [];
  const envelopeOf = (id: string, pad: string) => {
    const body = JSON.stringify({ ...catalogBody('daily.data.steps.created', id), pad });
    const signedAt = NOW_S;
    const signature = hmac(keys.current, signedAt, body);
    return {
      text: JSON.stringify({
        event_id: id,
        event_type: 'daily.data.steps.created',
        signed_at: signedAt,
        signature,
        body,
      }),
      pair: `${signedAt}.${body}`,
    };
  };
  const sized = (target: number, unit: string, asBytes: boolean, label: string) => {
    const id = nextId();
    const probe = envelopeOf(id, '');
    const unitBytes = Buffer.byteLength(unit, 'utf8');
    // Each pad unit adds its UTF-8 bytes (ASCII and BMP characters need no escaping).
    const count = Math.floor((target - Buffer.byteLength(probe.text, 'utf8')) / unitBytes);
    let env = envelopeOf(id, unit.repeat(count));
    let pad = unit.repeat(count);
    while (Buffer.byteLength(env.text, 'utf8') < target) {
      pad += 'x';
      env = envelopeOf(id, pad);
    }
    const raw = asBytes ? new Uint8Array(Buffer.from(env.text, 'utf8')) : env.text;
    out.push({ id, raw, enqueuedAt: NOW, signedPairs: [env.pair], label });
  };
  sized(MAX_BYTES, 'x', false, 'size:exactly-1MiB-string');
  sized(MAX_BYTES, 'x', true, 'size:exactly-1MiB-bytes');
  sized(MAX_BYTES + 1, 'x', false, 'size:1MiB+1-string');
  sized(MAX_BYTES + 1, 'x', true, 'size:1MiB+1-bytes');
  // Fewer UTF-16 units than the limit, more UTF-8 bytes: the limit is on bytes.
  sized(MAX_BYTES + 1, '€', false, 'size:multibyte-over-string');
  sized(MAX_BYTES + 2, '€', true, 'size:multibyte-over-bytes');
  const id = nextId();
  out.push({
    id,
    raw: 'x'.repeat(5 * MAX_BYTES),
    enqueuedAt: NOW,
    signedPairs: [],
    label: 'size:5MiB-garbage',
  });
  return out;
}
