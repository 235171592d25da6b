import type { AddressInfo } from 'node:net';
import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  SQSClient,
  type SQSClientConfig,
} from '@aws-sdk/client-sqs';
import { buildApp } from 'fauxqs';

export interface FauxqsServer {
  /** `http://127.0.0.1:PORT`: pass it as `endpoint` to every SQSClient. */
  readonly endpoint: string;
  close(): Promise<void>;
}

/**
 * An in-process fauxqs (SQS emulator) on a free loopback port (or `port`: the one a closed server
 * had, to bring the emulator back after an outage; empty, since it keeps its queues in memory).
 * Never its CLI: that binds 0.0.0.0. Closing it ends open long polls and connections.
 */
export async function startFauxqs(options: { port?: number } = {}): Promise<FauxqsServer> {
  const app = buildApp({ logger: false });
  await app.listen({ host: '127.0.0.1', port: options.port ?? 0 });
  const { port } = app.server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    close: () => app.close(),
  };
}

/**
 * A client for the emulator: any credentials, a region, and always the endpoint. The queue URLs
 * fauxqs hands out name a host that does not resolve (`sqs.us-east-1.localhost:PORT`); they are
 * used as they are, because fauxqs looks queues up by that exact URL, and with an `endpoint`
 * set the SDK sends every request to the endpoint and never to the URL's host.
 */
export function fauxqsClient(endpoint: string, config: SQSClientConfig = {}): SQSClient {
  return new SQSClient({
    endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    ...config,
  });
}

/** The environment a CLI child needs to reach the emulator (the AWS SDK's standard variables). */
export function fauxqsEnv(endpoint: string): NodeJS.ProcessEnv {
  return {
    AWS_ENDPOINT_URL_SQS: endpoint,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
  };
}

let queueSeq = 0;

/** A fresh queue (unique name per call; `.fifo` prefixes make FIFO queues). */
export async function createQueue(
  client: SQSClient,
  prefix = 'q',
  attributes: Record<string, string> = {},
): Promise<{ url: string; name: string }> {
  const fifo = prefix.endsWith('.fifo');
  const base = fifo ? prefix.slice(0, -'.fifo'.length) : prefix;
  const name = `${base}-${process.pid}-${++queueSeq}${fifo ? '.fifo' : ''}`;
  const { QueueUrl } = await client.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
  if (!QueueUrl) throw new Error(`fauxqs returned no URL for queue ${name}`);
  return { url: QueueUrl, name };
}

/**
 * A fresh queue on an emulator of its own: the client, the queue, the environment a CLI child
 * needs to reach it; `close()` destroys the client and stops the emulator.
 */
export async function startFauxqsQueue(prefix: string) {
  const fauxqs = await startFauxqs();
  const client = fauxqsClient(fauxqs.endpoint);
  const close = async () => {
    client.destroy();
    await fauxqs.close();
  };
  try {
    const queue = await createQueue(client, prefix);
    return { endpoint: fauxqs.endpoint, client, queue, env: fauxqsEnv(fauxqs.endpoint), close };
  } catch (error) {
    await close();
    throw error;
  }
}

/** Visible / in flight / delayed message counts of a queue. */
export async function sqsCounts(
  client: SQSClient,
  queueUrl: string,
): Promise<{ visible: number; inFlight: number; delayed: number }> {
  const { Attributes = {} } = await client.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: [
        'ApproximateNumberOfMessages',
        'ApproximateNumberOfMessagesNotVisible',
        'ApproximateNumberOfMessagesDelayed',
      ],
    }),
  );
  return {
    visible: Number(Attributes.ApproximateNumberOfMessages ?? -1),
    inFlight: Number(Attributes.ApproximateNumberOfMessagesNotVisible ?? -1),
    delayed: Number(Attributes.ApproximateNumberOfMessagesDelayed ?? -1),
  };
}
