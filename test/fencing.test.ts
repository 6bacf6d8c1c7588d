// Fencing where the resource lives (etcd-concurrency/fencing), on the real servers: a real etcd, a
// real PostgreSQL and a real Redis started for this file (test/db-servers.ts). The ghost: a holder
// in a child process stops (SIGSTOP) right after its own check passed, stays stopped past its TTL,
// a second holder acquires and writes, and once woken the ghost's write is refused by the database
// itself. Holders racing from several processes: the stored token only grows and no write lands
// out of token order. A transaction failing midway changes nothing; bad input gets clear errors.
// Every wait is on an event (a line from a child, a lock granted, a promise), never on a sleep.
import { describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import pg from 'pg';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { Client, Election, InvalidArgumentError, LockLostError, Mutex, RWMutex, Semaphore, Session, type LockHandle } from '../src/index.js';
import { FenceNotInstalledError, FenceUnavailableError, PostgresFence, RedisFence, StaleTokenError, type HeldFencingHandle } from '../src/fencing/index.js';
import type { EtcdCluster, PostgresServer, RedisServer } from '../src/testing/index.js';
import { ATTR, METRIC } from '../src/metrics/names.js';
import { postgresForFile, redisForFile } from './db-servers.js';
import { Holder, killHolders, type HolderEvent } from './fence-holders.js';
import { etcdForFile } from './helpers.js';

const ROOT = 'test/fencing/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: killHolders });
const postgres = postgresForFile();
const redisServer = redisForFile();

/** A name no other test uses, valid as a PostgreSQL identifier and a Redis key. */
const unique = (scope: string): string => `${scope}_${randomBytes(4).toString('hex')}`;

/** A handle of our own making, with a fixed token that always claims to hold. */
const token = (n: bigint): HeldFencingHandle => ({ fencingToken: n, assertHeld() {} });

/** A pg Pool on the file's PostgreSQL for one test; `await using` ends it. */
function pool(server: PostgresServer): pg.Pool & AsyncDisposable {
  const p = new pg.Pool({ connectionString: server.connectionString, max: 4 });
  p.on('error', () => {}); // an idle client's error after end(): pg emits it on the pool
  return Object.assign(p, { [Symbol.asyncDispose]: () => p.end() });
}

/** An ioredis client on the file's Redis for one test; `await using` disconnects it. */
function redisClient(server: RedisServer): Redis & AsyncDisposable {
  const r = new Redis(server.url);
  return Object.assign(r, { [Symbol.asyncDispose]: async () => void (await r.quit()) });
}

/** A table `<resource>_log` for holders' writes: one row per applied write, in commit order. */
async function logTable(db: pg.Pool, resource: string): Promise<void> {
  await db.query(`CREATE TABLE "${resource}_log" (id bigserial PRIMARY KEY, token bigint NOT NULL, value text NOT NULL)`);
}

async function logRows(db: pg.Pool, resource: string): Promise<{ token: bigint; value: string }[]> {
  const r = await db.query<{ token: string; value: string }>(`SELECT token, value FROM "${resource}_log" ORDER BY id`);
  return r.rows.map((row) => ({ token: BigInt(row.token), value: row.value }));
}

/** A Session on the file's etcd, closed by `await using`. */
async function session(ttl = 10): Promise<Session> {
  return Session.create(client, { ttl });
}

type Store = 'postgres' | 'redis';

/**
 * The ghost on `store`: returns what the second holder wrote and what the data shows. `write` is
 * the second holder's fenced write; `data` reads the resource's log.
 */
async function ghost(
  store: Store,
  url: string,
  resource: string,
  write: (lock: LockHandle) => Promise<unknown>,
  data: () => Promise<string[]>,
  highest: () => Promise<bigint | undefined>,
): Promise<void> {
  const lockName = `${fresh(`ghost-${store}`)}lock`;
  const holder = new Holder(['ghost', etcd.endpoints.join(','), lockName, '2', store, url, resource, 'ghost']);
  const first = BigInt((await holder.next('held')).token as string);
  holder.send('write');
  // The ghost has passed its own check and stopped itself: no keepalive goes out from now on.
  await holder.next('pausing');
  await using s2 = await session();
  // Granted only once the ghost's lease has expired (TTL 2 s): the ghost is then past its TTL.
  await using lock = await new Mutex(s2, lockName).lock();
  assert.ok(lock.fencingToken > first, 'the second holder has the larger token');
  await write(lock);
  holder.child.kill('SIGCONT');
  const refused = await holder.next('refused');
  assert.deepEqual(refused, { event: 'refused', offered: String(first), highest: String(lock.fencingToken), code: 'ERR_STALE_TOKEN' });
  assert.deepEqual(await data(), ['second'], "only the second holder's write is in the data");
  assert.equal(await highest(), lock.fencingToken);
  assert.deepEqual(await holder.rest(), []);
}

/**
 * `workers` processes each take the lock `rounds` times and write after unlocking, racing each
 * other; returns every round's outcome.
 */
async function race(store: Store, url: string, resource: string, workers: number, rounds: number): Promise<HolderEvent[]> {
  const lockName = `${fresh(`race-${store}`)}lock`;
  const holders = Array.from({ length: workers }, (_, w) => new Holder(['race', etcd.endpoints.join(','), lockName, '10', store, url, resource, `w${w}`, String(rounds)]));
  const events = (await Promise.all(holders.map((h) => h.rest()))).flat();
  assert.equal(events.length, workers * (2 * rounds - 1));
  for (const e of events) assert.equal(e.event, 'write', JSON.stringify(e));
  return events;
}

/** The race's verdict from the writes applied, in the order they were applied. */
function checkRace(events: HolderEvent[], applied: bigint[], stored: bigint | undefined): void {
  for (let i = 1; i < applied.length; i++) assert.ok(applied[i]! >= applied[i - 1]!, `write ${i} (token ${applied[i]}) applied after token ${applied[i - 1]}`);
  const appliedEvents = events.filter((e) => e.applied).map((e) => BigInt(e.token as string));
  assert.deepEqual([...applied].sort(cmp), appliedEvents.sort(cmp), 'the writes reported applied are those in the data');
  assert.ok(events.some((e) => !e.applied), 'stale writes were offered (each round after the first offers one)');
  for (const e of events.filter((e) => !e.applied)) {
    assert.ok(BigInt(e.highest as string) > BigInt(e.token as string), `a refusal names a higher stored token: ${JSON.stringify(e)}`);
  }
  const max = events.map((e) => BigInt(e.token as string)).reduce((a, b) => (a > b ? a : b));
  assert.equal(stored, max, 'the stored token is the highest of all');
  assert.equal(applied.at(-1), max, 'the last write applied is the highest token');
}

const cmp = (a: bigint, b: bigint): number => (a < b ? -1 : a > b ? 1 : 0);

/** The counter of refused stale writes, read from a real OpenTelemetry SDK. */
class Counted extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
  async refused(store: Store): Promise<number> {
    const { resourceMetrics } = await this.collect();
    const m = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).find((x) => x.descriptor.name === METRIC.fencingRefused);
    return (m?.dataPoints ?? []).filter((p) => p.attributes[ATTR.fencingStore] === store).reduce((a, p) => a + (p.value as number), 0);
  }
}

