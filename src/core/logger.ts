import { type DestinationStream, type Logger, type LoggerOptions, pino } from 'pino';
import { ConfigError } from './errors.js';

/**
 * Paths pino blanks out wherever they appear in a log object. The kit never logs a secret; this
 * is the second line of defence for objects that users or adapters pass in.
 */
export const REDACT_PATHS = [
  'secret',
  '*.secret',
  'secrets',
  '*.secrets',
  'signingSecret',
  '*.signingSecret',
  'connectionString',
  '*.connectionString',
  'password',
  '*.password',
  'headers.authorization',
];

export function createLogger(options: LoggerOptions = {}, destination?: DestinationStream): Logger {
  const level = options.level ?? process.env.LOG_LEVEL ?? 'info';
  if (level !== 'silent' && !(level in pino.levels.values)) {
    throw new ConfigError(
      `log level "${level}" is not one of fatal, error, warn, info, debug, trace, silent (LOG_LEVEL)`,
    );
  }
  const settings: LoggerOptions = {
    name: 'partner-events',
    level,
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    ...options,
  };
  return destination ? pino(settings, destination) : pino(settings);
}

/** A logger that drops everything (benchmarks, quiet tests). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
