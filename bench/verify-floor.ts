import { createHmac, type KeyObject, timingSafeEqual } from 'node:crypto';

/** Issue 15's goal 3: ours at least 0.95 of the floor (timed in `npm run bench`, counted in bench:verify-instructions). */
export const VERIFY_FLOOR_GOAL = 0.95;

/**
 * The verify step's floor (bench/verify.ts, bench/verify-instructions.ts): the envelope's bare
 * operations, nothing checked that need not be: no size limit, age, key lookup or field checks.
 */
export function bareVerify(raw: string, key: KeyObject): unknown {
  const env = JSON.parse(raw) as { signed_at: number; signature: string; body: string };
  const mac = createHmac('sha256', key).update(`${env.signed_at}.`).update(env.body).digest();
  if (!timingSafeEqual(mac, Buffer.from(env.signature, 'hex'))) throw new Error('floor: bad signature');
  return JSON.parse(env.body);
}
