/**
 * The Redis keys of one event, all built here: `<prefix>:<tenant>:dedupe:<event id>` holds the
 * lease or the done record, `<prefix>:<tenant>:claims:<event id>` counts its claims and
 * `<prefix>:<tenant>:owner:<event id>` names the last one. On a cluster the event id is a hash
 * tag (`{<event id>}`, see `hashTag`), so an event's keys share a slot and one script can touch
 * them all.
 */
export class RedisKeys {
  readonly #lease: string;
  readonly #claims: string;
  readonly #owner: string;
  readonly #hashTag: boolean;

  constructor(base: string, hashTagged: boolean) {
    this.#lease = `${base}:dedupe:`;
    this.#claims = `${base}:claims:`;
    this.#owner = `${base}:owner:`;
    this.#hashTag = hashTagged;
  }

  /** What every lease key starts with (logged once, on connecting). */
  get prefix(): string {
    return this.#lease;
  }

  /** The key that holds the event's lease (`c:<token>`) or done record (`d:<token>`). */
  lease(eventId: string): string {
    return this.#lease + this.#tag(eventId);
  }

  /** The event's lease, claims and owner keys, in the order the scripts take them. */
  of(eventId: string): [lease: string, claims: string, owner: string] {
    const tag = this.#tag(eventId);
    return [this.#lease + tag, this.#claims + tag, this.#owner + tag];
  }

  /** The key suffix of an event: the id itself, or on a cluster `{<id>}` (see `hashTag`). */
  #tag(eventId: string): string {
    return this.#hashTag ? hashTag(eventId) : eventId;
  }
}

/**
 * `{<id>}`: Redis Cluster hashes only what is between the first `{` and the next `}`, so the
 * event's two keys share a slot. An id starting with `}` would make that tag empty (then the whole
 * key is hashed), so such ids, and ids starting with `~` (to keep the mapping one-to-one), get a
 * `~` in front.
 */
export function hashTag(eventId: string): string {
  const first = eventId.charCodeAt(0);
  return first === 0x7d || first === 0x7e ? `{~${eventId}}` : `{${eventId}}`;
}
