/** A key as sent to Redis: a string (sent as UTF-8), or the bytes of one that UTF-8 cannot carry. */
export type RedisKeyBytes = string | Buffer;

/**
 * The Redis keys of one event, all built here: `<prefix>:<tenant>:dedupe:<event id>` holds the
 * lease or the done record, `<prefix>:<tenant>:claims:<event id>` counts its claims and
 * `<prefix>:<tenant>:owner:<event id>` names the last one. On a cluster the event id is a hash
 * tag (`{<event id>}`, see `hashTag`), so an event's keys share a slot and one script can touch
 * them all. On one Redis, the key of an id that is not well-formed UTF-16 goes as its WTF-8 bytes
 * (see `wtf8`); on a cluster such an id has a hash tag of its own (see `hashTag`).
 */
export class RedisKeys {
  readonly #lease: string;
  readonly #claims: string;
  readonly #owner: string;
  readonly #hashTag: boolean;
  readonly #wellFormedBase: boolean;

  constructor(base: string, hashTagged: boolean) {
    this.#lease = `${base}:dedupe:`;
    this.#claims = `${base}:claims:`;
    this.#owner = `${base}:owner:`;
    this.#hashTag = hashTagged;
    this.#wellFormedBase = base.isWellFormed();
  }

  /** What every lease key starts with (logged once, on connecting). */
  get prefix(): string {
    return this.#lease;
  }

  /** The key that holds the event's lease (`c:<token>`) or done record (`d:<token>`). */
  lease(eventId: string): RedisKeyBytes {
    const key = this.#lease + this.#tag(eventId);
    return this.#wellFormed(eventId) ? key : wtf8(key);
  }

  /** The event's lease, claims and owner keys, in the order the scripts take them. */
  of(eventId: string): [lease: RedisKeyBytes, claims: RedisKeyBytes, owner: RedisKeyBytes] {
    const tag = this.#tag(eventId);
    const keys: [string, string, string] = [this.#lease + tag, this.#claims + tag, this.#owner + tag];
    return this.#wellFormed(eventId) ? keys : [wtf8(keys[0]), wtf8(keys[1]), wtf8(keys[2])];
  }

  /** The key suffix of an event: the id itself, or on a cluster `{<id>}` (see `hashTag`). */
  #tag(eventId: string): string {
    return this.#hashTag ? hashTag(eventId) : eventId;
  }

  /** Whether the event's keys are well-formed text (a hash tag always is). */
  #wellFormed(eventId: string): boolean {
    return this.#wellFormedBase && (this.#hashTag || eventId.isWellFormed());
  }
}

/**
 * `{<id>}`: Redis Cluster hashes only what is between the first `{` and the next `}`, so the
 * event's keys share a slot. An id starting with `}` would make that tag empty (then the whole
 * key is hashed), so such ids, and ids starting with `~` (to keep the mapping one-to-one), get a
 * `~` in front. An id that is not well-formed UTF-16 (a lone surrogate) is `{~u:<hex>}`, the hex
 * of its UTF-16 code units, 4 digits each: no other id gives a tag starting `{~u`, and the tag is
 * text, which ioredis hashes as Redis does (it hashes a key of bytes as text when it groups a
 * cluster's calls, so WTF-8 bytes in the tag would be grouped by a wrong slot).
 */
export function hashTag(eventId: string): string {
  if (!eventId.isWellFormed()) return `{~u:${utf16Hex(eventId)}}`;
  const first = eventId.charCodeAt(0);
  return first === 0x7d || first === 0x7e ? `{~${eventId}}` : `{${eventId}}`;
}

function utf16Hex(text: string): string {
  let hex = '';
  for (let i = 0; i < text.length; i++) hex += text.charCodeAt(i).toString(16).padStart(4, '0');
  return hex;
}

/**
 * The bytes of `text` in WTF-8: UTF-8, except that a lone surrogate, which UTF-8 cannot carry, is
 * written as the three bytes its code point would take (ED A0 80 for U+D800). A string sent to
 * Redis as UTF-8 has each lone surrogate replaced by U+FFFD, so the ids `evt_\ud800`,
 * `evt_\ud801` and `evt_\ufffd` (a JSON body may spell them so) would share one key. WTF-8 is
 * one-to-one, is UTF-8 itself for well-formed text (whose keys therefore stay as they were), and
 * its bytes for a lone surrogate never occur in UTF-8: no other id's key can equal them.
 */
export function wtf8(text: string): Buffer {
  const parts: Buffer[] = [];
  let run = '';
  // By code point: a surrogate pair comes whole, a lone surrogate on its own.
  for (const char of text) {
    const code = char.codePointAt(0) as number;
    if (code < 0xd800 || code > 0xdfff) {
      run += char;
      continue;
    }
    const bytes = [0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f)];
    parts.push(Buffer.from(run, 'utf8'), Buffer.from(bytes));
    run = '';
  }
  parts.push(Buffer.from(run, 'utf8'));
  return Buffer.concat(parts);
}
