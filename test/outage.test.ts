// etcd stopped for longer than the TTL, then started again: runAsLeader keeps
// trying between terms (capped backoff, counted in etcd_concurrency.election.retries, published on
// the `etcd-concurrency:leader:retry` diagnostics channel) and leads again once etcd is back;
// withLock ends with the session's loss (its caller makes a new session: docs/locks.md's worker loop);
// `elect --listen` says the cluster is unreachable, and reports the leader of a fresh cluster.
// Every wait is on an event: the retries' own waits add up to more than the TTL before etcd starts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { MeterProvider, MetricReader, type MetricData } from '@opentelemetry/sdk-metrics';
import {
  Client,
  Election,
  InvalidArgumentError,
  DIAGNOSTICS_CHANNEL,
  Mutex,
  runAsLeader,
  Session,
  SessionExpiredError,
  UnavailableError,
  withLock,
  type LeaderRetryEvent,
} from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import { Probe } from './probe.js';
import { EventLog, aborted, within, assertCleanAndStop, killClis, runCli, settledOrHang, track, uniquePrefix } from './helpers.js';

const ROOT = 'test/outage/';
const TTL = 3;
let etcd: EtcdCluster;
let admin: Client;

before(async () => {
  etcd = await startEtcd();
  admin = new Client({ endpoints: etcd.endpoints });
});
after(async () => {
  try {
    await killClis();
  } finally {
    await assertCleanAndStop(admin, etcd, ROOT);
  }
});

class CollectingReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/** Retry events of election `name`, and a promise for the moment their waits add up to `ms`. */
function retries(name: string) {
  const events: LeaderRetryEvent[] = [];
  const waiters: { ms: number; resolve: () => void }[] = [];
  const onMessage = (m: unknown): void => {
    const e = m as LeaderRetryEvent;
    if (e.name !== name) return;
    events.push(e);
    const total = events.reduce((sum, x) => sum + x.delayMs, 0);
    for (const w of waiters.splice(0)) (total >= w.ms ? w.resolve : () => waiters.push(w))();
  };
  subscribe(DIAGNOSTICS_CHANNEL.leaderRetry, onMessage);
  return {
    events,
    /** Resolves once the retries have waited `ms` in all (so etcd has been down at least that long). */
    waited: (ms: number) => new Promise<void>((resolve) => waiters.push({ ms, resolve })),
    close: () => unsubscribe(DIAGNOSTICS_CHANNEL.leaderRetry, onMessage),
  };
}

