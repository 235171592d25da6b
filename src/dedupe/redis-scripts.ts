import { createHash } from 'node:crypto';
import type { LuaScript } from './redis-batch.js';

// Values: `c:<token>` while claimed (key expires with the lease), `d:<token>` once done (key
// expires with the retention). Every script compares the owner token first, atomically.
// KEYS[2] counts the claims since the event was first claimed or last released; complete and
// release delete it, so every claim but the current one was abandoned (its lease ran out).
const CLAIM = `
if redis.call('SET', KEYS[1], 'c:' .. ARGV[1], 'NX', 'PX', ARGV[2]) then
  local n = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1, 0, n}
end
local v = redis.call('GET', KEYS[1])
if string.sub(v, 1, 2) == 'd:' then return {2, 0, 0} end
return {3, redis.call('PTTL', KEYS[1]), 0}`;

const EXTEND = `
if redis.call('GET', KEYS[1]) == 'c:' .. ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`;

const COMPLETE = `
if redis.call('GET', KEYS[1]) == 'c:' .. ARGV[1] then
  redis.call('SET', KEYS[1], 'd:' .. ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[2])
  return 1
end
return 0`;

const RELEASE = `
if redis.call('GET', KEYS[1]) == 'c:' .. ARGV[1] then
  redis.call('DEL', KEYS[2])
  return redis.call('DEL', KEYS[1])
end
return 0`;

// A claim that failed without an answer (a timeout, a lost connection) but may have run: if it
// took the lease, the lease is given back and the claim taken out of the count. It was never
// handled, so it must neither hold the event nor count as abandoned; earlier claims still count.
const UNCLAIM = `
if redis.call('GET', KEYS[1]) == 'c:' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  if redis.call('DECR', KEYS[2]) <= 0 then redis.call('DEL', KEYS[2]) end
  return 1
end
return 0`;

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
  claim: script('claim', 2, CLAIM),
  extend: script('extend', 1, EXTEND),
  complete: script('complete', 2, COMPLETE),
  release: script('release', 2, RELEASE),
  unclaim: script('unclaim', 2, UNCLAIM),
  forget: script('forget', 1, FORGET),
} as const;