describe('PostgresFence on a real PostgreSQL', () => {
  const need = (t: TestContext) => postgres.need(t);

  it('the ghost: a holder stopped past its TTL wakes and its write is refused by the database; the data shows only the second holder', async (t) => {
    const server = need(t);
    if (!server) return;
    await using db = pool(server);
    const fence = new PostgresFence(db, { table: 'fences' });
    await fence.install();
    const resource = unique('ghost');
    await logTable(db, resource);
    await ghost(
      'postgres',
      server.connectionString,
      resource,
      (lock) => fence.run(lock, resource, (tx) => tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES ($1, 'second')`, [String(lock.fencingToken)])),
      async () => (await logRows(db, resource)).map((r) => r.value),
      () => fence.highestToken(resource),
    );
    assert.equal(db.idleCount, db.totalCount, 'every client went back to the pool');
  });

  it('holders racing from several processes: the stored token only grows and no write is applied out of token order', async (t) => {
    const server = need(t);
    if (!server) return;
    await using db = pool(server);
    const fence = new PostgresFence(db, { table: 'fences' });
    await fence.install();
    const resource = unique('race');
    await logTable(db, resource);
    const events = await race('postgres', server.connectionString, resource, 3, 8);
    const rows = await logRows(db, resource);
    checkRace(events, rows.map((r) => r.token), await fence.highestToken(resource));
  });

  it('a transaction failing midway (thrown, SQL error, lock lost before COMMIT) leaves the fence row and the data unchanged', async (t) => {
    const server = need(t);
    if (!server) return;
    await using db = pool(server);
    const fence = new PostgresFence(db, { table: 'fences' });
    await fence.install();
    const resource = unique('midway');
    await logTable(db, resource);
    const insert = (tx: pg.PoolClient, value: string, n: bigint) => tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES ($1, $2)`, [String(n), value]);
    await using s = await session();
    const name = `${fresh('midway')}lock`;
    const first = await new Mutex(s, name).lock();
    await fence.run(first, resource, (tx) => insert(tx, 'before', first.fencingToken));
    await first.unlock();
    const lock = await new Mutex(s, name).lock();
    const boom = new Error('boom');
    await assert.rejects(
      fence.run(lock, resource, async (tx) => {
        await insert(tx, 'thrown', lock.fencingToken);
        throw boom;
      }),
      (err) => err === boom,
    );
    await assert.rejects(
      fence.run(lock, resource, async (tx) => {
        await insert(tx, 'sql', lock.fencingToken);
        await tx.query(`INSERT INTO "${resource}_log" (no_such_column) VALUES (1)`);
      }),
      (err: { code?: string }) => err.code === '42703', // undefined_column, from PostgreSQL as is
    );
    await assert.rejects(
      fence.run(lock, resource, async (tx) => {
        await insert(tx, 'lost', lock.fencingToken);
        await lock.unlock(); // lost before COMMIT: the check just before it refuses
      }),
      LockLostError,
    );
    assert.equal(await fence.highestToken(resource), first.fencingToken, 'the fence row still holds the first token');
    assert.deepEqual((await logRows(db, resource)).map((r) => r.value), ['before']);
    assert.equal(db.idleCount, db.totalCount, 'every client went back to the pool');
  });

  it('a connection killed mid-transaction: the run fails, nothing is written, and the pool gets rid of that client', async (t) => {
    const server = need(t);
    if (!server) return;
    await using db = pool(server);
    const fence = new PostgresFence(db, { table: 'fences' });
    await fence.install();
    const resource = unique('killed');
    await logTable(db, resource);
    const pids: number[] = [];
    const write = (value: string, kill: boolean) =>
      fence.run(token(3n), resource, async (tx) => {
        const pid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        pids.push(pid);
        await tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES (3, $1)`, [value]);
        if (kill) await db.query('SELECT pg_terminate_backend($1)', [pid]); // from another connection of the pool
        await tx.query('SELECT 1');
      });
    await assert.rejects(write('killed', true));
    for (let i = 0; i < 4; i++) await write(`after ${i}`, false); // as many as the pool holds: none gets the dead client
    assert.ok(!pids.slice(1).includes(pids[0]!), 'the killed connection was not handed out again');
    assert.deepEqual((await logRows(db, resource)).map((r) => r.value), ['after 0', 'after 1', 'after 2', 'after 3']);
    assert.equal(db.idleCount, db.totalCount, 'every client went back to the pool');
  });

  it('the same holder writes twice (equal token); a lower token is refused with the resource and both tokens, counted on the metrics', async (t) => {
    const server = need(t);
    if (!server) return;
    await using db = pool(server);
    const fence = new PostgresFence(db, { table: 'fences' });
    await fence.install();
    const resource = unique('equal');
    await logTable(db, resource);
    const reader = new Counted();
    const meterProvider = new MeterProvider({ readers: [reader] });
    const metered = new Client({ endpoints: etcd.endpoints, meterProvider });
    try {
      await using s = await Session.create(metered);
      const name = `${fresh('equal')}lock`;
      const old = await new Mutex(s, name).lock();
      await old.unlock();
      await using lock = await new Mutex(s, name).lock();
      const write = (h: HeldFencingHandle, v: string) => fence.run(h, resource, (tx) => tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES ($1, $2) RETURNING value`, [String(h.fencingToken), v]));
      assert.equal((await write(lock, 'one')).rows[0].value, 'one', 'run returns what fn returns');
      await write(lock, 'two');
      // A handle that says it still holds (its check cannot know): the database refuses it.
      const stale = token(old.fencingToken);
      const err = await write(stale, 'stale').then(() => assert.fail('a lower token was accepted'), (e: unknown) => e);
      assert.ok(err instanceof StaleTokenError);
      assert.equal(err.code, 'ERR_STALE_TOKEN');
      assert.equal(err.resource, resource);
      assert.equal(err.offeredToken, old.fencingToken);
      assert.equal(err.highestToken, lock.fencingToken);
      assert.match(err.message, /acquire again/);
      assert.equal(await reader.refused('postgres'), 0, 'a handle not of this library counts nowhere');
      // An old lock's own handle, released: refused by its own check before any round trip.
      await assert.rejects(write(old, 'released'), LockLostError);
      assert.deepEqual((await logRows(db, resource)).map((r) => r.value), ['one', 'two']);
      // The refusals counter: a stale write through one of our handles (an election's, here).
      await using leader = await new Election(s, `${fresh('equal')}election`).campaign('me');
      const staleLeader = Object.create(leader) as typeof leader;
      Object.defineProperty(staleLeader, 'fencingToken', { value: 1n });
      await assert.rejects(write(staleLeader as unknown as HeldFencingHandle, 'stale-leader'), StaleTokenError);
      assert.equal(await reader.refused('postgres'), 1);
    } finally {
      await metered.close();
      await meterProvider.shutdown();
    }
  });

  it('a leader and a write lock fence; a semaphore permit and a read lock are refused with why', async (t) => {
    const server = need(t);
    if (!server) return;
    await using db = pool(server);
    const fence = new PostgresFence(db, { table: 'fences' });
    await fence.install();
    const resource = unique('kinds');
    await using s = await session();
    const p = fresh('kinds');
    await using leader = await new Election(s, `${p}election`).campaign('me');
    assert.equal(await fence.run(leader, resource, () => 'led'), 'led');
    const rw = new RWMutex(s, `${p}rw`);
    await using w = await rw.lock();
    assert.equal(await fence.run(w, resource, () => 'written'), 'written');
    await w.unlock();
    await using r = await rw.rLock();
    await assert.rejects(fence.run(r, resource, () => 'read'), (err: Error) => err instanceof InvalidArgumentError && /read lock/.test(err.message));
    await r.unlock();
    await using permit = await new Semaphore(s, `${p}sem`, { permits: 2 }).acquire();
    await assert.rejects(fence.run(permit, resource, () => 'permit'), (err: Error) => err instanceof InvalidArgumentError && /semaphore permit/.test(err.message));
  });

  it('bad input: an unknown handle, a table missing without install(), a bad table name, a closed pool: clear errors', async (t) => {
    const server = need(t);
    if (!server) return;
    const db = pool(server);
    t.after(() => (db.ended ? undefined : db.end()));
    const resource = unique('bad');
    const missing = new PostgresFence(db, { table: unique('never_installed') });
    await assert.rejects(missing.run(token(5n), resource, () => 1), (err: Error) => {
      assert.ok(err instanceof FenceNotInstalledError);
      assert.equal((err as unknown as { code: string }).code, 'ERR_FENCE_NOT_INSTALLED');
      assert.match(err.message, /call install\(\)/);
      return true;
    });
    const fence = new PostgresFence(db, { table: 'fences' });
    await fence.install();
    for (const [i, bad] of [{}, null, 'lock', { fencingToken: 5, assertHeld() {} }, { fencingToken: 0n, assertHeld() {} }, { fencingToken: 5n }].entries()) {
      await assert.rejects(fence.run(bad as HeldFencingHandle, resource, () => 1), (err: Error) => err instanceof InvalidArgumentError && /fencingToken/.test(err.message), `bad handle ${i}`);
    }
    await assert.rejects(fence.run(token(5n), '', () => 1), InvalidArgumentError);
    for (const table of ['fences; DROP TABLE fences', 'a"b', 'x.y.z', '1abc', '', 'a'.repeat(64)]) {
      assert.throws(() => new PostgresFence(db, { table }), InvalidArgumentError, table);
    }
    assert.throws(() => new PostgresFence({} as pg.Pool), InvalidArgumentError);
    // Names are quoted: a schema-qualified one works, and case is kept.
    await db.query('CREATE SCHEMA IF NOT EXISTS fencing_test');
    const qualified = new PostgresFence(db, { table: 'fencing_test.Fences' });
    await qualified.install();
    await qualified.run(token(7n), resource, () => 1);
    assert.equal((await db.query(`SELECT token FROM fencing_test."Fences" WHERE resource = $1`, [resource])).rows[0].token, '7');
    assert.equal(db.idleCount, db.totalCount, 'every client went back to the pool');
    await db.end();
    await assert.rejects(fence.run(token(9n), resource, () => 1), (err: Error) => {
      assert.ok(err instanceof FenceUnavailableError);
      assert.match(err.message, /end\(\)/);
      assert.ok(err.cause instanceof Error, 'the driver error is the cause');
      return true;
    });
  });

  it('a single pg Client: concurrent runs are queued on it, and each is fenced', async (t) => {
    const server = need(t);
    if (!server) return;
    const c = new pg.Client({ connectionString: server.connectionString });
    await c.connect();
    try {
      const fence = new PostgresFence(c, { table: 'fences' });
      await fence.install();
      const resource = unique('client');
      const results = await Promise.allSettled([
        fence.run(token(10n), resource, async (tx) => (await tx.query('SELECT 1 AS one')).rows[0].one),
        fence.run(token(12n), resource, () => 'twelve'),
        fence.run(token(11n), resource, () => 'eleven'),
      ]);
      assert.deepEqual(results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).name)), [1, 'twelve', 'StaleTokenError']);
      assert.equal(await fence.highestToken(resource), 12n);
    } finally {
      await c.end();
    }
  });
});

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
      async () => {
        const v = await redis.get(fence.fenceKey(resource));
        return v === null ? undefined : BigInt(v);
      },
    );
  });

  it('holders racing from several processes: the stored token only grows and no write is applied out of token order', async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const resource = unique('race');
    const events = await race('redis', server.url, resource, 3, 8);
    const applied = (await redis.lrange(`${resource}:log`, 0, -1)).map((v) => BigInt(v.split(':')[1]!));
    checkRace(events, applied, BigInt((await redis.get(`${resource}:fence`))!));
  });

  it('set and del: an equal token writes again, a lower one is refused, and the fence outlives del', async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const fence = new RedisFence(redis);
    const key = unique('config');
    assert.equal(await fence.set(token(10n), key, 'ten'), 'OK');
    assert.equal(await fence.set(token(10n), key, 'ten again'), 'OK');
    await assert.rejects(fence.set(token(9n), key, 'nine'), (err: Error) => err instanceof StaleTokenError && err.offeredToken === 9n && err.highestToken === 10n && err.resource === key);
    assert.equal(await redis.get(key), 'ten again');
    await assert.rejects(fence.del(token(9n), key), StaleTokenError);
    assert.equal(await fence.del(token(11n), key), 1);
    assert.equal(await redis.exists(key), 0);
    await assert.rejects(fence.set(token(10n), key, 'back'), StaleTokenError);
    assert.equal(await redis.exists(key), 0, 'a stale holder cannot write a deleted key back');
    assert.equal(await redis.get(`${key}:fence`), '11');
    await fence.set(token(12n), key, Buffer.from([0xff, 0x00, 0x80]));
    assert.deepEqual(await redis.getBuffer(key), Buffer.from([0xff, 0x00, 0x80]), 'binary values go through unchanged');
  });

  it('tokens compare exactly as bigints, beyond 2^53 and across lengths (Lua numbers are doubles)', async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const fence = new RedisFence(redis);
    const key = unique('big');
    await fence.set(token(9n), key, 'nine');
    await fence.set(token(10n), key, 'ten'); // "10" < "9" as strings: compared by length first
    await assert.rejects(fence.set(token(9n), key, 'nine'), StaleTokenError);
    const big = 2n ** 53n + 1n; // 9007199254740993: the same double as 2^53
    await fence.set(token(big), key, 'big');
    await assert.rejects(fence.set(token(big - 1n), key, 'stale'), (err: Error) => err instanceof StaleTokenError && err.highestToken === big);
    const max = 2n ** 63n - 1n;
    await fence.set(token(max), key, 'max');
    assert.equal(await redis.get(key), 'max');
    assert.equal(await redis.get(`${key}:fence`), String(max));
  });

  it('a node-redis client: set, eval and del are fenced the same way', async (t) => {
    const server = need(t);
    if (!server) return;
    const nodeRedis = createClient({ url: server.url });
    await nodeRedis.connect();
    try {
      const fence = new RedisFence(nodeRedis);
      const key = unique('node_redis');
      assert.equal(await fence.set(token(5n), key, 'five'), 'OK');
      assert.deepEqual(await fence.eval(token(6n), key, "return {KEYS[1], ARGV[1], redis.call('GET', KEYS[1])}", [key], ['six']), [key, 'six', 'five']);
      await assert.rejects(fence.set(token(5n), key, 'stale'), (err: Error) => err instanceof StaleTokenError && err.highestToken === 6n);
      await assert.rejects(fence.del(token(4n), key), StaleTokenError);
      assert.equal(await nodeRedis.get(key), 'five');
      assert.equal(await fence.del(token(6n), key), 1);
      assert.equal(await nodeRedis.get(`${key}:fence`), '6');
    } finally {
      await nodeRedis.quit();
    }
  });

  it('eval: a custom script sees its own KEYS and ARGV; one failing midway stores no token; a bad handle or client is refused', async (t) => {
    const server = need(t);
    if (!server) return;
    await using redis = redisClient(server);
    const fence = new RedisFence(redis, { suffix: ':tok' });
    const resource = unique('counter');
    const script = "redis.call('HSET', KEYS[1], 'by', ARGV[1]); return {#KEYS, #ARGV, redis.call('HINCRBY', KEYS[1], 'n', ARGV[2])}";
    assert.deepEqual(await fence.eval(token(5n), resource, script, [resource], ['w1', 2]), [1, 2, 2]);
    assert.deepEqual(await fence.eval(token(6n), resource, script, [resource], ['w2', 3n]), [1, 2, 5]);
    await assert.rejects(fence.eval(token(4n), resource, script, [resource], ['w0', 100]), StaleTokenError);
    assert.deepEqual(await redis.hgetall(resource), { by: 'w2', n: '5' });
    await assert.rejects(fence.eval(token(7n), resource, "return redis.call('INCR', KEYS[1])", [resource]), /WRONGTYPE/);
    assert.equal(await redis.get(`${resource}:tok`), '6', 'a script that failed stored no token');
    await redis.set(`${resource}x:tok`, 'not a token');
    await assert.rejects(fence.set(token(8n), `${resource}x`, 'v'), /holds no fencing token/);
    await assert.rejects(fence.set({ fencingToken: 8n } as HeldFencingHandle, resource, 'v'), InvalidArgumentError);
    await assert.rejects(fence.set(token(8n), '', 'v'), InvalidArgumentError);
    await assert.rejects(fence.eval(token(8n), resource, ''), InvalidArgumentError);
    assert.throws(() => new RedisFence({} as Redis), InvalidArgumentError);
  });
});
