/**
 * `--to file:PATH` (fileTarget) writes each envelope as one JSONL line: each line of the file is
 * read back as an envelope of its own (`replay FILE`, `run --source file:`). An envelope that
 * spans lines is written compact only when the kit reads the same envelope from it, and verifies
 * it the same (checked here with the kit's own `verifyMessage`); otherwise the send fails.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createFileSource } from '../adapters/file/index.js';
import { fileTarget } from '../adapters/file/sender.js';
import { createTestEnvelope, TEST_SIGNING_SECRET } from '../src/consumer/testing.js';
import { Keyring } from '../src/core/secrets.js';
import { verifyMessage } from '../src/core/verify.js';
import { tempDir } from './support/harness.js';

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('phe-file-target-');
});
afterEach(() => dir.cleanup());

const keyring = new Keyring([{ id: 'current', secret: TEST_SIGNING_SECRET }]);
const never = new AbortController().signal;

/** Sends each text through a file target; the file's lines. */
async function written(texts: readonly string[]): Promise<string[]> {
  const path = join(dir.path, 'out.jsonl');
  const target = fileTarget(path);
  for (const body of texts)
    expect(await target.send({ body })).toEqual({ accepted: true, detail: 'appended' });
  await target.close();
  return readFileSync(path, 'utf8').split('\n').slice(0, -1);
}

describe('fileTarget: one envelope, one line', () => {
  it('a pretty-printed envelope (CRLF too) is written as one compact line: signed_at and body unchanged, it verifies, and reads back as one message', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const pretty = JSON.stringify(event.envelope, null, 2);
    const lines = await written([pretty, pretty.replaceAll('\n', '\r\n')]);
    expect(lines).toEqual([JSON.stringify(event.envelope), JSON.stringify(event.envelope)]);
    const [line] = lines;
    expect(JSON.parse(line as string)).toMatchObject({
      signed_at: event.envelope.signed_at,
      body: event.envelope.body,
      signature: event.envelope.signature,
    });
    expect(verifyMessage(line as string, { keyring })).toMatchObject({ eventId: event.eventId });

    const source = createFileSource({ path: join(dir.path, 'out.jsonl') });
    const read = await source.receive(10, never);
    expect(read?.map((m) => m.body)).toEqual(lines);
    await source.close();
  });

  it('an envelope on one line is written byte for byte (its whitespace and key order kept)', async () => {
    const event = createTestEnvelope('coach.nudge.created');
    const { body, ...rest } = event.envelope;
    const odd = ` ${JSON.stringify({ body, ...rest }, null, 1).replaceAll('\n', ' ')}\t`;
    expect(await written([odd])).toEqual([odd]);
  });

  it('what the parse keeps: signed_at written as 1.796e9 comes back as the integer it is (the HMAC input), and of duplicate keys the last, as the kit reads them', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const { signed_at, body, ...rest } = event.envelope;
    const exponent = `${(signed_at / 1e9).toFixed(9)}e9`;
    expect(Number(exponent)).toBe(signed_at);
    const text = [
      `{"body": ${JSON.stringify('{"decoy":true}')},`,
      `"signed_at": ${exponent},`,
      `${JSON.stringify(rest).slice(1, -1)},`,
      `"body": ${JSON.stringify(body)}}`,
    ].join('\n');
    expect(verifyMessage(text, { keyring })).toMatchObject({ eventId: event.eventId });

    const [line] = await written([text]);
    expect(JSON.parse(line as string)).toEqual({ ...rest, body, signed_at });
    expect(verifyMessage(line as string, { keyring })).toMatchObject({ eventId: event.eventId });
  });

  it('refuses, writing nothing, an envelope whose compact form would be longer (an exponent in an extra field) and multi-line text that is no envelope', async () => {
    const event = createTestEnvelope('daily.data.steps.created');
    const longer = `{"n": 1e20,\n${JSON.stringify(event.envelope).slice(1)}`;
    expect(verifyMessage(longer, { keyring })).toMatchObject({ eventId: event.eventId });
    const path = join(dir.path, 'out.jsonl');
    const target = fileTarget(path);
    for (const body of [longer, '{\n"not": "an envelope"}', 'not\njson']) {
      await expect(target.send({ body })).rejects.toMatchObject({
        code: 'ADAPTER_ERROR',
        message: expect.stringContaining(`cannot write to ${path} as one JSONL line`),
      });
    }
    await target.close();
    expect(existsSync(path)).toBe(false);
  });
});
