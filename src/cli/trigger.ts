import { isPartnerEventsError } from '../core/errors.js';
import { sampleEvent } from '../core/events/samples.js';
import type { EventType } from '../core/events/schemas.js';
import { validateEvent } from '../core/events/validate.js';
import { ENV_SECRET } from '../core/secrets.js';
import { parse, UsageError, writeLine } from './common.js';
import { catalogType, parseSetting, type SignedEvent, setPath, signEvent, signingSecret } from './publish.js';
import { openTarget, TARGET_FORMS } from './targets.js';
import { terminalSafe, terminalSafeLines } from './terminal-safe.js';

export const TRIGGER_USAGE = `Usage: partner-events trigger EVENT_TYPE [--to TARGET] [--set field=value ...] [options]

Sends one correctly signed sample event of a catalog type, as the service would publish it. Without
--to, prints the envelope (one JSON line) instead of sending it.

  --to TARGET          ${TARGET_FORMS}
  --set field=value    override a body field; dotted paths (target.type=card) and JSON values
                       (value=72, raw_data={"hr":[60,61]}); repeatable
  --secret-env NAME    sign with the secret in variable NAME (default ${ENV_SECRET}, the worker's)
  --signed-at UNIX     signed_at in Unix seconds (default now; an old one makes a stale event)
  --json               print { event_id, event_type, target, delivery, envelope }

Prints the event_id. Exit: 0 sent (an HTTP ingress answered 2xx), 1 not accepted or not sent,
2 usage or secret error.`;

export async function triggerCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    to: { type: 'string' },
    set: { type: 'string', multiple: true },
    'secret-env': { type: 'string' },
    'signed-at': { type: 'string' },
    json: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (values.help) {
    writeLine(TRIGGER_USAGE);
    return 0;
  }
  const [name, ...rest] = positionals;
  if (!name || rest.length > 0) throw new UsageError('trigger needs exactly one EVENT_TYPE');
  const signed = signedSample(catalogType(name), values);
  if (!values.to) {
    if (values.json) {
      const envelope: unknown = JSON.parse(signed.raw);
      writeLine(
        JSON.stringify({ event_id: signed.eventId, event_type: signed.eventType, target: null, envelope }),
      );
    } else {
      writeLine(signed.raw);
      process.stderr.write(`${terminalSafe(`${signed.eventType} ${signed.eventId}`)} (not sent: no --to)\n`);
    }
    return 0;
  }
  return sendTo(values.to, signed, values.json);
}

/** The type's sample event with the `--set` changes, signed at `--signed-at` (default now). */
function signedSample(
  type: EventType,
  values: { set?: string[]; 'secret-env'?: string; 'signed-at'?: string },
): SignedEvent {
  let signedAt = Math.floor(Date.now() / 1000);
  if (values['signed-at'] !== undefined) {
    signedAt = Number(values['signed-at']);
    if (!Number.isSafeInteger(signedAt) || signedAt < 0)
      throw new UsageError(`--signed-at must be Unix seconds, got "${values['signed-at']}"`);
  }
  const settings = (values.set ?? []).map(parseSetting);
  const secret = signingSecret(values['secret-env']);

  const event: Record<string, unknown> = { ...sampleEvent(type) };
  for (const { path, value } of settings) setPath(event, path, value);
  const validation = validateEvent(String(event.event_type), event);
  if (!validation.ok)
    process.stderr.write(`warning: sending it anyway: ${terminalSafe(validation.reason)}\n`);
  return signEvent(event, secret, signedAt);
}

/** Sends one signed event to `--to`; exit code 0 when the target accepted it. */
async function sendTo(to: string, signed: SignedEvent, json: boolean): Promise<number> {
  const target = await openTarget(to, { concurrency: 1 });
  try {
    const delivery = await target.send({
      body: signed.raw,
      eventId: signed.eventId,
      eventType: signed.eventType,
    });
    if (json) {
      writeLine(
        JSON.stringify({
          event_id: signed.eventId,
          event_type: signed.eventType,
          target: target.name,
          delivery: { accepted: delivery.accepted, detail: delivery.detail },
          envelope: JSON.parse(signed.raw) as unknown,
        }),
      );
    } else {
      // The detail quotes the target's answer (an ingress's `code`): not ours to print raw.
      writeLine(terminalSafe(signed.eventId));
      process.stderr.write(
        `${terminalSafe(`${signed.eventType} ${signed.eventId} -> ${target.name}: ${delivery.detail}`)}\n`,
      );
    }
    return delivery.accepted ? 0 : 1;
  } catch (error) {
    const handOff = ['ADAPTER_ERROR', 'FORWARD_ANSWER_INCOMPLETE'];
    if (!isPartnerEventsError(error) || !handOff.includes(error.code)) throw error;
    process.stderr.write(`partner-events trigger: [${error.code}] ${terminalSafeLines(error.message)}\n`);
    return 1;
  } finally {
    await target.close();
  }
}
