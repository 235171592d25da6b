import { redact } from '../../src/core/redact.js';
import { defineTransport, importAdapterModule, SpecError } from '../../src/core/transport.js';
import { sqsOptionsSchema } from './options.js';
import { ambiguousQueueUrlMessage, sqsReadingOf } from './url.js';

const SDK = '@aws-sdk/client-sqs';

/**
 * Amazon SQS: `sqs:QUEUE_URL`, an AWS queue URL, or a queue URL on the endpoint the environment
 * names (the rules are `sqsReadingOf`'s). A URL that reads as a queue and as an HTTP ingress alike
 * is refused with both explicit forms.
 */
export const sqsTransport = defineTransport({
  name: 'sqs',
  sdk: SDK,
  options: { key: 'sqs', schema: sqsOptionsSchema },
  names(spec, role) {
    const reading = sqsReadingOf(spec);
    if (reading !== 'queue-or-http') return reading === 'queue';
    // An ingress listens on plain http only, so an https URL is a queue when read as a source.
    if (role === 'source' && !spec.startsWith('http://')) return true;
    // replay reads no HTTP ingress: such a URL can only be a queue.
    if (role === 'replay') return true;
    throw new SpecError(
      role === 'source'
        ? ambiguousQueueUrlMessage('--source', spec, 'listen on')
        : ambiguousQueueUrlMessage('--to', spec, 'POST to'),
    );
  },
  describe: redact,
  source: {
    forms:
      'an SQS queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE; a local one when AWS_ENDPOINT_URL_SQS is set) or sqs:QUEUE_URL',
    async open(spec, { logger, options }) {
      const { sqsSourceFromCli } = await importAdapterModule(SDK, 'source', () => import('./adapter.js'));
      return sqsSourceFromCli(spec, { logger, options });
    },
  },
  replay: {
    forms: 'an SQS queue URL or sqs:QUEUE_URL (typically the dead-letter queue; drained: deleted once done)',
    async open(spec, context) {
      const { sqsReplayReader } = await importAdapterModule(
        SDK,
        'replay',
        () => import('./replay-reader.js'),
      );
      return sqsReplayReader(spec, context);
    },
  },
  target: {
    forms: 'an SQS queue URL (a local one when AWS_ENDPOINT_URL_SQS is set) or sqs:QUEUE_URL',
    async open(spec) {
      const { sqsTargetFromCli } = await importAdapterModule(SDK, 'target', () => import('./sender.js'));
      return sqsTargetFromCli(spec);
    },
  },
});
