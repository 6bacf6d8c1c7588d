// The fences keep, beside each token, the etcd id of the etcd it came from (a random id kept in
// etcd at ETCD_ID_KEY), because a new etcd counts its tokens from 1 again. On the real servers: an
// etcd wiped and restarted with the same flags (same cluster id: the reason a random id is needed),
// a second etcd of its own, rows and keys an earlier version wrote, and a user whose role only
// reaches its lock prefix. Each on a real PostgreSQL and a real Redis (test/db-servers.ts).
import { describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type pg from 'pg';
import type { Redis } from 'ioredis';
import { Client, Mutex, PermissionDeniedError, Session, SessionExpiredError, type LockHandle } from '../src/index.js';
import {
  ETCD_ID_KEY,
  FenceNotInstalledError,
  ForeignTokenError,
  PostgresFence,
  RedisFence,
  StaleTokenError,
  type HeldFencingHandle,
} from '../src/fencing/index.js';
import { startEtcd, type EtcdCluster, type PostgresServer, type RedisServer } from '../src/testing/index.js';
import { postgresForFile, redisForFile } from './db-servers.js';
import { fencingFixture, pool, redisClient, unique } from './fencing-fixture.js';

const { fresh, session, token } = fencingFixture('test/fencing-etcd-id/');
const postgres = postgresForFile();
const redis = redisForFile();
const run = promisify(execFile);

/** One fenced resource in one store, as the tests see it. */
interface Store {
  readonly name: string;
  /** A fenced write of `value`, appended to the resource's data. */
  write(handle: HeldFencingHandle, value: string): Promise<unknown>;
  /** The values written, in order. */
  data(): Promise<string[]>;
  /** The token stored and the etcd id beside it. */
  stored(): Promise<{ token: bigint; etcdId: string | null } | undefined>;
  /** An operator's reset of the resource's fence. */
  reset(): Promise<void>;
}

/** A resource in PostgreSQL: a fence on `fences`, and a log table written in the fenced transaction. */
async function pgStore(db: pg.Pool, tag: string): Promise<Store> {
  const fence = new PostgresFence(db, { table: 'fences' });
  await fence.install();
  const resource = unique(tag);
  await db.query(`CREATE TABLE "${resource}_log" (id bigserial PRIMARY KEY, value text NOT NULL)`);
  return {
    name: 'postgres',
    write: (h, value) => fence.run(h, resource, (tx) => tx.query(`INSERT INTO "${resource}_log" (value) VALUES ($1)`, [value])),
    data: async () => (await db.query<{ value: string }>(`SELECT value FROM "${resource}_log" ORDER BY id`)).rows.map((r) => r.value),
    stored: async () => {
      const r = await db.query<{ token: string; etcd_id: string | null }>('SELECT token, etcd_id FROM fences WHERE resource = $1', [
        resource,
      ]);
      const row = r.rows[0];
      return row && { token: BigInt(row.token), etcdId: row.etcd_id };
    },
    reset: async () => void (await db.query('DELETE FROM fences WHERE resource = $1', [resource])),
  };
}

/** A resource in Redis: a list, pushed onto by a fenced script. */
function redisStore(r: Redis, tag: string): Store {
  const fence = new RedisFence(r);
  const resource = unique(tag);
  return {
    name: 'redis',
    write: (h, value) => fence.eval(h, resource, "return redis.call('RPUSH', KEYS[1], ARGV[1])", [resource], [value]),
    data: () => r.lrange(resource, 0, -1),
    stored: async () => {
      const v = await r.get(fence.fenceKey(resource));
      if (v === null) return undefined;
      const [t, id] = v.split(' ');
      return { token: BigInt(t!), etcdId: id ?? null };
    },
    reset: async () => void (await r.del(fence.fenceKey(resource))),
  };
}

/** Both stores for one test, or none when a server is missing (the test is then skipped, or failed under CI). */
async function withStores(t: TestContext, tag: string, body: (stores: Store[]) => Promise<void>): Promise<void> {
  const pgServer: PostgresServer | undefined = postgres.need(t);
  const redisServer: RedisServer | undefined = pgServer && redis.need(t);
  if (!pgServer || !redisServer) return;
  await using db = pool(pgServer);
  await using r = redisClient(redisServer);
  await body([await pgStore(db, tag), redisStore(r, tag)]);
}

/** The etcd id `client`'s etcd keeps. */
async function etcdIdOn(client: Client): Promise<string> {
  return (await client.get(ETCD_ID_KEY))!.value.toString();
}

/** `n` writes on `client`'s etcd, each one revision. */
async function advance(client: Client, n: bigint): Promise<void> {
  for (let i = 0n; i < n; i++) await client.put(`filler/${i}`, '');
}

/** Refused as a token of another etcd, with both tokens and both etcd ids, and nothing written. */
function foreign(offered: bigint, offeredEtcdId: string, stored: bigint, storedEtcdId: string) {
  return (err: unknown): boolean => {
    assert.ok(err instanceof ForeignTokenError, `a ForeignTokenError, got ${String(err)}`);
    assert.equal(err.code, 'ERR_FOREIGN_TOKEN');
    assert.deepEqual(
      [err.offeredToken, err.offeredEtcdId, err.storedToken, err.storedEtcdId],
      [offered, offeredEtcdId, stored, storedEtcdId],
    );
    assert.ok(err.message.includes(offeredEtcdId) && err.message.includes(storedEtcdId), 'the message names both etcds');
    assert.match(err.message, /reset this resource's fence \((DELETE FROM "fences"|DEL ")/);
    assert.match(err.message, /--bump-revision/);
    return true;
  };
}

/** Kills the single member, removes its data and starts it again with the same command line. */
async function wipe(etcd: EtcdCluster): Promise<void> {
  await etcd.kill(0, 'SIGKILL');
  await rm(join(etcd.dataDir, etcd.members[0]!.name), { recursive: true, force: true });
  await etcd.restart(0);
}

describe('fencing tokens of another etcd', () => {
  it('etcd wiped and restarted with the same flags (same cluster id): a token lower, equal or higher than the stored one is refused, naming both etcds', async (t) =>
    withStores(t, 'wiped', async (stores) => {
      await using etcd = await startEtcd();
      await using client = new Client({ endpoints: etcd.endpoints });
      const old = await Session.create(client, { ttl: 30 });
      await advance(client, 40n); // so that the wiped etcd's first tokens are lower than the stored one
      const held = await new Mutex(old, 'locks/acct').lock();
      const stored = held.fencingToken;
      for (const s of stores) await s.write(held, 'old');
      const oldId = await etcdIdOn(client);
      const clusterId = (await client.range({ key: Buffer.from(ETCD_ID_KEY) })).header.clusterId;
      assert.ok(oldId.startsWith(clusterId.toString(16).padStart(16, '0')), 'the etcd id names the cluster it was made on');
      // A session of the old etcd whose first fenced write comes after the wipe.
      const late = await Session.create(client, { ttl: 30 });

      await wipe(etcd);
      // The same client, across the wipe.
      await using s = await Session.create(client, { ttl: 30 });
      assert.equal((await client.range({ key: Buffer.from(ETCD_ID_KEY) })).header.clusterId, clusterId, 'the cluster id did not change');
      const lockAndWrite = async (check: (token: bigint) => void): Promise<void> => {
        const lock = await new Mutex(s, 'locks/acct').lock();
        try {
          check(lock.fencingToken);
          for (const st of stores) {
            const err = await st.write(lock, 'new').then(
              () => assert.fail(`${st.name}: written`),
              (e: unknown) => e,
            );
            foreign(lock.fencingToken, await etcdIdOn(client), stored, oldId)(err);
          }
        } finally {
          await lock.unlock();
        }
      };
      await lockAndWrite((token) => assert.ok(token < stored, `lower: ${token} < ${stored}`));
      const newId = await etcdIdOn(client);
      assert.notEqual(newId, oldId, 'the wiped etcd made a new etcd id');
      const { header } = await client.range({ key: Buffer.from(ETCD_ID_KEY) });
      await advance(client, stored - header.revision - 1n); // the next write is revision `stored`
      await lockAndWrite((token) => assert.equal(token, stored, 'equal'));
      await lockAndWrite((token) => assert.ok(token > stored, `higher: ${token} > ${stored}`));
      for (const st of stores) {
        assert.deepEqual(await st.data(), ['old'], `${st.name}: nothing of the new etcd's holders was written`);
        assert.deepEqual(await st.stored(), { token: stored, etcdId: oldId }, st.name);
      }

      // The old etcd's session, first fencing now: its lease is not on the etcd that gave the id.
      const ghost: HeldFencingHandle = { fencingToken: stored + 1000n, assertHeld() {}, session: late };
      for (const st of stores) {
        await st.reset();
        await assert.rejects(st.write(ghost, 'ghost'), (err) => err instanceof SessionExpiredError && err.reason === 'lease_gone');
        assert.equal(await st.stored(), undefined, `${st.name}: the old etcd's token was not stored with the new etcd's id`);
      }
      // Reset on purpose: the new etcd's holders write from then on.
      const lock = await new Mutex(s, 'locks/acct').lock();
      for (const st of stores) {
        await st.write(lock, 'new');
        assert.deepEqual(await st.data(), ['old', 'new'], st.name);
        assert.deepEqual(await st.stored(), { token: lock.fencingToken, etcdId: newId }, st.name);
      }
      await lock.unlock();
      await held.unlock(); // on an etcd that no longer has it: nothing to delete
      await old.close();
      await late.close();
    }));

  it("two etcds of their own: one's holder is refused where the other's wrote, whatever the tokens, with its cluster named", async (t) =>
    withStores(t, 'two', async (stores) => {
      await using s = await session();
      await using mine = await new Mutex(s, `${fresh('two')}lock`).lock();
      for (const st of stores) await st.write(mine, 'here');
      await using other = await startEtcd();
      await using client = new Client({ endpoints: other.endpoints });
      await using s2 = await Session.create(client, { ttl: 30 });
      const theirs = await new Mutex(s2, 'locks/two').lock();
      const clusterId = (await client.range({ key: Buffer.from('x') })).header.clusterId.toString(16).padStart(16, '0');
      for (const st of stores) {
        await assert.rejects(st.write(theirs, 'there'), (err) => {
          assert.ok(err instanceof ForeignTokenError);
          assert.ok(err.offeredEtcdId.startsWith(`${clusterId}-`), `${err.offeredEtcdId} names cluster ${clusterId}`);
          assert.ok(err.message.includes(`etcd ${clusterId}-`), 'the message names the cluster');
          return true;
        });
        // A handle of the other etcd with a token far above ours: refused all the same.
        await assert.rejects(
          st.write({ fencingToken: mine.fencingToken + 10_000n, assertHeld() {}, session: s2 }, 'there'),
          ForeignTokenError,
        );
        assert.deepEqual(await st.data(), ['here'], st.name);
      }
      await theirs.unlock();
    }));

  it('rows and keys an earlier version stored (no etcd id) keep working: install() adds the column, the first token not lower adopts them', async (t) => {
    const pgServer = postgres.need(t);
    const redisServer = pgServer && redis.need(t);
    if (!pgServer || !redisServer) return;
    await using db = pool(pgServer);
    const table = unique('earlier');
    await db.query(`CREATE TABLE ${table} (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token > 0))`);
    await db.query(`INSERT INTO ${table} VALUES ('acct', 50)`);
    const fence = new PostgresFence(db, { table });
    await assert.rejects(
      fence.run(await token(60n), 'acct', () => 1),
      (err: Error) => {
        assert.ok(err instanceof FenceNotInstalledError);
        assert.match(err.message, /has no column etcd_id .*call install\(\)/);
        return true;
      },
    );
    await fence.install();
    await fence.install(); // again: nothing to add
    await assert.rejects(
      fence.run(await token(40n), 'acct', () => 1),
      StaleTokenError,
    );
    assert.equal(await fence.run(await token(50n), 'acct', () => 'adopted'), 'adopted');
    const id = (await db.query<{ etcd_id: string }>(`SELECT etcd_id FROM ${table} WHERE resource = 'acct'`)).rows[0]!.etcd_id;
    assert.match(id, /^[0-9a-f]{16}-[0-9a-f]{16}$/);

    await using r = redisClient(redisServer);
    const rf = new RedisFence(r);
    const key = unique('earlier');
    await r.set(rf.fenceKey(key), '50');
    await assert.rejects(rf.set(await token(40n), key, 'stale'), StaleTokenError);
    await rf.set(await token(60n), key, 'adopted');
    assert.equal(await r.get(rf.fenceKey(key)), `60 ${id}`);
    assert.equal(await rf.highestToken(key), 60n);
  });

  it('a user whose role reaches only its lock prefix: a clear PermissionDeniedError saying what to grant, then it fences', async (t) => {
    const pgServer = postgres.need(t);
    if (!pgServer) return;
    await using db = pool(pgServer);
    const resource = unique('granted');
    const fence = new PostgresFence(db, { table: 'fences' });
    await fence.install();
    await using etcd = await startEtcd();
    const ctl = (...args: string[]) =>
      run(etcd.etcdctlBinary ?? 'etcdctl', [`--endpoints=${etcd.endpoints[0]}`, ...args], { env: { ...process.env, ETCDCTL_API: '3' } });
    await ctl('user', 'add', 'root:r00t-Pw-f3nce', '--interactive=false');
    await ctl('user', 'add', 'alice:al1ce-Pw-f3nce', '--interactive=false');
    await ctl('role', 'add', 'locker');
    await ctl('role', 'grant-permission', 'locker', '--prefix=true', 'readwrite', 'locks/');
    await ctl('user', 'grant-role', 'alice', 'locker');
    await ctl('auth', 'enable');
    await using alice = new Client({ endpoints: etcd.endpoints, auth: { username: 'alice', password: 'al1ce-Pw-f3nce' } });
    await using root = new Client({ endpoints: etcd.endpoints, auth: { username: 'root', password: 'r00t-Pw-f3nce' } });
    await using s = await Session.create(alice, { ttl: 30 });
    await using lock = await new Mutex(s, 'locks/granted').lock();
    const write = (h: LockHandle) => fence.run(h, resource, () => 'written');
    const denied = (grant: string) => (err: unknown) => {
      assert.ok(err instanceof PermissionDeniedError, String(err));
      assert.ok(err.message.includes(`etcdctl role grant-permission <role> ${grant} ${ETCD_ID_KEY}`), err.message);
      return true;
    };
    await assert.rejects(write(lock), denied('read'));
    await ctl('--user=root:r00t-Pw-f3nce', 'role', 'grant-permission', 'locker', 'read', ETCD_ID_KEY);
    await assert.rejects(write(lock), denied('readwrite')); // may read it, but it is not there yet, and it may not create it
    await using rs = await Session.create(root, { ttl: 30 });
    await using rootLock = await new Mutex(rs, 'locks/root').lock();
    await fence.run(rootLock, unique('root'), () => undefined); // creates the etcd id
    assert.equal(await write(lock), 'written');
  });
});
