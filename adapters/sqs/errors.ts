import type { BatchResultErrorEntry } from '@aws-sdk/client-sqs';
import { AdapterError } from '../../src/core/errors.js';

/** The fields of an AWS SDK v3 service error that say whose fault it was. */
interface SdkErrorShape {
  readonly name?: string;
  readonly message?: string;
  readonly $fault?: 'client' | 'server';
  readonly $retryable?: unknown;
  readonly $metadata?: { readonly httpStatusCode?: number };
}

/** Client-side codes that still heal with time (SQS sends some throttling as 4xx). */
const TRANSIENT_CODES = new Set([
  'ThrottlingException',
  'RequestThrottled',
  'KmsThrottled',
  'OverLimit',
  'ServiceUnavailable',
  'InternalError',
  'RequestTimeout',
  'TimeoutError',
]);

/** Codes meaning the receipt handle no longer names an in-flight message of ours. */
const NOT_IN_FLIGHT_CODES = new Set([
  'MessageNotInflight',
  'ReceiptHandleIsInvalid',
  'InvalidParameterValue',
]);

/**
 * Sender faults about a sent message's content (its size, its characters): the same message is
 * refused every time, so sending it again cannot help.
 */
const REFUSED_CONTENT_CODES = new Set(['InvalidParameterValue', 'InvalidMessageContents']);

function shape(error: unknown): SdkErrorShape {
  return typeof error === 'object' && error !== null ? (error as SdkErrorShape) : {};
}

/**
 * Whether repeating the request may succeed: throttling, 5xx, and failures with no HTTP answer
 * at all (network, timeouts). A 4xx such as AccessDenied or QueueDoesNotExist is final.
 */
export function isRetryable(error: unknown): boolean {
  const e = shape(error);
  if (e.$retryable) return true;
  if (e.name && TRANSIENT_CODES.has(e.name)) return true;
  if (e.$fault === 'server') return true;
  const status = e.$metadata?.httpStatusCode;
  return status === undefined || status >= 500;
}

/** An `AdapterError` naming the SQS action, the queue and the AWS error code. */
export function sqsFailure(action: string, queue: string, error: unknown): AdapterError {
  const e = shape(error);
  const code = e.name ?? 'Error';
  return new AdapterError(`${action} on ${queue} failed: ${code}: ${e.message ?? String(error)}`, {
    cause: error,
    details: {
      action,
      queue,
      aws_code: code,
      http_status: e.$metadata?.httpStatusCode ?? null,
      retryable: isRetryable(error),
    },
  });
}

/** One entry of a batch call failed (the call itself succeeded). */
export class BatchEntryError extends AdapterError {
  readonly awsCode: string;
  readonly senderFault: boolean;
  constructor(action: string, queue: string, entry: BatchResultErrorEntry) {
    const awsCode = entry.Code ?? 'Unknown';
    super(`${action} on ${queue} failed for one message: ${awsCode}: ${entry.Message ?? ''}`.trimEnd(), {
      details: { action, queue, aws_code: awsCode, sender_fault: entry.SenderFault ?? false },
    });
    this.name = 'BatchEntryError';
    this.awsCode = awsCode;
    this.senderFault = entry.SenderFault ?? false;
  }
}

/** Whether a failure (batch entry or whole request) is worth another attempt. */
export function isRetryableFailure(error: unknown): boolean {
  if (error instanceof BatchEntryError) return !error.senderFault || TRANSIENT_CODES.has(error.awsCode);
  const cause = error instanceof AdapterError ? error.cause : error;
  return isRetryable(cause);
}

/**
 * Whether a failed visibility change only says the message is no longer ours: its visibility
 * expired and it was received again, or it was deleted. For a retry that is the wanted result.
 */
export function isNotInFlight(error: unknown): boolean {
  if (error instanceof BatchEntryError) return NOT_IN_FLIGHT_CODES.has(error.awsCode);
  const cause = error instanceof AdapterError ? error.cause : error;
  const name = shape(cause).name;
  return name !== undefined && NOT_IN_FLIGHT_CODES.has(name);
}

/**
 * Whether SQS refused a sent message for its content (`InvalidParameterValue`: over the queue's
 * `MaximumMessageSize`; `InvalidMessageContents`: characters it does not allow). The code comes as
 * the SDK names it: bare from AWS, or `AWS.SimpleQueueService.`-prefixed from some emulators.
 */
export function isRefusedContent(error: unknown): boolean {
  const cause = error instanceof AdapterError ? error.cause : error;
  const e = shape(cause);
  const code = e.name?.replace(/^AWS\.SimpleQueueService\./, '');
  const status = e.$metadata?.httpStatusCode;
  const senderFault = e.$fault === 'client' || (status !== undefined && status >= 400 && status < 500);
  return senderFault && code !== undefined && REFUSED_CONTENT_CODES.has(code);
}
