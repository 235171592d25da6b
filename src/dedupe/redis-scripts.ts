import { createHash } from 'node:crypto';
import type { LuaScript } from './redis-batch.js';

// Keys of one event (one hash slot on a cluster):
// KEYS[1] `c:<token>` while claimed (the key expires with the lease), `d:<token>` once done (it
//   expires with the retention).
// KEYS[2] counts the claims since the event was first claimed or last released; complete and
//   release delete it, so every claim but the current one was abandoned (its lease ran out).
// KEYS[3] the last claim, `<its number in KEYS[2]>:<token>`, kept as long as KEYS[2] (a day past
//   the lease): a lease that ran out with nobody claiming the event since is still that token's,
//   as on the other stores. The number keeps it exact beside a worker of an earlier version,
//   whose claims count in KEYS[2] but do not write KEYS[3].
// Every script but claim acts only for the owner token, checked first, atomically.

// Prefixed to the scripts that act for an owner: KEYS[1] held by ARGV[1], or gone (its lease ran
// out) with ARGV[1]'s claim still the last one.
const OWNED = `
local v = redis.call('GET', KEYS[1])
local owned = v == 'c:' .. ARGV[1]
if not v then owned = redis.call('GET', KEYS[3]) == (redis.call('GET', KEYS[2]) or '') .. ':' .. ARGV[1] end
`;

const CLAIM = `
if redis.call('SET', KEYS[1], 'c:' .. ARGV[1], 'NX', 'PX', ARGV[2]) then
  local n = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('SET', KEYS[3], n .. ':' .. ARGV[1], 'PX', ARGV[3])
  return {1, 0, n}
end
local v = redis.call('GET', KEYS[1])
if string.sub(v, 1, 2) == 'd:' then return {2, 0, 0} end
return {3, redis.call('PTTL', KEYS[1]), 0}`;

// Sets the lease (taking it back if it ran out), and keeps the count a day past its new end.
const EXTEND = `${OWNED}
if not owned then return 0 end
redis.call('SET', KEYS[1], 'c:' .. ARGV[1], 'PX', ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return 1`;

const COMPLETE = `${OWNED}
if not owned then return 0 end
redis.call('SET', KEYS[1], 'd:' .. ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3])
return 1`;

const RELEASE = `${OWNED}
if not owned then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1`;

// A claim that failed without an answer (a timeout, a lost connection) but may have run: if it
// took the lease, the lease is given back and the claim taken out of the count. It was never
// handled, so it must neither hold the event nor count as abandoned; earlier claims still count.
const UNCLAIM = `${OWNED}
if not owned then return 0 end
redis.call('DEL', KEYS[1], KEYS[3])
if redis.call('DECR', KEYS[2]) <= 0 then redis.call('DEL', KEYS[2]) end
return 1`;

// Only a done record: a live lease belongs to a worker that is handling the event right now.
const FORGET = `
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 2) == 'd:' then return redis.call('DEL', KEYS[1]) end
return 0`;

function script(name: string, keys: number, lua: string): LuaScript {
  return { name, keys, lua, sha: createHash('sha1').update(lua).digest('hex') };
}

/** The store's scripts (the bench's floor sends the very same). */
export const REDIS_SCRIPTS = {
  claim: script('claim', 3, CLAIM),
  extend: script('extend', 3, EXTEND),
  complete: script('complete', 3, COMPLETE),
  release: script('release', 3, RELEASE),
  unclaim: script('unclaim', 3, UNCLAIM),
  forget: script('forget', 1, FORGET),
} as const;
