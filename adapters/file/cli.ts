import { existsSync, statSync } from 'node:fs';
import { redact } from '../../src/core/redact.js';
import { defineTransport, SpecError } from '../../src/core/transport.js';

const PREFIX = 'file:';

/** `file:PATH`: a JSONL file of envelopes (or dead-letter records) to read, or to append to. */
export const fileTransport = defineTransport({
  name: 'file',
  names: (spec) => spec.startsWith(PREFIX),
  describe: redact,
  source: {
    forms: 'file:PATH',
    async open(spec) {
      const path = spec.slice(PREFIX.length);
      if (!path) throw new SpecError('--source file: needs a path');
      if (!existsSync(path)) throw new SpecError(`--source ${spec}: no such file`);
      // As replay refuses one (exit 2): a usage error, not a read that fails once running (exit 1).
      if (statSync(path).isDirectory()) {
        throw new SpecError(`--source ${spec} is a directory: run reads one JSONL file`);
      }
      const { createFileSource } = await import('./adapter.js');
      return createFileSource({ path });
    },
  },
  replay: {
    forms: 'file:PATH or a bare PATH (dead-letter records or envelopes, JSONL)',
    async open(spec, context) {
      const path = spec.slice(PREFIX.length);
      const { createFileReplayReader } = await import('./replay-reader.js');
      return createFileReplayReader(path, context.max);
    },
  },
  target: {
    forms: 'file:PATH (appends one JSONL line)',
    async open(spec) {
      const path = spec.slice(PREFIX.length);
      if (!path) throw new SpecError('--to file: needs a path');
      const { fileTarget } = await import('./sender.js');
      return fileTarget(path);
    },
  },
});
