// Renewals due at about the same time leave together: the keepalive hub sends them on a grid of
// slots (never after a lease's due time), every renewal of a slot in one write on the stream, as
// Go's lessor sends every due renewal from one loop. Judged by counting the writes on the client's
// LeaseKeepAlive stream (each write is one write on the connection) against the renewals they carry.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, MAX_TTL, Session } from '../src/index.js';
import { slotWidthMs } from '../src/client/lease.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { closeAll, etcdForFile, waitFor } from './helpers.js';

const ROOT = 'test/keepalive-batch/';
let etcd: EtcdCluster;
etcdForFile(ROOT, (e) => (etcd = e));

interface Counted {
  /** Writes on the LeaseKeepAlive stream, and the renewal requests they carried. */
  writes: number;
  requests: number;
  answers: number;
}

/**
 * Counts what `client` writes on its LeaseKeepAlive streams, by wrapping this instance's internal
 * openStream (the library never sees it): `write` is one request in one write, `writeMany` several.
 */
function countKeepAliveWrites(client: Client): Counted {
  const counted: Counted = { writes: 0, requests: 0, answers: 0 };
  type Stream = { write(m: unknown): unknown; writeMany?(ms: readonly unknown[]): unknown; on(e: 'data', f: () => void): unknown };
  type OpenStream = (method: { path: string }, ...rest: unknown[]) => Promise<{ stream: Stream }>;
  const conn = (client as unknown as { conn: { openStream: OpenStream } }).conn;
  const open = conn.openStream.bind(conn);
  conn.openStream = async (method, ...rest) => {
    const opened = await open(method, ...rest);
    if (!method.path.endsWith('/LeaseKeepAlive')) return opened;
    const s = opened.stream;
    const write = s.write.bind(s);
    s.write = (m) => {
      counted.writes++;
      counted.requests++;
      return write(m);
    };
    const writeMany = s.writeMany?.bind(s);
    if (writeMany) {
      s.writeMany = (ms) => {
        counted.writes++;
        counted.requests += ms.length;
        return writeMany(ms);
      };
    }
    s.on('data', () => void counted.answers++);
    return opened;
  };
  return counted;
}

describe('renewals due together', () => {
  it('sessions created together renew in a few writes, not one write per renewal', { timeout: 60_000 }, async () => {
    await using c = new Client({ endpoints: etcd.endpoints });
    const counted = countKeepAliveWrites(c);
    // TTL 12: a renewal every 4 s on slots of 500 ms. Twenty sessions created at once fall in a
    // handful of slots (all of them unless their creation spreads over seconds), and each slot's
    // sessions stay together: every renewal round is at most that many writes.
    const n = 20;
    const sessions = await Promise.all(Array.from({ length: n }, () => Session.create(c, { ttl: 12 })));
    try {
      await waitFor(() => {
        for (const s of sessions) if (s.signal.aborted) throw s.signal.reason;
        return counted.answers >= 2 * n;
      }, 'two renewals of each session answered');
      assert.ok(counted.requests >= 2 * n);
      assert.ok(
        counted.writes * 4 <= counted.requests,
        `${counted.requests} renewals left in ${counted.writes} writes: expected several renewals per write`,
      );
      for (const s of sessions) assert.equal(s.signal.aborted, false);
    } finally {
      await closeAll(sessions);
    }
  });

  it('healthy sessions arm no timer each between their renewals (the deadline is watched once one is late)', {
    timeout: 60_000,
  }, async () => {
    await using c = new Client({ endpoints: etcd.endpoints });
    const counted = countKeepAliveWrites(c);
    const n = 50;
    const sessions = await Promise.all(Array.from({ length: n }, () => Session.create(c, { ttl: 6 })));
    // Timers armed anywhere in the process (the library arms its own with the global setTimeout).
    let armed = 0;
    const setTimeout0 = globalThis.setTimeout;
    globalThis.setTimeout = ((...args: Parameters<typeof setTimeout0>) => {
      armed++;
      return setTimeout0(...args);
    }) as typeof setTimeout0;
    try {
      // Three renewals of each, 2 s apart: past the 5 s deadline the sessions started with, which a
      // timer per session would have met (and re-armed) in this window.
      await waitFor(() => {
        for (const s of sessions) if (s.signal.aborted) throw s.signal.reason;
        return counted.answers >= 3 * n;
      }, 'three renewals of each session answered');
      assert.ok(armed < n / 2, `${armed} timers armed while ${n} sessions renewed 3 times each: expected a few for all of them`);
    } finally {
      globalThis.setTimeout = setTimeout0;
      await closeAll(sessions);
    }
  });

  it('a renewal due beyond the longest timer (TTL MAX_TTL) arms no timer that overflows: the hub does not wake every millisecond', {
    timeout: 60_000,
  }, async () => {
    await using c = new Client({ endpoints: etcd.endpoints });
    // Node runs a timer asked for more than 2^31 - 1 ms after 1 ms (with a TimeoutOverflowWarning).
    const overflowing: number[] = [];
    const setTimeout0 = globalThis.setTimeout;
    globalThis.setTimeout = ((...args: Parameters<typeof setTimeout0>) => {
      const ms = args[1];
      if (ms !== undefined && ms > 2 ** 31 - 1) overflowing.push(ms);
      return setTimeout0(...args);
    }) as typeof setTimeout0;
    let s: Session | undefined;
    try {
      s = await Session.create(c, { ttl: MAX_TTL });
      // A round trip: a slot timer that fired after 1 ms has found its slot still ahead and re-armed.
      assert.equal((await c.leaseTimeToLive(s.leaseId)).grantedTtl, MAX_TTL);
      assert.deepEqual(overflowing, [], 'timers asked for beyond 2^31 - 1 ms, which Node runs after 1 ms');
      assert.equal(s.signal.aborted, false);
    } finally {
      globalThis.setTimeout = setTimeout0;
      await s?.close();
    }
  });

  it('a slot is at most an eighth of the renewal interval, and the slots of every interval share one grid', () => {
    for (const interval of [1000 / 3, 1000, 2000, 10_000 / 3, 10_000, 20_000, 3e12]) {
      const w = slotWidthMs(interval);
      assert.ok(w > 0 && w <= interval / 8, `interval ${interval}: slot ${w}`);
      assert.ok(500 % w === 0 || w % 500 === 0, `interval ${interval}: slot ${w} divides 500 ms or is a multiple of it`);
      assert.ok(w * 2 > interval / 8 || w === 1, `interval ${interval}: slot ${w} is the widest of the grid that fits`);
    }
  });
});
