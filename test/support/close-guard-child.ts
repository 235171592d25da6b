/**
 * A process that closes "an Event Hubs client" under the close guard while a promise nobody
 * handles rejects, as rhea-promise's createReceiver does when the SDK stopped waiting for it
 * (Azure/azure-sdk-for-js#36230). argv[2] says what it rejects with. Prints `closed` if it lives.
 */
import { pino } from 'pino';
import { closeGuarded } from '../../adapters/event-hubs/close-guard.js';

const reasons: Record<string, () => unknown> = {
  // rhea's error list, not decoded: what the SDK's stray promise rejected with in the replay test.
  'amqp-undecoded': () => ({
    value: [{ value: 'amqp:link:stolen' }, { value: 'an owner-level receiver is active' }],
  }),
  'amqp-decoded': () => ({ condition: 'amqp:link:stolen', description: 'an owner-level receiver is active' }),
  ours: () => new TypeError('a bug of the kit'),
};
const reason = reasons[process.argv[2] ?? ''];
if (!reason) throw new Error(`unknown reason ${process.argv[2]}`);

const logger = pino({ level: 'warn' }, process.stdout);
await closeGuarded(logger, async () => {
  void Promise.reject(reason());
  await new Promise((r) => setTimeout(r, 20));
});
// The stray rejection may come after the close: still within the grace.
setTimeout(() => void Promise.reject(reason()), 10);
await new Promise((r) => setTimeout(r, 60));
process.stdout.write('closed\n');
