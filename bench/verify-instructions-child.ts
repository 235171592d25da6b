/**
 * One side of bench/verify-instructions.ts, run under valgrind from an esbuild bundle: warm up,
 * verify `--n` messages more, exit. Nothing else runs, so the two processes of a side differ only
 * by the Δ verifications.
 *
 *   node --predictable --predictable-gc-schedule BUNDLE --side ours|floor --size 300B --warmup 20000 --n 10000
 */
import { createSecretKey } from 'node:crypto';
import { parseArgs } from 'node:util';
import { Keyring } from '../src/core/secrets.js';
import { verifyMessage } from '../src/core/verify.js';
import { makeEnvelopes, OUR_SECRET, sizeByLabel } from './fixtures.js';
import { bareVerify } from './verify-floor.js';

/** Distinct messages cycled, as in the timed verify section. */
const POOL = 64;

const { values } = parseArgs({
  options: {
    side: { type: 'string' },
    size: { type: 'string', default: '300B' },
    warmup: { type: 'string' },
    n: { type: 'string' },
  },
});
const inputs = makeEnvelopes(sizeByLabel(values.size).bytes, POOL);
const keyring = new Keyring([{ id: 'current', secret: OUR_SECRET }]);
const key = createSecretKey(Buffer.from(OUR_SECRET, 'utf8'));
const op =
  values.side === 'ours'
    ? (raw: string) => verifyMessage(raw, { keyring }).payload
    : values.side === 'floor'
      ? (raw: string) => bareVerify(raw, key)
      : undefined;
if (op === undefined) throw new Error('--side ours|floor');
const total = Number(values.warmup) + Number(values.n);
let sink = 0;
for (let i = 0; i < total; i++) if (op(inputs[i % POOL] as string) === undefined) sink++;
if (sink !== 0) throw new Error('a verifier returned nothing');
