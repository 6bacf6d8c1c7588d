import { InvalidArgumentError } from '../client/errors.js';
import { etcdIdOf } from './etcd-id.js';
import { ForeignTokenError, StaleTokenError } from './errors.js';
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

// Every fenced write is one script: `fenced(body)`. The body comes first, as a function compiled
// before the fence's own locals exist, so it cannot see them (Redis 7 refuses a script's unknown
// globals, and its global tables are read-only). It is called last, once the fence has checked and
// stored the token: nothing the body does (an assignment, an error, a changed global) can change
// what the fence decided. The fence key, then the token and the etcd id, ride last in KEYS and ARGV
// and are taken off before the body runs, so the body sees KEYS and ARGV as its caller passed them.
// The fence key holds "<token> <etcd id>", or "<token>" as an earlier version wrote it (adopted by
// the first etcd to write with a token not lower). Tokens are canonical decimal strings (bigints):
// Lua numbers are doubles, exact only below 2^53, so they are compared as strings, by length first.
// The answer: {1, result}, {0, stored token} (stale) or {2, stored token, stored etcd id} (foreign).
const fenced = (body: string): string => `local body = function()
${body}
end
local fence = table.remove(KEYS)
local etcd = table.remove(ARGV)
local token = table.remove(ARGV)
local stored = redis.call('GET', fence)
if stored then
  local t, e = string.match(stored, '^([1-9][0-9]*) ([0-9a-f%-]+)$')
  if not t then t = string.match(stored, '^[1-9][0-9]*$') end
  if not t then
    return redis.error_reply('ERR fence key ' .. fence .. ' holds no fencing token: it is not the fence\\'s to use')
  end
  if e and e ~= etcd then return {2, t, e} end
  if #t > #token or (#t == #token and t > token) then return {0, t} end
end
redis.call('SET', fence, token .. ' ' .. etcd)
return {1, (body())}`;

/** The token stored in a fence key, or false: the read side of the format above. */
const HIGHEST = "local v = redis.call('GET', KEYS[1]) return v and string.match(v, '^[1-9][0-9]*')";

const SET = fenced("return redis.call('SET', KEYS[1], ARGV[1])");
const DEL = fenced("return redis.call('DEL', KEYS[1])");

/**
 * Fencing in Redis: each write is one Lua script that compares the handle's fencing token with the
 * highest stored for the resource, refuses with {@link StaleTokenError} when it is lower or with
 * {@link ForeignTokenError} when the stored one came from another etcd, and otherwise stores the
 * token (and the etcd id of its etcd) and makes the write, atomically (Redis runs a script alone).
 * An equal token is the same holder writing again, and is allowed. The first fenced write of a
 * session also reads the etcd id from etcd (see `ETCD_ID_KEY`).
 *
 * The highest token of resource `r` lives in the string key `r:fence` (see
 * {@link RedisFenceOptions.suffix}); it outlives a `del()`, so that a stale holder cannot write the
 * key back. Delete it yourself once the resource is retired for good. Every key ending in the suffix
 * is some resource's fence: a key or resource that ends in it is refused
 * ({@link InvalidArgumentError}), so that no fenced write can reset another resource's fence. Use
 * one suffix for every RedisFence on a Redis database, and let no other code write keys ending in
 * it. In Redis Cluster, give the key a hash tag (`{account:7}`) so that `{account:7}:fence` lives
 * in the same slot.
 *
 * The token is checked and stored before a custom script ({@link RedisFence.eval}) runs, and the
 * script cannot see the fence's own variables: nothing it does changes what the fence decided.
 * Redis does not roll back a script that fails midway: one that raises an error leaves the writes it
 * made, and the token stored.
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
    if (typeof suffix !== 'string' || suffix.length === 0 || /[{}]/.test(suffix))
      throw new InvalidArgumentError(
        'RedisFence: suffix must be a non-empty string without { or } (a brace would move the fence key to another Redis Cluster slot than its resource\'s); default ":fence"',
      );
    this.suffix = suffix;
  }

  /** The key holding the highest token of `resource` (as `"<token> <etcd id>"`). */
  fenceKey(resource: string): string {
    return `${resource}${this.suffix}`;
  }

  /**
   * The highest token stored for `resource`, or undefined when no fenced write was made to it.
   * For checks and tests: a decision taken on it would race, which is what the fenced writes are for.
   */
  async highestToken(resource: string): Promise<bigint | undefined> {
    if (typeof resource !== 'string' || resource.length === 0)
      throw new InvalidArgumentError('RedisFence.highestToken: the key (resource) must be a non-empty string');
    const v = await this.evaluate(HIGHEST, [this.fenceKey(resource)], []);
    return typeof v === 'string' ? BigInt(v) : undefined;
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
   * key it touches in `keys` (Redis Cluster requires them in the resource's slot); a key ending in the
   * fence suffix is refused, as it is some resource's fence, and the script must write no key it
   * was not given. The token is stored before the script runs; the script cannot see the fence's
   * own variables.
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
      fenced(script),
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
    for (const k of [resource, ...keys]) this.checkNotFence(what, k);
    fenced.assert(); // a holder already known lost needs no round trip to be refused
    const etcdId = await etcdIdOf(fenced.session);
    const fenceKey = this.fenceKey(resource);
    keys.push(fenceKey);
    args.push(String(fenced.token), etcdId);
    const [applied, value, storedEtcdId] = (await this.evaluate(script, keys, args)) as [number, unknown, unknown];
    if (applied === 0) {
      fenced.refused('redis');
      throw new StaleTokenError(resource, fenced.token, BigInt(String(value)));
    }
    if (applied === 2) {
      fenced.refused('redis');
      throw new ForeignTokenError(
        resource,
        fenced.token,
        etcdId,
        BigInt(String(value)),
        String(storedEtcdId),
        `DEL ${JSON.stringify(fenceKey)}`,
      );
    }
    return value === undefined ? null : value;
  }

  private evaluate(script: string, keys: string[], args: (string | Buffer)[]): Promise<unknown> {
    const r = this.redis;
    return isNodeRedis(r) ? r.eval(script, { keys, arguments: args }) : r.eval(script, keys.length, ...keys, ...args);
  }

  /** Refuses a key or resource that is a fence key: a write to it would reset that resource's fence. */
  private checkNotFence(what: string, key: string): void {
    if (!key.endsWith(this.suffix)) return;
    const owner = key.slice(0, -this.suffix.length);
    throw new InvalidArgumentError(
      `${what}: "${key}" ends in the fence suffix "${this.suffix}"${owner ? `, so it is the fence key of "${owner}"` : ''}: a fenced write ` +
        "may not name a fence (it would reset that resource's highest token); give the data key or resource another name, or the fence another suffix",
    );
  }
}

function isNodeRedis(r: IoRedisLike | NodeRedisLike): r is NodeRedisLike {
  return typeof (r as Partial<NodeRedisLike>).isOpen === 'boolean';
}

function checkValue(value: unknown): string | Buffer {
  if (typeof value === 'string' || Buffer.isBuffer(value)) return value;
  throw new InvalidArgumentError('RedisFence.set: value must be a string or a Buffer');
}
