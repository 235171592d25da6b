import { redact } from '../../src/core/redact.js';
import { defineTransport, SpecError } from '../../src/core/transport.js';
import { standInOptionsSchema } from './options.js';

const PREFIX = 'stand-in:';

function directoryOf(spec: string, option: string): string {
  const directory = spec.slice(PREFIX.length);
  if (!directory) throw new SpecError(`${option} ${PREFIX} needs a directory`);
  return directory;
}

/** `stand-in:DIR`: a spool directory as a queue (the registry's stand-in transport, for tests). */
export const standInTransport = defineTransport({
  name: 'stand-in',
  options: { key: 'standIn', schema: standInOptionsSchema },
  names: (spec) => spec.startsWith(PREFIX),
  describe: redact,
  source: {
    forms: 'stand-in:DIR (a spool directory, one file per envelope)',
    async open(spec, { options }) {
      const { createStandInSource } = await import('./adapter.js');
      return createStandInSource({ ...options, directory: directoryOf(spec, '--source') });
    },
  },
  target: {
    forms: 'stand-in:DIR (one file per envelope)',
    async open(spec) {
      const { standInTarget } = await import('./sender.js');
      return standInTarget(directoryOf(spec, '--to'));
    },
  },
});
