/**
 * The set-up the SQS-fed suites share: one fauxqs for the whole file, a client of it and a temp
 * folder, started in `beforeAll` and gone in `afterAll`.
 */
import type { SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll } from 'vitest';
import { type FauxqsServer, fauxqsClient, startFauxqs } from '../../support/fauxqs.js';
import { tempDir } from '../../support/harness.js';

export interface FauxqsFile {
  readonly endpoint: string;
  /** A client that talks to fauxqs directly. */
  readonly client: SQSClient;
  /** The file's temp folder. */
  readonly dir: string;
}

/** Registers the file's hooks; read the fields inside tests and hooks (they throw before `beforeAll`). */
export function fauxqsPerFile(dirPrefix: string): FauxqsFile {
  let started: { fauxqs: FauxqsServer; client: SQSClient; dir: ReturnType<typeof tempDir> } | undefined;
  beforeAll(async () => {
    const fauxqs = await startFauxqs();
    started = { fauxqs, client: fauxqsClient(fauxqs.endpoint), dir: tempDir(dirPrefix) };
  });
  afterAll(async () => {
    started?.client.destroy();
    await started?.fauxqs.close();
    started?.dir.cleanup();
  });
  const get = () => {
    if (!started) throw new Error('fauxqs is not started yet: read it inside a test or hook');
    return started;
  };
  return {
    get endpoint() {
      return get().fauxqs.endpoint;
    },
    get client() {
      return get().client;
    },
    get dir() {
      return get().dir.path;
    },
  };
}
