/**
 * What the Event Hubs suite needs from a server, so the same tests run against our in-process
 * broker (the default, `event-hubs-broker.ts`) or the official emulator in Docker
 * (`event-hubs-emulator.ts`, opt-in with PARTNER_EVENTS_TEST_EVENTHUBS=emulator).
 */

/** One event as the server stored it. */
export interface HubEvent {
  readonly sequenceNumber: number;
  /** As the SDK reports it (a string in SDK v6). */
  readonly offset: string;
  /** ms since the epoch. */
  readonly enqueuedTime: number;
  /** The data section's bytes. */
  readonly body: Uint8Array;
  readonly applicationProperties: Readonly<Record<string, unknown>> | undefined;
}

/** A hub of its own for one test: empty when handed out. */
export interface TestHub {
  readonly name: string;
  readonly partitionIds: readonly string[];
  /** A connection string with this hub as its `EntityPath`. */
  readonly connectionString: string;
  /** Appends an event as raw UTF-8 bytes (what .NET, Python and Java publishers send). */
  publish(
    partitionId: string,
    body: string | Uint8Array,
    applicationProperties?: Record<string, unknown>,
  ): Promise<void>;
  /** Every event in a partition, oldest first (read without disturbing the consumers under test). */
  events(partitionId: string): Promise<readonly HubEvent[]>;
}

export interface EventHubsTestServer {
  /** `broker` (ours) or `emulator` (the official one). */
  readonly kind: 'broker' | 'emulator';
  /** A new, empty hub with this many partitions and the `$Default` consumer group. */
  createHub(partitions: number): Promise<TestHub>;
  stop(): Promise<void>;
}
