// etcd-concurrency/testing's throwaway PostgreSQL and Redis: each starts on a free loopback port in
// its own temp dir, answers there, and stop() ends the process and removes the dir (twice is
// fine). A missing install is a ServerNotFoundError that says what to install.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { Redis } from 'ioredis';
import pg from 'pg';
import { findPostgres, findRedis, ServerNotFoundError, startPostgres, startRedis } from '../src/testing/index.js';
import { skipWithout } from './db-servers.js';

/** True while a process with this pid exists. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

test('startPostgres: a PostgreSQL on a loopback port, as the postgres user when root; stop() ends it and removes its dir', async (t) => {
  if (skipWithout(t, 'PostgreSQL', findPostgres() ? undefined : 'PostgreSQL is not installed')) return;
  const server = await startPostgres();
  try {
    assert.match(server.connectionString, /^postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres$/);
    const c = new pg.Client({ connectionString: server.connectionString });
    await c.connect();
    const r = await c.query<{ v: string }>("SELECT current_setting('server_version') AS v");
    await c.end();
    assert.equal(r.rows[0]!.v.split('.')[0], server.version);
    if (process.getuid?.() === 0) assert.notEqual(statSync(`${server.dir}/data`).uid, 0, "the data dir is not root's");
  } finally {
    await server.stop();
  }
  assert.ok(!alive(server.pid), 'the server process is gone');
  assert.ok(!existsSync(server.dir), 'its dir is removed');
  await server.stop(); // idempotent
});

test('startRedis: a Redis on a loopback port, persisting nothing; stop() ends it and removes its dir', async (t) => {
  if (skipWithout(t, 'Redis', findRedis() ? undefined : 'redis-server is not installed')) return;
  const server = await startRedis();
  try {
    const r = new Redis(server.url);
    assert.equal(await r.ping(), 'PONG');
    assert.deepEqual(await r.config('GET', 'save'), ['save', '']);
    assert.deepEqual(await r.config('GET', 'appendonly'), ['appendonly', 'no']);
    await r.quit();
  } finally {
    await server.stop();
  }
  assert.ok(!alive(server.pid), 'the server process is gone');
  assert.ok(!existsSync(server.dir), 'its dir is removed');
  await server.stop();
});

test('a server that is not installed: ServerNotFoundError naming where it looked and what to install', async () => {
  await assert.rejects(startPostgres({ binDir: '/nonexistent/bin' }), (err: Error) => {
    assert.ok(err instanceof ServerNotFoundError);
    assert.equal(err.server, 'postgres');
    assert.match(err.message, /\/nonexistent\/bin.*apt-get install postgresql/);
    return true;
  });
  await assert.rejects(startRedis({ binary: '/nonexistent/redis-server' }), (err: Error) => {
    assert.ok(err instanceof ServerNotFoundError);
    assert.match(err.message, /\/nonexistent\/redis-server.*apt-get install redis-server/);
    return true;
  });
});