/** A promise with its resolver. */
function deferred<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('runAsLeader through an outage longer than the TTL', () => {
  test('keeps trying between terms, reports each retry, and leads again on a new session once etcd is back', {
    timeout: 120_000,
  }, async () => {
    const name = `${ROOT}${uniquePrefix('leader').slice('test/'.length)}election`;
    const reader = new CollectingReader();
    const meterProvider = new MeterProvider({ readers: [reader] });
    const client = new Client({ endpoints: etcd.endpoints, meterProvider });
    const seen = retries(name);
    const shutdown = new AbortController();
    const terms: { token: bigint; lease: bigint }[] = [];
    const firstTerm = deferred<void>();
    const firstLost = deferred<unknown>();
    const secondTerm = deferred<void>();
    try {
      const run = track(
        runAsLeader(client, name, { value: 'svc', ttl: TTL, signal: shutdown.signal, maxRetryDelayMs: 400 }, async (leader) => {
          terms.push({ token: leader.fencingToken, lease: leader.session.leaseId });
          if (terms.length === 1) {
            firstTerm.resolve();
            firstLost.resolve(await aborted(leader.signal));
            return 'first';
          }
          secondTerm.resolve();
          await aborted(leader.signal);
          return 'second';
        }),
      );
      await firstTerm.promise;
      await etcd.kill(0);
      const reason = await firstLost.promise;
      assert.ok(reason instanceof Error, String(reason));
      // Down for longer than the TTL, by the retries' own clock; runAsLeader is still running.
      await Promise.race([
        seen.waited(TTL * 1000 + 500),
        run.promise.then(
          (v) => assert.fail(`runAsLeader ended with ${String(v)} during the outage`),
          (err: unknown) => assert.fail(`runAsLeader failed during the outage: ${String(err)}`),
        ),
      ]);
      assert.equal(run.settled, false, 'runAsLeader is still trying');
      assert.ok(seen.events.length >= 2);
      assert.deepEqual(
        seen.events.map((e) => e.attempt),
        seen.events.map((_, i) => i + 1),
        'attempts count up',
      );
      assert.ok(
        seen.events.every((e) => e.delayMs > 0 && e.delayMs <= 400),
        'each wait is capped',
      );
      assert.ok(
        seen.events.some((e) => e.error instanceof UnavailableError),
        seen.events.map((e) => String(e.error)).join('; '),
      );

      await etcd.restart(0);
      await secondTerm.promise;
      assert.equal(terms.length, 2);
      assert.ok(terms[1]!.token > terms[0]!.token, 'a new term, a larger fencing token');
      assert.notEqual(terms[1]!.lease, terms[0]!.lease, 'on a new session');

      const { resourceMetrics } = await reader.collect();
      const metric = resourceMetrics.scopeMetrics
        .flatMap((s) => s.metrics)
        .find((m: MetricData) => m.descriptor.name === 'etcd_concurrency.election.retries');
      const counted = (metric?.dataPoints ?? []).reduce((sum, p) => sum + (p.value as number), 0);
      assert.ok(counted >= seen.events.length, `retries counted in metrics: ${counted} of ${seen.events.length}`);

      shutdown.abort();
      assert.equal(await settledOrHang(run, 'runAsLeader ends on shutdown', 30_000), undefined);
    } finally {
      seen.close();
      shutdown.abort();
      if (!etcd.members[0]!.running) await etcd.restart(0);
      await client.close();
      await meterProvider.shutdown();
    }
  });

  test('shutdown while waiting between retries ends it at once with undefined; bad input still fails at once', {
    timeout: 60_000,
  }, async () => {
    const name = `${ROOT}${uniquePrefix('down').slice('test/'.length)}election`;
    const down = new Client({ endpoints: ['127.0.0.1:1'], dialTimeoutMs: 200 });
    const seen = retries(name);
    const shutdown = new AbortController();
    try {
      const run = track(runAsLeader(down, name, { value: 'x', signal: shutdown.signal, maxRetryDelayMs: 500 }, () => 'never'));
      await seen.waited(1);
      shutdown.abort();
      assert.equal(await settledOrHang(run, 'ends on shutdown'), undefined);
      await assert.rejects(
        runAsLeader(down, `${name}/`, { value: 'x' }, () => 1),
        InvalidArgumentError,
      );
    } finally {
      seen.close();
      await down.close();
    }
  });
});

describe('withLock through an outage longer than the TTL (decided: no retry; the caller makes a new session)', () => {
  test('a waiting withLock ends with SessionExpiredError; after etcd is back a new session takes the lock; nothing is left', {
    timeout: 120_000,
  }, async () => {
    const name = `${ROOT}${uniquePrefix('lock').slice('test/'.length)}lock`;
    const client = new Client({ endpoints: etcd.endpoints });
    const probe = new Probe(client);
    const holder = await Session.create(client, { ttl: TTL });
    const waiterSession = await Session.create(client, { ttl: TTL });
    try {
      const held = await new Mutex(holder, name).lock();
      let ran = false;
      const waiting = track(withLock(waiterSession, name, () => (ran = true)));
      // Waiting on its watch, every answer in: killed while its enqueue's answer was still on its way,
      // the enqueue would fail with UnavailableError (an outcome unknown is not a wait).
      await probe.blocked(1, 'the waiter queued and watching');
      assert.equal((await admin.getPrefix(`${name}/`)).kvs.length, 2, 'the waiter queued');
      await etcd.kill(0);
      await assert.rejects(settledOrHang(waiting, 'withLock ends with its session', 30_000), SessionExpiredError);
      assert.equal(ran, false);
      await aborted(held.signal);
      await etcd.restart(0);
      // The worker loop of docs/locks.md: a new session after a loss.
      const fresh = await Session.create(client, { ttl: TTL });
      try {
        assert.equal(await withLock(fresh, name, () => 'ran'), 'ran');
      } finally {
        await fresh.close();
      }
    } finally {
      if (!etcd.members[0]!.running) await etcd.restart(0);
      await holder.close().catch(() => {});
      await waiterSession.close().catch(() => {});
      await client.close();
    }
  });
});

