/**
 * The transport registry: one line per adapter, in the order a `--source` / `--to` value is
 * matched (the first transport that names it opens it; SQS before the HTTP ingress, whose
 * `http://` would otherwise take a local queue URL). The CLI opens sources and targets through it,
 * the sidecar config takes each transport's options section from it. Each entry is a descriptor
 * module that loads its adapter, and so its SDK, only when opened: see
 * docs/adapters/writing-an-adapter.md.
 */
import { eventHubsTransport } from '../adapters/event-hubs/cli.js';
import { fileTransport } from '../adapters/file/cli.js';
import { httpTransport } from '../adapters/http/cli.js';
import { sqsTransport } from '../adapters/sqs/cli.js';
import { storageQueueTransport } from '../adapters/storage-queue/cli.js';
import { redact } from './core/redact.js';
import type { SpecRole, TransportDescriptor } from './core/transport.js';

export const TRANSPORTS = [
  fileTransport,
  sqsTransport,
  storageQueueTransport,
  eventHubsTransport,
  httpTransport,
] as const satisfies readonly TransportDescriptor[];

export type Transport = (typeof TRANSPORTS)[number];

/** The transport a spec names in `role`, if any (a `SpecError` when it is ambiguous). */
export function transportFor(spec: string, role: SpecRole): TransportDescriptor | undefined {
  return TRANSPORTS.find((transport: TransportDescriptor) => transport[role] && transport.names(spec, role));
}

/** Every form a `--source` (or `--to`) value may take, for usage texts and error messages. */
export function specForms(role: SpecRole): string {
  return TRANSPORTS.flatMap((transport: TransportDescriptor) => transport[role]?.forms ?? []).join(', ');
}

/** A spec as it may be printed: its transport's `describe`, else `redact`ed like any text. */
export function describeSpec(spec: string, role: SpecRole): string {
  let transport: TransportDescriptor | undefined;
  try {
    transport = transportFor(spec, role);
  } catch {
    transport = undefined; // an ambiguous spec is printed all the same
  }
  return transport ? transport.describe(spec) : redact(spec);
}
