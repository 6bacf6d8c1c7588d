// Fencing where the resource lives (etcd-concurrency/fencing), on the real servers: a real etcd, a
// real PostgreSQL started for this file (test/db-servers.ts). The ghost: a holder
// in a child process stops (SIGSTOP) right after its own check passed, stays stopped past its TTL,
// a second holder acquires and writes, and once woken the ghost's write is refused by the database
// itself. Holders racing from several processes: the stored token only grows and no write lands
// out of token order. A transaction failing midway changes nothing; bad input gets clear errors.
// Every wait is on an event (a line from a child, a lock granted, a promise), never on a sleep.
import { describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { once, type EventEmitter } from 'node:events';
import pg from 'pg';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { Client, Election, InvalidArgumentError, LockLostError, Mutex, RWMutex, Semaphore, Session } from '../src/index.js';
import type { PostgresServer } from '../src/testing/index.js';
import {
  FenceNotInstalledError,
  FenceTransactionError,
  FenceUnavailableError,
  PostgresFence,
  StaleTokenError,
  UntrustedFenceTableError,
  type HeldFencingHandle,
  type PgQueryable,
} from '../src/fencing/index.js';
import { postgresForFile } from './db-servers.js';
import { Holder } from './fence-holders.js';
import { Counted, checkRace, fencingFixture, logRows, logTable, pool, unique } from './fencing-fixture.js';

const { fresh, etcd, session, token, ghost, race } = fencingFixture('test/fencing-postgres/');
const postgres = postgresForFile();

describe('PostgresFence on a real PostgreSQL', () => {
  const need = (t: TestContext) => postgres.need(t);

  /** What {@link withFence} hands a test. */
  interface Fenced {
    server: PostgresServer;
    db: pg.Pool;
    /** A PostgresFence on table `fences`, installed. */
    fence: PostgresFence<pg.PoolClient>;
    /** A fresh resource name, with its log table created. */
    resource: string;
  }

  /** Runs `body` on the file's PostgreSQL (or skips without one) with a pool that ends with it, a fence and a resource. */
  async function withFence(t: TestContext, tag: string, body: (x: Fenced) => Promise<void>): Promise<void> {
    const server = need(t);
    if (!server) return;
    await using db = pool(server);
    const fence = new PostgresFence(db, { table: 'fences' });
    await fence.install();
    const resource = unique(tag);
    await logTable(db, resource);
    await body({ server, db, fence, resource });
  }

  it('the ghost: a holder stopped past its TTL wakes and its write is refused by the database; the data shows only the second holder', (t) =>
    withFence(t, 'ghost', async ({ server, db, fence, resource }) => {
      await ghost(
        'postgres',
        server.connectionString,
        resource,
        (lock) =>
          fence.run(lock, resource, (tx) =>
            tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES ($1, 'second')`, [String(lock.fencingToken)]),
          ),
        async () => (await logRows(db, resource)).map((r) => r.value),
        () => fence.highestToken(resource),
      );
      assert.equal(db.idleCount, db.totalCount, 'every client went back to the pool');
    }));

  it('holders racing from several processes: the stored token only grows and no write is applied out of token order', (t) =>
    withFence(t, 'race', async ({ server, db, fence, resource }) => {
      const events = await race('postgres', server.connectionString, resource, 3, 8);
      const rows = await logRows(db, resource);
      checkRace(
        events,
        rows.map((r) => r.token),
        await fence.highestToken(resource),
      );
    }));

  it('a transaction failing midway (thrown, SQL error, lock lost before COMMIT) leaves the fence row and the data unchanged', (t) =>
    withFence(t, 'midway', async ({ db, fence, resource }) => {
      const insert = (tx: pg.PoolClient, value: string, n: bigint) =>
        tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES ($1, $2)`, [String(n), value]);
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
      assert.deepEqual(
        (await logRows(db, resource)).map((r) => r.value),
        ['before'],
      );
      assert.equal(db.idleCount, db.totalCount, 'every client went back to the pool');
    }));

  it('a connection killed mid-transaction: the run fails, nothing is written, and the pool gets rid of that client', (t) =>
    withFence(t, 'killed', async ({ db, fence, resource }) => {
      const pids: number[] = [];
      const handle = await token(3n);
      const write = (value: string, kill: boolean) =>
        fence.run(handle, resource, async (tx) => {
          const pid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
          pids.push(pid);
          await tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES (3, $1)`, [value]);
          if (kill) await db.query('SELECT pg_terminate_backend($1)', [pid]); // from another connection of the pool
          await tx.query('SELECT 1');
        });
      await assert.rejects(write('killed', true));
      for (let i = 0; i < 4; i++) await write(`after ${i}`, false); // as many as the pool holds: none gets the dead client
      assert.ok(!pids.slice(1).includes(pids[0]!), 'the killed connection was not handed out again');
      assert.deepEqual(
        (await logRows(db, resource)).map((r) => r.value),
        ['after 0', 'after 1', 'after 2', 'after 3'],
      );
      assert.equal(db.idleCount, db.totalCount, 'every client went back to the pool');
    }));

  it('the same holder writes twice (equal token); a lower token is refused with the resource and both tokens, counted on the metrics', (t) =>
    withFence(t, 'equal', async ({ db, fence, resource }) => {
      const reader = new Counted();
      const meterProvider = new MeterProvider({ readers: [reader] });
      const metered = new Client({ endpoints: etcd().endpoints, meterProvider });
      try {
        await using s = await Session.create(metered);
        const name = `${fresh('equal')}lock`;
        const old = await new Mutex(s, name).lock();
        await old.unlock();
        await using lock = await new Mutex(s, name).lock();
        const write = (h: HeldFencingHandle, v: string) =>
          fence.run(h, resource, (tx) =>
            tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES ($1, $2) RETURNING value`, [String(h.fencingToken), v]),
          );
        assert.equal((await write(lock, 'one')).rows[0].value, 'one', 'run returns what fn returns');
        await write(lock, 'two');
        // A handle that says it still holds (its check cannot know): the database refuses it.
        const stale = await token(old.fencingToken);
        const err = await write(stale, 'stale').then(
          () => assert.fail('a lower token was accepted'),
          (e: unknown) => e,
        );
        assert.ok(err instanceof StaleTokenError);
        assert.equal(err.code, 'ERR_STALE_TOKEN');
        assert.equal(err.resource, resource);
        assert.equal(err.offeredToken, old.fencingToken);
        assert.equal(err.highestToken, lock.fencingToken);
        assert.match(err.message, /acquire again/);
        assert.equal(await reader.refused('postgres'), 0, 'a handle not of this library counts nowhere');
        // An old lock's own handle, released: refused by its own check before any round trip.
        await assert.rejects(write(old, 'released'), LockLostError);
        assert.deepEqual(
          (await logRows(db, resource)).map((r) => r.value),
          ['one', 'two'],
        );
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
    }));

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
    await assert.rejects(
      fence.run(r, resource, () => 'read'),
      (err: Error) => err instanceof InvalidArgumentError && /read lock/.test(err.message),
    );
    await r.unlock();
    await using permit = await new Semaphore(s, `${p}sem`, { permits: 2 }).acquire();
    await assert.rejects(
      fence.run(permit, resource, () => 'permit'),
      (err: Error) => err instanceof InvalidArgumentError && /semaphore permit/.test(err.message),
    );
  });

  it('bad input: an unknown handle, one without a session, a table missing without install(), a bad table name, a closed pool: clear errors', async (t) => {
    const server = need(t);
    if (!server) return;
    const db = pool(server);
    t.after(() => (db.ended ? undefined : db.end()));
    const resource = unique('bad');
    const missing = new PostgresFence(db, { table: unique('never_installed') });
    await assert.rejects(
      missing.run(await token(5n), resource, () => 1),
      (err: Error) => {
        assert.ok(err instanceof FenceNotInstalledError);
        assert.equal((err as unknown as { code: string }).code, 'ERR_FENCE_NOT_INSTALLED');
        assert.match(err.message, /call install\(\)/);
        return true;
      },
    );
    const fence = new PostgresFence(db, { table: 'fences' });
    await fence.install();
    for (const [i, bad] of [
      {},
      null,
      'lock',
      { fencingToken: 5, assertHeld() {} },
      { fencingToken: 0n, assertHeld() {} },
      { fencingToken: 5n },
    ].entries()) {
      await assert.rejects(
        fence.run(bad as HeldFencingHandle, resource, () => 1),
        (err: Error) => err instanceof InvalidArgumentError && /fencingToken/.test(err.message),
        `bad handle ${i}`,
      );
    }
    // A handle of one's own without the session its token came from: the fence could not tell its etcd.
    await assert.rejects(
      fence.run({ fencingToken: 5n, assertHeld() {} } as unknown as HeldFencingHandle, resource, () => 1),
      (err: Error) => err instanceof InvalidArgumentError && /has no session/.test(err.message) && /`session`/.test(err.message),
    );
    await assert.rejects(
      fence.run(await token(5n), '', () => 1),
      InvalidArgumentError,
    );
    for (const table of ['fences; DROP TABLE fences', 'a"b', 'x.y.z', '1abc', '', 'a'.repeat(64)]) {
      assert.throws(() => new PostgresFence(db, { table }), InvalidArgumentError, table);
    }
    assert.throws(() => new PostgresFence({} as pg.Pool), InvalidArgumentError);
    // Names are quoted: a schema-qualified one works, and case is kept.
    await db.query('CREATE SCHEMA IF NOT EXISTS fencing_test');
    const qualified = new PostgresFence(db, { table: 'fencing_test.Fences' });
    await qualified.install();
    await qualified.run(await token(7n), resource, () => 1);
    assert.equal((await db.query(`SELECT token FROM fencing_test."Fences" WHERE resource = $1`, [resource])).rows[0].token, '7');
    assert.equal(db.idleCount, db.totalCount, 'every client went back to the pool');
    await db.end();
    await assert.rejects(
      fence.run(await token(9n), resource, () => 1),
      (err: Error) => {
        assert.ok(err instanceof FenceUnavailableError);
        assert.match(err.message, /end\(\)/);
        assert.ok(err.cause instanceof Error, 'the driver error is the cause');
        return true;
      },
    );
  });

  // The bound stops a hang of the file on a build where the frozen holder blocks its successor
  // forever; on a sound build the successor writes within a few TTLs.
  it(
    'a holder frozen inside run() for good: PostgreSQL ends its transaction after the stall bound (its TTL), and the next holder writes',
    {
      timeout: 120_000,
    },
    (t) =>
      withFence(t, 'frozen', async ({ server, db, fence, resource }) => {
        const lockName = `${fresh('frozen')}lock`;
        const holder = new Holder(['freeze', etcd().endpoints.join(','), lockName, '2', 'postgres', server.connectionString, resource]);
        const frozen = BigInt((await holder.next('frozen')).token as string);
        await using s = await session(2);
        // Granted once the frozen holder's lease has expired; its transaction still holds the fence row.
        await using lock = await new Mutex(s, lockName).lock();
        assert.ok(lock.fencingToken > frozen);
        await fence.run(lock, resource, (tx) =>
          tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES ($1, 'second')`, [String(lock.fencingToken)]),
        );
        assert.deepEqual(
          (await logRows(db, resource)).map((r) => r.value),
          ['second'],
          "the frozen holder's row went with its transaction",
        );
        assert.equal(await fence.highestToken(resource), lock.fencingToken);
      }),
  );

  it('a successor waits for the fence row as long as its handle holds, asking again each stallTimeoutMs, and stops once released', (t) =>
    withFence(t, 'waiting', async ({ db, resource }) => {
      const fence = new PostgresFence(db, { table: 'fences', stallTimeoutMs: 100 });
      await fence.run(await token(1n), resource, () => undefined);
      // Another transaction holds the fence row, and lets it go only when told.
      const blocker = await db.connect();
      try {
        await blocker.query('BEGIN');
        await blocker.query('SELECT token FROM fences WHERE resource = $1 FOR UPDATE', [resource]);
        const { session: s } = await token(2n);
        /** A handle that counts its checks (one before the transaction, then one per bound waited) and can be released. */
        const waiter = () => {
          let checks = 0;
          let released = false;
          const asked: Array<() => void> = [];
          const handle: HeldFencingHandle = {
            fencingToken: 2n,
            session: s,
            assertHeld() {
              checks++;
              for (const a of asked.splice(0)) a();
              if (released) throw new LockLostError('released by the test', 'test/lock', { reason: 'released' });
            },
          };
          /** Resolves once the handle was checked `n` times. */
          const checked = (n: number): Promise<void> =>
            new Promise((resolve) => {
              const again = (): void => (checks >= n ? resolve() : void asked.push(again));
              again();
            });
          return { handle, checked, release: () => void (released = true) };
        };
        const first = waiter();
        const written = fence.run(first.handle, resource, () => 'written');
        await first.checked(3); // waited two whole bounds for the row
        await blocker.query('COMMIT');
        assert.equal(await written, 'written');

        await blocker.query('BEGIN');
        await blocker.query('SELECT token FROM fences WHERE resource = $1 FOR UPDATE', [resource]);
        const second = waiter();
        const given = fence.run(second.handle, resource, () => 'never');
        await second.checked(2);
        second.release();
        await assert.rejects(given, LockLostError);
        await blocker.query('COMMIT');
      } finally {
        blocker.release();
      }
      assert.equal(await fence.highestToken(resource), 2n);
    }));

  it('stallTimeoutMs bounds each statement and each pause inside run(): past it PostgreSQL ends the transaction, and nothing is written', (t) =>
    withFence(t, 'stall', async ({ db, resource }) => {
      const fence = new PostgresFence(db, { table: 'fences', stallTimeoutMs: 200 });
      const handle = await token(5n);
      await assert.rejects(
        fence.run(handle, resource, async (tx) => {
          await tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES (5, 'long statement')`);
          await tx.query('SELECT pg_sleep(30)');
        }),
        (err: { code?: string }) => err.code === '57014', // query_canceled, by statement_timeout
      );
      // A pause between statements: PostgreSQL ends the connection, which pg reports as an 'error'.
      await assert.rejects(
        fence.run(handle, resource, async (tx) => {
          await tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES (5, 'paused')`);
          await once(tx as unknown as EventEmitter, 'error');
          await tx.query('SELECT 1');
        }),
        (err: Error) => err instanceof FenceTransactionError && /stalled longer than stallTimeoutMs \(200 ms\)/.test(err.message),
      );
      assert.deepEqual(await logRows(db, resource), []);
      assert.equal(await fence.highestToken(resource), undefined);
      assert.equal(db.idleCount, db.totalCount, 'every client went back to the pool');
      assert.throws(() => new PostgresFence(db, { stallTimeoutMs: 0 }), InvalidArgumentError);
      assert.throws(() => new PostgresFence(db, { stallTimeoutMs: 1.5 }), InvalidArgumentError);
    }));

  it("install() refuses a fence table another role made first (public schema before PostgreSQL 15), and takes one in the application's schema", async (t) => {
    const server = need(t);
    if (!server) return;
    await using admin = pool(server);
    const app = unique('app');
    const mallory = unique('mallory');
    await admin.query(`CREATE ROLE ${app} LOGIN`);
    await admin.query(`CREATE ROLE ${mallory} LOGIN`);
    await admin.query('GRANT CREATE ON SCHEMA public TO PUBLIC'); // what PostgreSQL before 15 grants
    await using _revoke = { [Symbol.asyncDispose]: async () => void (await admin.query('REVOKE CREATE ON SCHEMA public FROM PUBLIC')) };
    const as = (role: string) => pool({ ...server, connectionString: server.connectionString.replace('postgres@', `${role}@`) });
    const table = unique('shared');
    {
      await using m = as(mallory);
      await m.query(`CREATE TABLE ${table} (resource text PRIMARY KEY, token bigint NOT NULL, etcd_id text)`);
      await m.query(`GRANT ALL ON ${table} TO PUBLIC`);
    }
    await using db = as(app);
    await assert.rejects(new PostgresFence(db, { table }).install(), (err: Error) => {
      assert.ok(err instanceof UntrustedFenceTableError);
      assert.equal(err.code, 'ERR_FENCE_TABLE_UNTRUSTED');
      assert.deepEqual([err.table, err.owner, err.user], [table, mallory, app]);
      assert.match(err.message, /a schema your application owns/);
      return true;
    });
    // In a schema the application owns: its own table. A table the superuser made is trusted too.
    await admin.query(`CREATE SCHEMA ${app} AUTHORIZATION ${app}`);
    const own = new PostgresFence(db, { table: `${app}.fences` });
    await own.install();
    await own.run(await token(3n), 'r', () => undefined);
    await admin.query(`CREATE TABLE ${app}.by_admin (resource text PRIMARY KEY, token bigint NOT NULL, etcd_id text)`);
    await admin.query(`GRANT ALL ON ${app}.by_admin TO ${app}`);
    await new PostgresFence(db, { table: `${app}.by_admin` }).install();
  });

  it("a transaction not the fence's own from BEGIN to COMMIT is refused: another open on the Client, an error caught inside fn, a COMMIT inside fn", async (t) => {
    const server = need(t);
    if (!server) return;
    const c = new pg.Client({ connectionString: server.connectionString });
    await c.connect();
    try {
      const fence = new PostgresFence(c, { table: 'fences' });
      await fence.install();
      const resource = unique('own');
      await c.query(`CREATE TABLE "${resource}_log" (id bigserial PRIMARY KEY, token bigint NOT NULL, value text NOT NULL)`);
      const insert = (tx: PgQueryable, value: string) => tx.query(`INSERT INTO "${resource}_log" (token, value) VALUES (4, $1)`, [value]);
      const handle = await token(4n);
      // Other code's transaction, open on the same Client.
      await c.query('BEGIN');
      let ran = false;
      await assert.rejects(
        fence.run(handle, resource, () => (ran = true)),
        (err: Error) => err instanceof FenceTransactionError && /already open on this Client/.test(err.message),
      );
      assert.equal(ran, false, 'fn did not run');
      await c.query('ROLLBACK');
      // An SQL error caught inside fn: PostgreSQL turns the COMMIT into a ROLLBACK, and says so in
      // its answer (a driver that does not report its transaction status, so that only the answer tells).
      const plain = new PostgresFence({ query: (text: string, values?: unknown[]) => c.query(text, values) }, { table: 'fences' });
      await assert.rejects(
        plain.run(handle, resource, async (tx) => {
          await insert(tx, 'before the error');
          await tx.query('SELECT no_such_column FROM fences').catch(() => {});
        }),
        (err: Error) => err instanceof FenceTransactionError && /its error was caught inside fn/.test(err.message),
      );
      // A COMMIT inside fn: what follows runs on its own, unfenced, and the run says so.
      await assert.rejects(
        fence.run(handle, resource, async (tx) => {
          await tx.query('COMMIT');
          await insert(tx, 'after a COMMIT');
        }),
        (err: Error) => err instanceof FenceTransactionError && /ran on its own, unfenced/.test(err.message),
      );
      assert.deepEqual(
        (await c.query(`SELECT value FROM "${resource}_log" ORDER BY id`)).rows.map((r) => r.value),
        ['after a COMMIT'],
      );
      assert.equal(await fence.run(handle, resource, () => 'fine'), 'fine', 'the Client still serves fenced runs');
    } finally {
      await c.end();
    }
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
        fence.run(await token(10n), resource, async (tx) => (await tx.query('SELECT 1 AS one')).rows[0].one),
        fence.run(await token(12n), resource, () => 'twelve'),
        fence.run(await token(11n), resource, () => 'eleven'),
      ]);
      assert.deepEqual(
        results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).name)),
        [1, 'twelve', 'StaleTokenError'],
      );
      assert.equal(await fence.highestToken(resource), 12n);
    } finally {
      await c.end();
    }
  });
});
