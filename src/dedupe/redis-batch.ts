import type { Cluster, Redis } from 'ioredis';

/** A Lua script, sent by SHA; `keys` is how many of its arguments are keys. */
export interface LuaScript {
  readonly name: string;
  readonly keys: number;
  readonly lua: string;
  readonly sha: string;
}

/** A script's keys and arguments: strings and numbers, and keys as bytes where UTF-8 cannot carry them. */
export type ScriptArg = string | number | Buffer;

/**
 * A pipeline is sent once it holds this many calls, without waiting for the turn to end: Redis
 * runs the first calls while this process still verifies the rest of a large receive, and their
 * replies come back while it does. Measured at 64 in flight (docs/performance-log.md, "The Redis
 * path"): 8, 32 and 64 per pipeline gave 39.8k, 42–46k and 30k events/s.
 */
export const MAX_CALLS_PER_PIPELINE = 32;

interface PendingCall {
  readonly lua: LuaScript;
  readonly keysAndArgs: readonly ScriptArg[];
  readonly resolve: (reply: unknown) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Sends the script calls made during one turn of the event loop as one explicit pipeline (or
 * several of `MAX_CALLS_PER_PIPELINE`, the first sent as soon as it is full): one write and one
 * read on the connection, one promise from ioredis for the whole batch. Through
 * auto-pipelining each call is a command of its own, with its own promises: measured 3–4 µs of
 * CPU more per claim + complete pair at 64 in flight (docs/performance-log.md, "The Redis path").
 * One Redis only: on a cluster a pipeline must stay on one node, so a cluster keeps
 * auto-pipelining (which groups by node).
 *
 * A call whose script the server does not know (NOSCRIPT: a restart, a failover or SCRIPT FLUSH
 * since it was loaded) is sent again whole with EVAL, which also loads it for the next batch.
 * Any other failure rejects that call with `toError(cause)`.
 */
export class ScriptBatcher {
  readonly #redis: Redis;
  readonly #toError: (cause: unknown) => Error;
  #queue: PendingCall[] = [];
  #scheduled = false;

  constructor(redis: Redis, toError: (cause: unknown) => Error) {
    this.#redis = redis;
    this.#toError = toError;
  }

  run(lua: LuaScript, keysAndArgs: readonly ScriptArg[]): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ lua, keysAndArgs, resolve, reject });
      if (this.#queue.length >= MAX_CALLS_PER_PIPELINE) {
        this.#flush();
      } else if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(this.#flush);
      }
    });
  }

  readonly #flush = (): void => {
    this.#scheduled = false;
    const calls = this.#queue;
    if (calls.length === 0) return; // sent already, when it filled up
    this.#queue = [];
    const pipeline = this.#redis.pipeline();
    for (const call of calls) pipeline.evalsha(call.lua.sha, call.lua.keys, ...call.keysAndArgs);
    pipeline.exec().then(
      (replies) => this.#settle(calls, replies),
      (cause: unknown) => this.#rejectAll(calls, cause),
    );
  };

  #settle(calls: PendingCall[], replies: [Error | null, unknown][] | null): void {
    if (!replies) {
      this.#rejectAll(calls, new Error('pipeline was not executed'));
      return;
    }
    for (let i = 0; i < calls.length; i++) {
      const call = calls[i] as PendingCall;
      const [error, reply] = replies[i] ?? [new Error('no reply'), undefined];
      if (!error) call.resolve(reply);
      else if (error.message.startsWith('NOSCRIPT')) this.#evalWhole(call);
      else call.reject(this.#toError(error));
    }
  }

  #evalWhole(call: PendingCall): void {
    this.#redis
      .eval(call.lua.lua, call.lua.keys, ...call.keysAndArgs)
      .then(call.resolve, (cause: unknown) => {
        call.reject(this.#toError(cause));
      });
  }

  #rejectAll(calls: PendingCall[], cause: unknown): void {
    const error = this.#toError(cause);
    for (const call of calls) call.reject(error);
  }
}

/**
 * One script call on its own: EVALSHA (through ioredis's auto-pipelining). A server that has not
 * seen the script (started, restarted or failed over since, or SCRIPT FLUSH) answers NOSCRIPT;
 * then EVAL sends it whole, which also loads it there for the next EVALSHA.
 */
export async function runScript(
  redis: Redis | Cluster,
  lua: LuaScript,
  keysAndArgs: readonly ScriptArg[],
  toError: (cause: unknown) => Error,
): Promise<unknown> {
  try {
    return await redis.evalsha(lua.sha, lua.keys, ...keysAndArgs);
  } catch (cause) {
    if (!(cause instanceof Error && cause.message.startsWith('NOSCRIPT'))) throw toError(cause);
  }
  try {
    return await redis.eval(lua.lua, lua.keys, ...keysAndArgs);
  } catch (cause) {
    throw toError(cause);
  }
}
