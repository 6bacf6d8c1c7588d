// The leader health check on real etcd: runAsLeader feeds leaderHealth(), which turns unhealthy
// when leadership was lost and the task (here one that ignores its abort signal) has not stopped
// within the grace period, and healthy again once it stops; healthHandler serves it over node:http.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  type Client,
  healthHandler,
  InvalidArgumentError,
  leaderHealth,
  runAsLeader,
  type LeaderHandle,
  type LeaderHealth,
  type LeaderTerm,
} from '../src/index.js';
import { assertNoKeys, etcdForFile, settledOrHang, track, waitFor } from './helpers.js';

const ROOT = 'test/health/';
let client: Client;
const fresh = etcdForFile(ROOT, (_e, c) => (client = c));

/** A promise with its resolve function. */
function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** healthHandler served on a loopback port; closed with `await using`. */
async function serve(handler: Parameters<typeof createServer>[1]): Promise<{ url: string } & AsyncDisposable> {
  const server: Server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/healthz`,
    [Symbol.asyncDispose]: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * runAsLeader (one term) with a task that ignores its abort signal: it runs until `stop` is
 * resolved. Resolves `leading` with the handle once the task starts.
 */
function stubbornLeader(name: string, graceMs: number) {
  const health = leaderHealth({ graceMs });
  const leading = deferred<LeaderHandle>();
  const stop = deferred();
  const run = track(
    runAsLeader(client, name, { value: 'stubborn', once: true, health }, async (leader) => {
      leading.resolve(leader);
      await stop.promise; // never looks at leader.signal
      return 'finished';
    }),
  );
  return { health, leading: leading.promise, stop: () => stop.resolve(), run };
}

describe('leaderHealth fed by runAsLeader, with a task that ignores its abort signal', () => {
  it('healthy while leading; unhealthy once leadership is lost and the task runs past the grace period; healthy again when it stops', async () => {
    const p = fresh('stubborn');
    const { health, leading, stop, run } = stubbornLeader(`${p}election`, 0);
    await using http = await serve(healthHandler(health));
    try {
      const leader = await leading;
      assert.equal(health.healthy(), true, 'leading with the task running is healthy');
      let r = await fetch(http.url);
      assert.equal(r.status, 200);
      assert.equal(await r.text(), 'ok\n');
      // An operator deletes the leader key: leadership is lost, the task does not stop.
      assert.equal(await client.delete(leader.key), 1n);
      await waitFor(() => !health.healthy(), 'the check turns unhealthy');
      const status = health.check();
      assert.equal(status.healthy, false);
      assert.match(
        !status.healthy ? status.reason : '',
        new RegExp(`leadership of ${leader.key} \\(term ${leader.fencingToken}\\) ended .* has not stopped within the 0s grace period`),
      );
      r = await fetch(http.url);
      assert.equal(r.status, 503);
      assert.match(await r.text(), /has not stopped within the 0s grace period .*deleted/);
      r = await fetch(http.url, { method: 'HEAD' });
      assert.equal(r.status, 503);
      assert.equal(await r.text(), '', 'HEAD: no body');
      assert.equal(run.settled, false, 'runAsLeader waits for the task');
    } finally {
      stop();
    }
    assert.equal(await settledOrHang(run, 'runAsLeader ends once the task stops'), undefined, 'a lost term resolves undefined');
    assert.equal(health.healthy(), true, 'the task stopped: healthy again');
    assert.equal((await fetch(http.url)).status, 200);
    await assertNoKeys(client, p);
  });

  it('within the grace period a lost leadership whose task still runs is healthy', async () => {
    const p = fresh('grace');
    const { health, leading, stop, run } = stubbornLeader(`${p}election`, 3_600_000);
    try {
      const leader = await leading;
      const lost = new Promise((resolve) => leader.signal.addEventListener('abort', resolve, { once: true }));
      assert.equal(await client.delete(leader.key), 1n);
      await lost;
      assert.deepEqual(health.check(), { healthy: true }, 'an hour of grace has not passed');
    } finally {
      stop();
    }
    await settledOrHang(run, 'runAsLeader ends');
    assert.equal(health.healthy(), true);
    await assertNoKeys(client, p);
  });

  it('shutdown counts too: a task that ignores the shutdown signal turns the check unhealthy', async () => {
    const p = fresh('shutdown');
    const health = leaderHealth({ graceMs: 0 });
    const shutdown = new AbortController();
    const leading = deferred();
    const stop = deferred();
    const run = track(
      runAsLeader(client, `${p}election`, { value: 'v', signal: shutdown.signal, health }, async () => {
        leading.resolve();
        await stop.promise;
      }),
    );
    try {
      await leading.promise;
      shutdown.abort();
      await waitFor(() => !health.healthy(), 'unhealthy after shutdown with the task still running');
    } finally {
      stop.resolve();
    }
    assert.equal(await settledOrHang(run, 'runAsLeader ends'), undefined);
    assert.equal(health.healthy(), true);
    await assertNoKeys(client, p);
  });

  it('bad options are refused', async () => {
    assert.throws(() => leaderHealth({ graceMs: -1 }), InvalidArgumentError);
    assert.throws(() => leaderHealth({ graceMs: Number.NaN }), InvalidArgumentError);
    await assert.rejects(
      // Not a LeaderHealth: no ended() or stopped() for runAsLeader to call.
      runAsLeader(
        client,
        `${fresh('bad')}e`,
        { value: 'v', health: { check: () => ({ healthy: true }), healthy: () => true, graceMs: 0 } as unknown as LeaderHealth },
        () => 1,
      ),
      InvalidArgumentError,
    );
  });

  it("an application's own LeaderHealth is fed as leaderHealth()'s is: ended with the term, then stopped", async () => {
    const p = fresh('own');
    const told: string[] = [];
    const ended = deferred<LeaderTerm>();
    const own: LeaderHealth = {
      graceMs: 0,
      check: () => ({ healthy: true }),
      healthy: () => true,
      ended: (term, reason) => {
        told.push(`ended ${term.key} ${term.fencingToken} ${reason instanceof Error ? reason.name : String(reason)}`);
        ended.resolve(term);
      },
      stopped: () => void told.push('stopped'),
    };
    const leading = deferred<LeaderHandle>();
    const run = track(
      runAsLeader(client, `${p}election`, { value: 'v', once: true, health: own }, async (leader) => {
        leading.resolve(leader);
        await ended.promise; // runs on after its leadership ended, until the health check was told
        return 'finished';
      }),
    );
    const leader = await leading.promise;
    assert.equal(await client.delete(leader.key), 1n);
    assert.equal(await settledOrHang(run, 'runAsLeader ends'), undefined);
    assert.deepEqual(told, [`ended ${leader.key} ${leader.fencingToken} LeadershipLostError`, 'stopped']);
    await assertNoKeys(client, p);
  });
});

describe('healthHandler', () => {
  it('serves any HealthCheck or function: 200 ok, or 503 with the reason; a throwing check is a 503', async () => {
    let status: { healthy: true } | { healthy: false; reason: string } = { healthy: true };
    await using http = await serve(healthHandler(() => status));
    assert.equal((await fetch(http.url)).status, 200);
    status = { healthy: false, reason: 'the database is gone' };
    const r = await fetch(http.url);
    assert.equal(r.status, 503);
    assert.equal(r.headers.get('content-type'), 'text/plain; charset=utf-8');
    assert.equal(await r.text(), 'the database is gone\n');
    await using broken = await serve(
      healthHandler({
        check() {
          throw new Error('boom');
        },
      }),
    );
    const b = await fetch(broken.url);
    assert.equal(b.status, 503);
    assert.match(await b.text(), /the health check failed: boom/);
  });
});
