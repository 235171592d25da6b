import { z } from 'zod';
import { ConfigError } from './errors.js';

/**
 * Validates an adapter's options with its schema (`adapters/<name>/options.ts`), filling in the
 * defaults; a `ConfigError` names each bad field. `what` names the adapter in the message, e.g.
 * `SQS adapter`.
 */
export function parseAdapterOptions<S extends z.ZodType>(
  schema: S,
  input: unknown,
  what: string,
): z.output<S> {
  const result = schema.safeParse(input);
  if (!result.success) {
    throw new ConfigError(`invalid ${what} options:\n${z.prettifyError(result.error)}`, {
      details: { issues: result.error.issues },
    });
  }
  return result.data;
}
