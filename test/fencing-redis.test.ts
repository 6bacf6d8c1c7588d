// Fencing where the resource lives (etcd-concurrency/fencing), on the real servers: a real etcd, a
// real Redis started for this file (test/db-servers.ts). The ghost: a holder
// in a child process stops (SIGSTOP) right after its own check passed, stays stopped past its TTL,
// a second holder acquires and writes, and once woken the ghost's write is refused by the database
// itself. Holders racing from several processes: the stored token only grows and no write lands
// out of token order. A transaction failing midway changes nothing; bad input gets clear errors.
// Every wait is on an event (a line from a child, a lock granted, a promise), never on a sleep.
import { describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createClient } from 'redis';
import type { Redis } from 'ioredis';
import { InvalidArgumentError } from '../src/index.js';
import { RedisFence, StaleTokenError, type HeldFencingHandle } from '../src/fencing/index.js';
import { redisForFile } from './db-servers.js';
import { checkRace, fencingFixture, redisClient, unique } from './fencing-fixture.js';

const { token, ghost, race } = fencingFixture('test/fencing-redis/');
const redisServer = redisForFile();

describe('RedisFence on a real Redis', () => {
  const need = (t: TestContext) => redisServer.need(t);

  it('the ghost: a holder stopped past its TTL wakes and its write is refused by Redis; the data shows only the second holder', async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const fence = new RedisFence(redis);
    const resource = unique('ghost');
    await ghost(
      'redis',
      server.url,
      resource,
      (lock) => fence.eval(lock, resource, "return redis.call('RPUSH', KEYS[1], ARGV[1])", [`${resource}:log`], ['second']),
      () => redis.lrange(`${resource}:log`, 0, -1),
      () => fence.highestToken(resource),
    );
  });

  it('holders racing from several processes: the stored token only grows and no write is applied out of token order', async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const resource = unique('race');
    const events = await race('redis', server.url, resource, 3, 8);
    const applied = (await redis.lrange(`${resource}:log`, 0, -1)).map((v) => BigInt(v.split(':')[1]!));
    checkRace(events, applied, await new RedisFence(redis).highestToken(resource));
  });

  it('set and del: an equal token writes again, a lower one is refused, and the fence outlives del', async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const fence = new RedisFence(redis);
    const key = unique('config');
    assert.equal(await fence.set(await token(10n), key, 'ten'), 'OK');
    assert.equal(await fence.set(await token(10n), key, 'ten again'), 'OK');
    await assert.rejects(
      fence.set(await token(9n), key, 'nine'),
      (err: Error) => err instanceof StaleTokenError && err.offeredToken === 9n && err.highestToken === 10n && err.resource === key,
    );
    assert.equal(await redis.get(key), 'ten again');
    await assert.rejects(fence.del(await token(9n), key), StaleTokenError);
    assert.equal(await fence.del(await token(11n), key), 1);
    assert.equal(await redis.exists(key), 0);
    await assert.rejects(fence.set(await token(10n), key, 'back'), StaleTokenError);
    assert.equal(await redis.exists(key), 0, 'a stale holder cannot write a deleted key back');
    assert.equal(await fence.highestToken(key), 11n);
    await fence.set(await token(12n), key, Buffer.from([0xff, 0x00, 0x80]));
    assert.deepEqual(await redis.getBuffer(key), Buffer.from([0xff, 0x00, 0x80]), 'binary values go through unchanged');
  });

  it('tokens compare exactly as bigints, beyond 2^53 and across lengths (Lua numbers are doubles)', async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const fence = new RedisFence(redis);
    const key = unique('big');
    await fence.set(await token(9n), key, 'nine');
    await fence.set(await token(10n), key, 'ten'); // "10" < "9" as strings: compared by length first
    await assert.rejects(fence.set(await token(9n), key, 'nine'), StaleTokenError);
    const big = 2n ** 53n + 1n; // 9007199254740993: the same double as 2^53
    await fence.set(await token(big), key, 'big');
    await assert.rejects(
      fence.set(await token(big - 1n), key, 'stale'),
      (err: Error) => err instanceof StaleTokenError && err.highestToken === big,
    );
    const max = 2n ** 63n - 1n;
    await fence.set(await token(max), key, 'max');
    assert.equal(await redis.get(key), 'max');
    assert.equal(await fence.highestToken(key), max);
  });

  it("a key or resource that names another resource's fence is refused: writing acct:fence cannot reset the fence of acct", async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const fence = new RedisFence(redis);
    const acct = unique('acct');
    await fence.set(await token(7n), acct, 'seven');
    await fence.set(await token(200n), acct, 'two hundred');
    const fenceKey = `${acct}:fence`;
    const refused = (err: Error) => err instanceof InvalidArgumentError && err.message.includes(fenceKey);
    await assert.rejects(fence.set(await token(200n), fenceKey, '1'), refused);
    await assert.rejects(fence.del(await token(200n), fenceKey), refused);
    await assert.rejects(fence.eval(await token(200n), acct, "return redis.call('SET', KEYS[2], '1')", [acct, fenceKey]), refused);
    await assert.rejects(fence.eval(await token(200n), fenceKey, "return redis.call('SET', KEYS[1], '1')", [acct]), refused);
    assert.equal(await fence.highestToken(acct), 200n);
    await assert.rejects(fence.set(await token(7n), acct, 'stale'), StaleTokenError);
    assert.equal(await redis.get(acct), 'two hundred', 'the stale holder did not write');
    // A suffix of one's own: the same rule, on its own suffix; and one that would move a fence key
    // to another Redis Cluster slot than its resource's (a brace) is refused at once.
    const own = new RedisFence(redis, { suffix: '-tok' });
    await own.set(await token(5n), acct, 'five');
    await assert.rejects(own.set(await token(5n), `${acct}-tok`, '1'), InvalidArgumentError);
    assert.throws(() => new RedisFence(redis, { suffix: '{x}' }), InvalidArgumentError);
  });

  it("an eval body cannot reach the fence's own locals: it neither reads nor changes the token stored", async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const fence = new RedisFence(redis);
    const key = unique('locals');
    await fence.set(await token(200n), key, 'two hundred');
    // Read: each of them is an unknown global to the body (Redis refuses those).
    for (const name of ['fence', 'token', 'stored']) {
      await assert.rejects(fence.eval(await token(200n), key, `return type(${name})`, [key]), /nonexistent global/, name);
    }
    // Written without `local`: a global to the body, which Redis 7 refuses to create.
    const assigning = "token = '1'; fence = KEYS[1]; stored = nil; return redis.call('SET', KEYS[1], 'x')";
    await assert.rejects(fence.eval(await token(200n), key, assigning, [key]), /readonly table/);
    assert.equal(await fence.highestToken(key), 200n);
    await assert.rejects(fence.set(await token(7n), key, 'stale'), StaleTokenError);
    assert.notEqual(await redis.get(key), 'stale');
  });

  it('a node-redis client: set, eval and del are fenced the same way', async (t) => {
    const server = need(t);
    if (!server) return;
    const nodeRedis = createClient({ url: server.url });
    await nodeRedis.connect();
    try {
      const fence = new RedisFence(nodeRedis);
      const key = unique('node_redis');
      assert.equal(await fence.set(await token(5n), key, 'five'), 'OK');
      assert.deepEqual(await fence.eval(await token(6n), key, "return {KEYS[1], ARGV[1], redis.call('GET', KEYS[1])}", [key], ['six']), [
        key,
        'six',
        'five',
      ]);
      await assert.rejects(
        fence.set(await token(5n), key, 'stale'),
        (err: Error) => err instanceof StaleTokenError && err.highestToken === 6n,
      );
      await assert.rejects(fence.del(await token(4n), key), StaleTokenError);
      assert.equal(await nodeRedis.get(key), 'five');
      assert.equal(await fence.del(await token(6n), key), 1);
      assert.equal(await fence.highestToken(key), 6n);
    } finally {
      await nodeRedis.quit();
    }
  });

  it('eval: a custom script sees its own KEYS and ARGV; one failing midway keeps the token stored before it ran; a bad handle or client is refused', async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const fence = new RedisFence(redis, { suffix: ':tok' });
    const resource = unique('counter');
    const script = "redis.call('HSET', KEYS[1], 'by', ARGV[1]); return {#KEYS, #ARGV, redis.call('HINCRBY', KEYS[1], 'n', ARGV[2])}";
    assert.deepEqual(await fence.eval(await token(5n), resource, script, [resource], ['w1', 2]), [1, 2, 2]);
    assert.deepEqual(await fence.eval(await token(6n), resource, script, [resource], ['w2', 3n]), [1, 2, 5]);
    await assert.rejects(fence.eval(await token(4n), resource, script, [resource], ['w0', 100]), StaleTokenError);
    assert.deepEqual(await redis.hgetall(resource), { by: 'w2', n: '5' });
    await assert.rejects(fence.eval(await token(7n), resource, "return redis.call('INCR', KEYS[1])", [resource]), /WRONGTYPE/);
    assert.equal(await fence.highestToken(resource), 7n, 'the token is stored before the script runs, and stays when it fails');
    await redis.set(`${resource}x:tok`, 'not a token');
    await assert.rejects(fence.set(await token(8n), `${resource}x`, 'v'), /holds no fencing token/);
    await assert.rejects(fence.set({ fencingToken: 8n } as HeldFencingHandle, resource, 'v'), InvalidArgumentError);
    await assert.rejects(fence.set(await token(8n), '', 'v'), InvalidArgumentError);
    await assert.rejects(fence.eval(await token(8n), resource, ''), InvalidArgumentError);
    assert.throws(() => new RedisFence({} as Redis), InvalidArgumentError);
  });
});
