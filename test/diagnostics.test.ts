// Hooks without OpenTelemetry: the `etcd-concurrency:*` diagnostics channels and
// the optional pino-shaped `logger`, against a real single-member etcd (behind a TCP proxy where a
// stream must break or a renewal go unanswered). Every test waits on the event itself.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import diagnosticsChannel from 'node:diagnostics_channel';
import {
  Client,
  DIAGNOSTICS_CHANNEL,
  Election,
  LockLostError,
  Mutex,
  NotLeaderError,
  Session,
  SessionExpiredError,
  type Logger,
} from '../src/index.js';
import { channels } from '../src/diagnostics.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { aborted, closedPort, etcdForFile } from './helpers.js';

const ROOT = 'test/diagnostics/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** The next message published on `name` that `match` accepts; unsubscribes itself. */
function next<T>(name: string, match: (m: T) => boolean = () => true): Promise<T> {
  const keepAlive = setInterval(() => {}, 1 << 30);
  return new Promise((resolve) => {
    const fn = (m: unknown): void => {
      if (!match(m as T)) return;
      diagnosticsChannel.unsubscribe(name, fn);
      clearInterval(keepAlive);
      resolve(m as T);
    };
    diagnosticsChannel.subscribe(name, fn);
  });
}

/** A logger that records its calls. */
function recordingLogger(): Logger & { lines: { level: string; fields: Record<string, unknown>; message: string }[] } {
  const lines: { level: string; fields: Record<string, unknown>; message: string }[] = [];
  const at = (level: string) => (fields: object, message: string) =>
    void lines.push({ level, fields: fields as Record<string, unknown>, message });
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

describe('diagnostics channels', { timeout: 60_000 }, () => {
  it('the names are etcd-concurrency:<area>:<event>, and nothing listens by default', () => {
    for (const name of Object.values(DIAGNOSTICS_CHANNEL)) assert.match(name, /^etcd-concurrency:[a-z]+:[a-z-]+$/);
    for (const [k, ch] of Object.entries(channels)) assert.equal(ch.hasSubscribers, false, k);
  });

  it('ownership:lost: a held lock whose key someone deleted, with its key, token and reason; the logger warns', async () => {
    const p = fresh('owner');
    const logger = recordingLogger();
    const c = new Client({ endpoints: etcd.endpoints, logger });
    const s = await Session.create(c);
    try {
      const h = await new Mutex(s, `${p}lock`).lock();
      const event = next<{ key: string; fencingToken: bigint; reason: string; error: unknown }>(
        DIAGNOSTICS_CHANNEL.ownershipLost,
        (e) => e.key === h.key,
      );
      const lost = aborted(h.signal);
      await client.delete(h.key);
      const e = await event;
      assert.equal(e.fencingToken, h.fencingToken);
      assert.equal(e.reason, 'key_deleted');
      assert.ok(e.error instanceof LockLostError);
      assert.equal(e.error, await lost, 'the error the signal aborts with');
      const line = logger.lines.find((l) => l.fields.event === DIAGNOSTICS_CHANNEL.ownershipLost);
      assert.ok(line, JSON.stringify(logger.lines));
      assert.equal(line.level, 'warn');
      assert.equal(line.fields.fencingToken, String(h.fencingToken), 'bigints logged as strings');
      assert.equal(line.fields.reason, 'key_deleted');
      await h.unlock();
    } finally {
      await s.close();
      await c.close();
    }
  });

  it('ownership:lost: a leader whose proclaim finds its key deleted (nobody watching it) is reported once, with the error proclaim throws', async () => {
    const p = fresh('proclaim');
    const s = await Session.create(client);
    const seen: { key: string; reason: string; error: unknown }[] = [];
    const fn = (m: unknown): void => void seen.push(m as (typeof seen)[number]);
    diagnosticsChannel.subscribe(DIAGNOSTICS_CHANNEL.ownershipLost, fn);
    try {
      const h = await new Election(s, `${p}election`).campaign('v1');
      await client.delete(h.key); // nobody read h.signal: the proclaim is the first to find out
      const err = await h.proclaim('v2').then(
        () => assert.fail('a proclaim without a key must fail'),
        (e: unknown) => e,
      );
      assert.ok(err instanceof NotLeaderError);
      assert.deepEqual(
        seen.map((e) => [e.key, e.reason, e.error === err]),
        [[h.key, 'key_deleted', true]],
      );
      assert.equal(h.signal.aborted, true);
      await h.resign();
      assert.equal(seen.length, 1, 'the resign of a lost leadership reports nothing more');
    } finally {
      diagnosticsChannel.unsubscribe(DIAGNOSTICS_CHANNEL.ownershipLost, fn);
      await s.close();
    }
  });

  it('session:lost: a lease revoked behind the session is lease_gone; the logger says it as an error', async () => {
    const logger = recordingLogger();
    const c = new Client({ endpoints: etcd.endpoints, logger });
    const s = await Session.create(c, { ttl: 3 });
    try {
      const event = next<{ leaseId: bigint; reason: string; error: unknown }>(
        DIAGNOSTICS_CHANNEL.sessionLost,
        (e) => e.leaseId === s.leaseId,
      );
      await client.leaseRevoke(s.leaseId);
      const e = await event;
      assert.equal(e.reason, 'lease_gone');
      assert.ok(e.error instanceof SessionExpiredError);
      assert.equal(e.error, s.signal.reason);
      const line = logger.lines.find((l) => l.fields.event === DIAGNOSTICS_CHANNEL.sessionLost);
      assert.equal(line?.level, 'error');
    } finally {
      await s.close();
      await c.close();
    }
  });

  it('a closed session is no loss: nothing on session:lost', async () => {
    const seen: unknown[] = [];
    const fn = (m: unknown): void => void seen.push(m);
    diagnosticsChannel.subscribe(DIAGNOSTICS_CHANNEL.sessionLost, fn);
    try {
      const s = await Session.create(client);
      await s.close();
      assert.deepEqual(seen, []);
    } finally {
      diagnosticsChannel.unsubscribe(DIAGNOSTICS_CHANNEL.sessionLost, fn);
    }
  });

  it('session:late-renewal and lease:reconnect: a renewal unanswered (the link black-holed) is reported, and the stalled keepalive stream replaced', async () => {
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint });
    const s = await Session.create(c, { ttl: 3 });
    try {
      const event = next<{ leaseId: bigint; waitedMs: number; remainingMs: number }>(
        DIAGNOSTICS_CHANNEL.lateRenewal,
        (e) => e.leaseId === s.leaseId,
      );
      const reconnect = next<{ endpoint: string; count: number; error?: unknown }>(
        DIAGNOSTICS_CHANNEL.leaseReconnect,
        (e) => e.endpoint === proxy.endpoint,
      );
      proxy.blackhole(true);
      const e = await event;
      const r = await reconnect;
      proxy.blackhole(false);
      assert.ok(e.waitedMs >= 250, `waited ${e.waitedMs} ms (the retry interval is at least 250 ms)`);
      assert.ok(e.remainingMs > 0, 'reported while the session still lives');
      assert.equal(r.count, 1, 'one lease to renew again');
      assert.equal(r.error, undefined, 'stalled, not failed');
    } finally {
      proxy.blackhole(false);
      await s.close().catch(() => {});
      await c.close();
      await proxy.close();
    }
  });

  it('watch:reconnect: the shared watch stream cut, with the endpoint and how many watches resume', async () => {
    const p = fresh('reconnect');
    const proxy = await startProxy(etcd.endpoints[0]!);
    const logger = recordingLogger();
    const c = new Client({ endpoints: proxy.endpoint, logger });
    const w = c.watch(`${p}k`);
    try {
      await w.created;
      const watchEvent = next<{ endpoint: string; count: number; error: unknown }>(
        DIAGNOSTICS_CHANNEL.watchReconnect,
        (e) => e.endpoint === proxy.endpoint,
      );
      proxy.cut();
      const e = await watchEvent;
      assert.equal(e.count, 1, 'one watch resumes');
      assert.ok(e.error instanceof Error, 'the stream failure');
      assert.ok(logger.lines.some((l) => l.level === 'info' && l.fields.event === DIAGNOSTICS_CHANNEL.watchReconnect));
    } finally {
      w.cancel();
      await c.close();
      await proxy.close();
    }
  });

  it('client:failover: a dead first endpoint, calls move to the next', async () => {
    const dead = `127.0.0.1:${await closedPort()}`;
    const c = new Client({ endpoints: [dead, etcd.endpoints[0]!] });
    const seen: { from: string; to: string }[] = [];
    const fn = (m: unknown): void => void seen.push(m as { from: string; to: string });
    diagnosticsChannel.subscribe(DIAGNOSTICS_CHANNEL.failover, fn);
    try {
      await c.get('diagnostics-probe');
      assert.deepEqual(
        seen.map(({ from, to }) => ({ from, to })),
        [{ from: dead, to: etcd.endpoints[0] }],
        'a failover event was published by the time the call returned',
      );
    } finally {
      diagnosticsChannel.unsubscribe(DIAGNOSTICS_CHANNEL.failover, fn);
      await c.close();
    }
  });
});