/** Two adjacent free loopback ports (client, peer), so that a second cluster can take the first one's place. */
async function portPair(): Promise<number> {
  const { createServer } = await import('node:net');
  const listen = (port: number) =>
    new Promise<import('node:net').Server | undefined>((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(undefined));
      s.listen(port, '127.0.0.1', () => resolve(s));
    });
  for (;;) {
    const a = (await listen(0))!;
    const port = (a.address() as { port: number }).port;
    const b = await listen(port + 1);
    a.close();
    b?.close();
    if (b) return port;
  }
}

describe('the CLI through an outage', () => {
  test('`elect --listen` says etcd does not answer, keeps listening, and reports the leader of a fresh cluster that came back', {
    timeout: 120_000,
  }, async () => {
    const base = await portPair();
    const name = `${ROOT}${uniquePrefix('listen').slice('test/'.length)}election`;
    let first: EtcdCluster | undefined = await startEtcd({ basePort: base });
    let second: EtcdCluster | undefined;
    const c1 = new Client({ endpoints: first.endpoints });
    const s1 = await Session.create(c1, { ttl: TTL });
    await new Election(s1, name).campaign('old');
    const cli = runCli(['elect', '--listen', name, '--endpoints', first.endpoints[0]!]);
    try {
      await cli.next(/^leader key=\S+ term=\d+ lease=[0-9a-f]+ value=old$/);
      await c1.close();
      await first.stop(); // its data goes with it
      first = undefined;
      await cli.next(/etcd does not answer .*still listening for the leader of /, 'stderr');
      second = await startEtcd({ basePort: base });
      const c2 = new Client({ endpoints: second.endpoints });
      try {
        const s2 = await Session.create(c2, { ttl: TTL });
        const leader = await new Election(s2, name).campaign('new');
        await cli.next(/etcd answers again|another etcd cluster answers/, 'stderr');
        await cli.next(/^leader key=\S+ term=\d+ lease=[0-9a-f]+ value=new$/);
        await leader.resign();
        await cli.next(/^no leader$/);
        await s2.close();
      } finally {
        await c2.close();
      }
      assert.equal(await cli.kill('SIGINT'), 0);
    } finally {
      await cli.kill('SIGKILL');
      await c1.close();
      await first?.stop();
      await second?.stop();
    }
  });

  test('`elect` (campaigning) exits 3 with "leadership lost" when etcd stays down past the TTL (decided: as etcdctl elect; a supervisor or runAsLeader campaigns again)', {
    timeout: 120_000,
  }, async () => {
    const name = `${ROOT}${uniquePrefix('campaign').slice('test/'.length)}election`;
    const cli = runCli(['elect', name, 'me', '--ttl', String(TTL), '--endpoints', etcd.endpoints[0]!]);
    try {
      await cli.next(/^leader key=/);
      await etcd.kill(0);
      assert.equal(await cli.exited, 3, cli.stderr());
      assert.match(cli.stderr(), /leadership lost/);
    } finally {
      await cli.kill('SIGKILL');
      if (!etcd.members[0]!.running) await etcd.restart(0);
    }
    // Nobody could revoke the lease while etcd was down: it expires a TTL after etcd is back, and
    // the expiry deletes its key.
    const log = new EventLog(admin, `${name}/`);
    try {
      await log.ready;
      const left = (await admin.getPrefix(`${name}/`)).kvs.map((kv) => log.deleted(kv.key.toString()));
      await within(Promise.all(left), "the lost leader's lease to expire (its key deleted)", 30_000);
    } finally {
      await log.close();
    }
  });
});
