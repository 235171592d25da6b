import { type DestinationStream, type Logger, type LoggerOptions, pino } from 'pino';

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
  const settings: LoggerOptions = {
    name: 'partner-events',
    level: process.env.LOG_LEVEL ?? 'info',
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    ...options,
  };
  return destination ? pino(settings, destination) : pino(settings);
}

/** A logger that drops everything (benchmarks, quiet tests). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
