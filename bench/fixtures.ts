/**
 * Bench fixtures: catalog bodies of an exact byte size, signed three ways (our envelope, Stripe's
 * header, svix's headers) over the same body bytes.
 */
import Stripe from 'stripe';
import { Webhook } from 'svix';
import { createTestEnvelope, sampleEvent, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';

export const EVENT_TYPE = 'daily.data.heart_rate.created';

/** Body sizes of the suite, in UTF-8 bytes of the signed body text. */
export const SIZES = [
  { label: '300 B', bytes: 300 },
  { label: '2 KB', bytes: 2 * 1024 },
  { label: '64 KB', bytes: 64 * 1024 },
] as const;

export type SizeLabel = (typeof SIZES)[number]['label'];

export function sizeByLabel(label: string): (typeof SIZES)[number] {
  const size = SIZES.find((s) => s.label === label || s.label.replace(' ', '') === label);
  if (!size) throw new Error(`unknown size "${label}" (one of ${SIZES.map((s) => s.label).join(', ')})`);
  return size;
}

export const OUR_SECRET = TEST_SIGNING_SECRET;
/** Stripe keys its HMAC with the `whsec_…` string's UTF-8 bytes. */
export const STRIPE_SECRET = 'whsec_bench0123456789abcdefghijklmnopqrstuv';
/** svix keys its HMAC with the base64-decoded part after `whsec_`. */
export const SVIX_SECRET = `whsec_${Buffer.from('bench-svix-secret-32-bytes-long!').toString('base64')}`;

const bodyBytes = (raw_data: Record<string, unknown>) =>
  Buffer.byteLength(JSON.stringify(sampleEvent(EVENT_TYPE, { raw_data })), 'utf8');

/**
 * A realistic `raw_data` for a heart-rate event (device metadata plus per-15 s samples) that makes
 * the body exactly `target` bytes. Every sample body has the same length (uuid event ids, ISO
 * timestamps), so one `raw_data` fits every event of a size.
 */
export function rawDataFor(target: number): Record<string, unknown> {
  const base = bodyBytes({ firmware: '' });
  if (base > target) throw new Error(`the smallest body is ${base} bytes, above ${target}`);
  const samples: { ts: number; bpm: number; conf: number }[] = [];
  const withSamples = () => ({ firmware: '', sample_interval_s: 15, samples });
  const start = 1_763_800_000;
  // Leave room for the firmware string that pads to the exact size.
  if (bodyBytes({ firmware: '', sample_interval_s: 15, samples: [] }) + 40 < target) {
    for (let i = 0; ; i++) {
      samples.push({ ts: start + 15 * i, bpm: 58 + ((i * 7) % 41), conf: (90 + ((i * 3) % 10)) / 100 });
      if (bodyBytes(withSamples()) > target - 16) {
        samples.pop();
        break;
      }
    }
  }
  const raw: Record<string, unknown> = samples.length > 0 ? withSamples() : { firmware: '' };
  const missing = target - bodyBytes(raw);
  const fw = 'fr965-20.26.11-b';
  raw.firmware = fw.repeat(Math.ceil(missing / fw.length)).slice(0, missing);
  const size = bodyBytes(raw);
  if (size !== target) throw new Error(`body is ${size} bytes, wanted ${target}`);
  return raw;
}

/** `n` distinct signed envelopes (distinct event ids) of one body size: the raw message texts. */
export function makeEnvelopes(target: number, n: number, signedAt?: number): string[] {
  const raw_data = rawDataFor(target);
  const out: string[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const env = createTestEnvelope(EVENT_TYPE, {
      fields: { raw_data },
      secret: OUR_SECRET,
      ...(signedAt === undefined ? {} : { signedAt }),
    });
    if (Buffer.byteLength(env.envelope.body, 'utf8') !== target) throw new Error('body size drifted');
    out[i] = env.raw;
  }
  return out;
}

export interface VerifyInput {
  /** Our envelope: the body, embedded as a JSON string, plus signed_at and signature. */
  readonly ourRaw: string;
  /** The same body bytes for the two webhook libraries. */
  readonly body: string;
  readonly stripeHeader: string;
  readonly svixHeaders: Record<string, string>;
}

/** `n` distinct bodies of one size, each signed with our scheme, Stripe's and svix's. */
export function makeVerifyInputs(target: number, n: number): VerifyInput[] {
  const raw_data = rawDataFor(target);
  const stripe = new Stripe('sk_test_bench_offline');
  const svix = new Webhook(SVIX_SECRET);
  const out: VerifyInput[] = [];
  for (let i = 0; i < n; i++) {
    const env = createTestEnvelope(EVENT_TYPE, { fields: { raw_data }, secret: OUR_SECRET });
    const body = env.envelope.body;
    const now = new Date();
    const timestamp = Math.floor(now.getTime() / 1000);
    const msgId = `msg_${env.eventId}`;
    out.push({
      ourRaw: env.raw,
      body,
      stripeHeader: stripe.webhooks.generateTestHeaderString({
        payload: body,
        secret: STRIPE_SECRET,
        timestamp,
      }),
      svixHeaders: {
        'svix-id': msgId,
        'svix-timestamp': String(timestamp),
        'svix-signature': svix.sign(msgId, now, body),
      },
    });
  }
  return out;
}
