// The fencing tests' shared parts (test/fencing-postgres.test.ts, test/fencing-redis.test.ts): each
// file gets its own etcd and its own helpers bound to it; the database servers are started by the
// file that needs them (test/db-servers.ts).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import pg from 'pg';
import { MetricReader } from '@opentelemetry/sdk-metrics';
import { type Client, Mutex, Session, type LockHandle } from '../src/index.js';
import type { HeldFencingHandle } from '../src/fencing/index.js';
import type { EtcdCluster, PostgresServer, RedisServer } from '../src/testing/index.js';
import { ATTR, METRIC } from '../src/metrics/names.js';
import { Holder, killHolders, type HolderEvent } from './fence-holders.js';
import { etcdForFile } from './helpers.js';

/** A name no other test uses, valid as a PostgreSQL identifier and a Redis key. */
export const unique = (scope: string): string => `${scope}_${randomBytes(4).toString('hex')}`;

/** A pg Pool on the file's PostgreSQL for one test; `await using` ends it. */
export function pool(server: PostgresServer): pg.Pool & AsyncDisposable {
  const p = new pg.Pool({ connectionString: server.connectionString, max: 4 });
  p.on('error', () => {}); // an idle client's error after end(): pg emits it on the pool
  return Object.assign(p, { [Symbol.asyncDispose]: () => p.end() });
}

/** An ioredis client on the file's Redis for one test; `await using` disconnects it. */
export function redisClient(server: RedisServer): Redis & AsyncDisposable {
  const r = new Redis(server.url);
  return Object.assign(r, { [Symbol.asyncDispose]: async () => void (await r.quit()) });
}

/** A table `<resource>_log` for holders' writes: one row per applied write, in commit order. */
export async function logTable(db: pg.Pool, resource: string): Promise<void> {
  await db.query(`CREATE TABLE "${resource}_log" (id bigserial PRIMARY KEY, token bigint NOT NULL, value text NOT NULL)`);
}

export async function logRows(db: pg.Pool, resource: string): Promise<{ token: bigint; value: string }[]> {
  const r = await db.query<{ token: string; value: string }>(`SELECT token, value FROM "${resource}_log" ORDER BY id`);
  return r.rows.map((row) => ({ token: BigInt(row.token), value: row.value }));
}

export type Store = 'postgres' | 'redis';

/** The race's verdict from the writes applied, in the order they were applied. */
export function checkRace(events: HolderEvent[], applied: bigint[], stored: bigint | undefined): void {
  for (let i = 1; i < applied.length; i++)
    assert.ok(applied[i]! >= applied[i - 1]!, `write ${i} (token ${applied[i]}) applied after token ${applied[i - 1]}`);
  const appliedEvents = events.filter((e) => e.applied).map((e) => BigInt(e.token as string));
  assert.deepEqual([...applied].sort(cmp), appliedEvents.sort(cmp), 'the writes reported applied are those in the data');
  assert.ok(
    events.some((e) => !e.applied),
    'stale writes were offered (each round after the first offers one)',
  );
  for (const e of events.filter((e) => !e.applied)) {
    assert.ok(BigInt(e.highest as string) > BigInt(e.token as string), `a refusal names a higher stored token: ${JSON.stringify(e)}`);
  }
  const max = events.map((e) => BigInt(e.token as string)).reduce((a, b) => (a > b ? a : b));
  assert.equal(stored, max, 'the stored token is the highest of all');
  assert.equal(applied.at(-1), max, 'the last write applied is the highest token');
}

const cmp = (a: bigint, b: bigint): number => (a < b ? -1 : a > b ? 1 : 0);

/** The counter of refused stale writes, read from a real OpenTelemetry SDK. */
export class Counted extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
  async refused(store: Store): Promise<number> {
    const { resourceMetrics } = await this.collect();
    const m = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).find((x) => x.descriptor.name === METRIC.fencingRefused);
    return (m?.dataPoints ?? []).filter((p) => p.attributes[ATTR.fencingStore] === store).reduce((a, p) => a + (p.value as number), 0);
  }
}
/** This file's etcd (a fresh key prefix per test via `fresh`), and the helpers that use it. */
export function fencingFixture(root: string) {
  let cluster: EtcdCluster;
  let client: Client;
  let shared: Promise<Session> | undefined;
  const fresh = etcdForFile(root, (e, c) => ((cluster = e), (client = c)), {
    beforeChecks: async () => {
      await killHolders();
      await (await shared)?.close();
    },
  });
  const etcd = (): EtcdCluster => cluster;

  /**
   * A handle of our own making with a fixed token that always claims to hold, on a session of the
   * file's etcd (one for the file, made on first use): the fence learns the etcd id there.
   */
  async function token(n: bigint): Promise<HeldFencingHandle> {
    shared ??= Session.create(client, { ttl: 30 });
    return { fencingToken: n, assertHeld() {}, session: await shared };
  }

  /** A Session on the file's etcd, closed by `await using`. */
  async function session(ttl = 10): Promise<Session> {
    return Session.create(client, { ttl });
  }

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
    const holder = new Holder(['ghost', etcd().endpoints.join(','), lockName, '2', store, url, resource, 'ghost']);
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
    const holders = Array.from(
      { length: workers },
      (_, w) => new Holder(['race', etcd().endpoints.join(','), lockName, '10', store, url, resource, `w${w}`, String(rounds)]),
    );
    const events = (await Promise.all(holders.map((h) => h.rest()))).flat();
    assert.equal(events.length, workers * (2 * rounds - 1));
    for (const e of events) assert.equal(e.event, 'write', JSON.stringify(e));
    return events;
  }

  return { fresh, etcd, session, token, ghost, race };
}
