import { InvalidArgumentError } from '../client/errors.js';
import { StaleTokenError } from './errors.js';
import { fencedBy, type FencingHandle } from './handle.js';

/** An `ioredis` client (`Redis` or `Cluster`), typed by the one method the fence uses. */
export interface IoRedisLike {
  eval(script: string, numKeys: number, ...keysAndArgs: (string | Buffer)[]): Promise<unknown>;
}

/** A node-redis (`redis` v4 or later) client, typed by what the fence uses. */
export interface NodeRedisLike {
  readonly isOpen: boolean;
  eval(script: string, options: { keys: string[]; arguments: (string | Buffer)[] }): Promise<unknown>;
}

/** Options of {@link RedisFence}. */
export interface RedisFenceOptions {
  /** Appended to a resource's name to make its fence key, which holds the highest token. Default `:fence`. */
  suffix?: string;
}

// The prologue and epilogue of every fenced script. The fence key and the token ride last in KEYS
// and ARGV and are taken off first, so the body sees KEYS and ARGV as its caller passed them.
// Tokens are canonical decimal strings (bigints): Lua numbers are doubles, exact only below 2^53,
// so they are compared as strings, by length first.
const PROLOGUE = `local fence = table.remove(KEYS)
local token = table.remove(ARGV)
local stored = redis.call('GET', fence)
if stored then
  if not string.match(stored, '^[1-9][0-9]*$') then
    return redis.error_reply('ERR fence key ' .. fence .. ' holds no fencing token: it is not the fence\\'s to use')
  end
  if #stored > #token or (#stored == #token and stored > token) then return {0, stored} end
end
local result = (function()
`;
const EPILOGUE = `
end)()
redis.call('SET', fence, token)
return {1, result}`;

const SET = `${PROLOGUE}return redis.call('SET', KEYS[1], ARGV[1])${EPILOGUE}`;
const DEL = `${PROLOGUE}return redis.call('DEL', KEYS[1])${EPILOGUE}`;

/**
 * Fencing in Redis: each write is one Lua script that compares the handle's fencing token with the
 * highest stored for the resource, refuses with {@link StaleTokenError} when it is lower, and
 * otherwise makes the write and stores the token, atomically (Redis runs a script alone). An equal
 * token is the same holder writing again, and is allowed.
 *
 * The highest token of resource `r` lives in the string key `r:fence` (see
 * {@link RedisFenceOptions.suffix}); it outlives a `del()`, so that a stale holder cannot write the
 * key back. Delete it yourself once the resource is retired for good. In Redis Cluster, give the key
 * a hash tag (`{account:7}`) so that `{account:7}:fence` lives in the same slot.
 *
 * Redis does not roll back a script that fails midway: a custom script ({@link RedisFence.eval})
 * that raises an error after writing leaves its writes, but the token is stored only when the body
 * returns.
 *
 * @example
 * ```ts
 * const fence = new RedisFence(redis); // an ioredis or node-redis client
 * await fence.set(lock, 'config/leader-url', 'http://10.0.0.7:8080');
 * ```
 */
export class RedisFence {
  private readonly suffix: string;

  constructor(
    private readonly redis: IoRedisLike | NodeRedisLike,
    options: RedisFenceOptions = {},
  ) {
    if (typeof redis !== 'object' || redis === null || typeof (redis as Partial<IoRedisLike>).eval !== 'function') {
      throw new InvalidArgumentError(
        'RedisFence: give it an ioredis client (Redis or Cluster) or a node-redis client (an object with eval())',
      );
    }
    const suffix = options.suffix ?? ':fence';
    if (typeof suffix !== 'string' || suffix.length === 0)
      throw new InvalidArgumentError('RedisFence: suffix must be a non-empty string (default ":fence")');
    this.suffix = suffix;
  }

  /** The key holding the highest token of `resource`. */
  fenceKey(resource: string): string {
    return `${resource}${this.suffix}`;
  }

  /** `SET key value`, fenced by `handle`'s token on `key`. Resolves with Redis' answer, `'OK'`. */
  async set(handle: FencingHandle, key: string, value: string | Buffer): Promise<unknown> {
    return this.run(handle, 'RedisFence.set', key, SET, [key], [checkValue(value)]);
  }

  /** `DEL key`, fenced by `handle`'s token on `key` (the fence key stays). Resolves with the number of keys deleted. */
  async del(handle: FencingHandle, key: string): Promise<unknown> {
    return this.run(handle, 'RedisFence.del', key, DEL, [key], []);
  }

  /**
   * Runs your Lua `script` (a body that may `return`, reading `KEYS` and `ARGV` as given) fenced by
   * `handle`'s token on `resource`, all in one script, and resolves with what it returns. Pass every
   * key it touches in `keys` (Redis Cluster requires them in the resource's slot).
   */
  async eval(
    handle: FencingHandle,
    resource: string,
    script: string,
    keys: readonly string[] = [],
    args: readonly (string | Buffer | number | bigint)[] = [],
  ): Promise<unknown> {
    if (typeof script !== 'string' || script.trim() === '')
      throw new InvalidArgumentError('RedisFence.eval: script must be a Lua body, e.g. "return redis.call(\'INCR\', KEYS[1])"');
    if (!Array.isArray(keys) || !keys.every((k) => typeof k === 'string'))
      throw new InvalidArgumentError('RedisFence.eval: keys must be an array of strings');
    if (!Array.isArray(args)) throw new InvalidArgumentError('RedisFence.eval: args must be an array');
    return this.run(
      handle,
      'RedisFence.eval',
      resource,
      `${PROLOGUE}${script}${EPILOGUE}`,
      [...keys],
      args.map((a) => (typeof a === 'bigint' || typeof a === 'number' ? String(a) : a)),
    );
  }

  private async run(
    handle: FencingHandle,
    what: string,
    resource: string,
    script: string,
    keys: string[],
    args: (string | Buffer)[],
  ): Promise<unknown> {
    const fenced = fencedBy(handle, what);
    if (typeof resource !== 'string' || resource.length === 0)
      throw new InvalidArgumentError(`${what}: the key (resource) must be a non-empty string`);
    fenced.assert(); // a holder already known lost needs no round trip to be refused
    keys.push(this.fenceKey(resource));
    args.push(String(fenced.token));
    const r = this.redis;
    const reply = isNodeRedis(r) ? await r.eval(script, { keys, arguments: args }) : await r.eval(script, keys.length, ...keys, ...args);
    const [applied, value] = reply as [number, unknown];
    if (applied === 0) {
      fenced.refused('redis');
      throw new StaleTokenError(resource, fenced.token, BigInt(String(value)));
    }
    return value === undefined ? null : value;
  }
}

function isNodeRedis(r: IoRedisLike | NodeRedisLike): r is NodeRedisLike {
  return typeof (r as Partial<NodeRedisLike>).isOpen === 'boolean';
}

function checkValue(value: unknown): string | Buffer {
  if (typeof value === 'string' || Buffer.isBuffer(value)) return value;
  throw new InvalidArgumentError('RedisFence.set: value must be a string or a Buffer');
}
