// Coalescing: the library's own Txns that one Client sends in the same tick go to etcd as one
// request of nested Txns (src/client/coalescer.ts). Every rule against a real etcd: what may share a
// request and what never does, each Txn's own answer, a request refused as a whole, an abort inside
// a request, and a lowered --max-txn-ops (with how etcd counts nested lists against it).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, LeaseNotFoundError, Mutex, Session } from '../src/index.js';
import { compare, op, prefixRange, type TxnResult } from '../src/client/kv.js';
import { DeadlineExceededError, EtcdError } from '../src/client/errors.js';
import type * as pb from '../src/proto/etcd.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import { Status, TransportError } from '../src/client/transport/transport.js';
import { etcdFile } from './helpers.js';
import { holdThenRefuse } from './helpers/late-attempt.js';
import { Sdk } from './metrics-sdk.js';
import { Probe } from './probe.js';

let etcd: EtcdCluster;
let client: Client;
const file = etcdFile('test/coalesce/', (e, c) => {
  etcd = e;
  client = c;
});

/** The Txns each request of `c` carried, in the order sent: one for a plain Txn, its nested ones for a shared one. */
function requestsOf(c: Client): pb.TxnRequest[][] {
  const sent: pb.TxnRequest[][] = [];
  const conn = c.conn;
  const call = conn.call.bind(conn);
  conn.call = ((method, request, ...rest) => {
    if (method.path.endsWith('/Txn')) {
      const r = request as pb.TxnRequest;
      const nested = (r.compare ?? []).length === 0 && (r.success ?? []).length > 0 && r.success!.every((o) => o.requestTxn);
      sent.push(nested ? r.success!.map((o) => o.requestTxn!) : [r]);
    }
    return call(method, request, ...rest);
  }) as typeof conn.call;
  return sent;
}

/** A Txn the engine would send: coalescible, in `scope` if given. */
function own(c: Client, request: pb.TxnRequest, scope?: string, options: { signal?: AbortSignal } = {}): Promise<TxnResult> {
  return c.txn(request, { idempotent: true, coalesce: scope === undefined ? {} : { scope }, ...options });
}

const putIfAbsent = (key: string, lease = 0n): pb.TxnRequest => ({
  compare: [compare.createRevision(key, '=', 0n)],
  success: [op.put(key, 'v', lease)],
  failure: [],
});

/** The keys a Txn writes or reads, as strings. */
function keysOf(t: pb.TxnRequest): string[] {
  const ops = [...(t.success ?? []), ...(t.failure ?? [])];
  return [
    ...(t.compare ?? []).map((c) => c.key!.toString()),
    ...ops.map((o) => (o.requestPut ?? o.requestRange ?? o.requestDeleteRange)!.key!.toString()),
  ];
}

describe('coalescing', () => {
  it("Txns of one tick share one request, each with its own compares and answer; the tick's first goes at once", async () => {
    const p = file.fresh('share');
    await using c = new Client({ endpoints: etcd.endpoints });
    await c.put(`${p}taken`, 'x');
    await c.put(`${p}read`, 'y');
    const sent = requestsOf(c);
    const results = await Promise.all([
      own(c, putIfAbsent(`${p}first`), `${p}a/`),
      own(c, putIfAbsent(`${p}b`), `${p}b/`),
      own(c, putIfAbsent(`${p}taken`), `${p}c/`),
      own(c, { compare: [], success: [op.get(`${p}read`)], failure: [] }),
    ]).finally(() => client.delete(p, { prefix: true }));
    assert.deepEqual(
      sent.map((r) => r.length),
      [1, 3],
      'the first alone and at once, the three after it in one request',
    );
    assert.deepEqual(
      results.map((r) => r.succeeded),
      [true, true, false, true],
    );
    assert.equal(results[3]!.responses[0]!.responseRange!.kvs![0]!.value!.toString(), 'y');
    // The shared request's revision is every nested Txn's: one write, one revision.
    assert.equal(results[1]!.header.revision, results[2]!.header.revision);
    assert.ok(results[1]!.header.revision > 0n);
  });

  it("the tests' Probe sees every request the client sends, a shared one and those the coalescer sends alone too", async () => {
    const p = file.fresh('probe');
    await using c = new Client({ endpoints: etcd.endpoints });
    const s = await Session.create(c, { ttl: 30 });
    const probe = new Probe(c);
    try {
      probe.reset();
      // Three lock() calls in one tick on names of their own: the first enqueue alone, the two after it shared.
      const held = await Promise.all(['a', 'b', 'c'].map((n) => new Mutex(s, `${p}${n}`).lock()));
      assert.deepEqual(
        probe.sent.map((x) => [x.method, x.puts]),
        [
          ['Txn', 1],
          ['Txn', 2],
        ],
        'two requests: one enqueue, then two in one request',
      );
      await Promise.all(held.map((h) => h.unlock()));
    } finally {
      await s.close();
    }
  });

  it("an application's own client.txn() goes alone, even in a tick of the library's", async () => {
    const p = file.fresh('alone');
    await using c = new Client({ endpoints: etcd.endpoints });
    const sent = requestsOf(c);
    await Promise.all([
      own(c, putIfAbsent(`${p}a`), `${p}a/`),
      c.txn(putIfAbsent(`${p}b`), { idempotent: true }),
      c.txn(putIfAbsent(`${p}c`)),
      own(c, putIfAbsent(`${p}d`), `${p}d/`),
      own(c, putIfAbsent(`${p}e`), `${p}e/`),
    ]);
    assert.deepEqual(sent.map((r) => r.length).sort(), [1, 1, 1, 2]);
    assert.ok(sent.find((r) => r.length === 2)!.every((t) => /[de]$/.test(keysOf(t)[0]!)));
    await client.delete(p, { prefix: true });
  });

  it('never two Txns of one scope, nor one writing what another writes, reads or compares', async () => {
    const p = file.fresh('rules');
    await using c = new Client({ endpoints: etcd.endpoints });
    const sent = requestsOf(c);
    const k = `${p}k`;
    await Promise.all([
      own(c, putIfAbsent(`${p}opener`)),
      // One scope, disjoint keys.
      own(c, putIfAbsent(`${p}s/1`), `${p}s/`),
      own(c, putIfAbsent(`${p}s/2`), `${p}s/`),
      // k written, then compared, written again, read in a range, and deleted by a range.
      own(c, putIfAbsent(k)),
      own(c, { compare: [compare.createRevision(k, '=', 0n)], success: [op.put(`${p}other`, '')], failure: [] }),
      own(c, { compare: [], success: [op.put(k, 'again')], failure: [] }),
      own(c, { compare: [], success: [op.range(prefixRange(p))], failure: [] }),
      own(c, { compare: [], success: [{ requestDeleteRange: { ...prefixRange(`${p}j`), rangeEnd: Buffer.from(`${p}l`) } }], failure: [] }),
    ]);
    for (const r of sent) {
      const keys = r.map(keysOf);
      assert.ok(!(keys.some((ks) => ks.includes(`${p}s/1`)) && keys.some((ks) => ks.includes(`${p}s/2`))), 'one scope, one request');
      // The five on k (or a range over it): one per request; the read of the whole prefix alone.
      const onK = keys.filter((ks) => ks.includes(k) || ks.includes(p) || ks.includes(`${p}j`));
      assert.ok(onK.length <= 1, `${onK.length} Txns on ${k} in one request`);
      if (keys.some((ks) => ks.includes(p))) assert.equal(r.length, 1, 'the prefix read shared a request with a write under it');
    }
    assert.ok(
      sent.some((r) => r.length > 1),
      'some did share a request',
    );
    await client.delete(p, { prefix: true });
  });

  it('random Txns are grouped as a check of every pair of their keys and ranges would group them', async () => {
    const p = file.fresh('spans');
    await using c = new Client({ endpoints: etcd.endpoints });
    const sent = requestsOf(c);
    // Keys next to each other in etcd's order: a key, the key + "\0", one extending it, one past it.
    const tails = ['', 'a', 'a\x00', 'a\x00\x00', 'aa', 'a\xff', 'a\xff\xff', 'b', 'b\x01', '\xff'];
    const key = (t: string): Buffer => Buffer.concat([Buffer.from(p), Buffer.from(t, 'latin1')]);
    const seed = Number(process.env.SPANS_SEED ?? Date.now() % 1_000_000);
    const random = mulberry32(seed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
    /** A key, or a range after it: to a later key, its prefix's end, or (not to write) without end. */
    const spanOf = (write: boolean): { key: Buffer; rangeEnd?: Buffer } => {
      const from = pick(tails);
      const r = random();
      if (r < 0.5) return { key: key(from) };
      const later = tails.filter((t) => Buffer.from(t, 'latin1').compare(Buffer.from(from, 'latin1')) > 0);
      if (r < 0.7 && later.length > 0) return { key: key(from), rangeEnd: key(pick(later)) };
      if (r < 0.9 || write) return prefixRange(key(from));
      return { key: key(from), rangeEnd: Buffer.from([0]) };
    };
    const opOf = (): pb.RequestOp => {
      const r = random();
      if (r < 0.4) return { requestRange: spanOf(false) };
      if (r < 0.7) return op.put(key(pick(tails)), 'v');
      return { requestDeleteRange: spanOf(true) };
    };
    /** At most one write per list: a Txn that etcd takes alone. */
    const listOf = (n: number): pb.RequestOp[] => {
      const ops: pb.RequestOp[] = [];
      for (let i = 0; i < n; i++) {
        const o = opOf();
        if (!o.requestRange && ops.some((x) => !x.requestRange)) continue;
        ops.push(o);
      }
      return ops;
    };
    for (let trial = 0; trial < 30; trial++) {
      const txns = Array.from({ length: 25 }, () => ({
        request: {
          compare: Array.from({ length: Math.floor(random() * 3) }, () => ({
            ...compare.createRevision(key(''), '>', 0n),
            ...spanOf(false),
          })),
          success: listOf(Math.floor(random() * 4)),
          failure: listOf(Math.floor(random() * 2)),
        },
        scope: pick([undefined, 's1/', 's2/', 's3/', 's4/']),
      }));
      // Idle: the last trial's shared request is answered, and the check phase after it has passed.
      await new Promise((resolve) => setImmediate(resolve));
      sent.length = 0;
      await Promise.all(txns.map((t) => own(c, t.request, t.scope)));
      // The first went out at once; the others in first fit, each batch checked pair by pair.
      const widest = (ids: number[]): number =>
        Math.max(...ids.map((i) => Math.max(...Object.values(txns[i]!.request).map((l) => l.length))));
      const expected: number[][] = [[0]];
      const batches: number[][] = [];
      for (let i = 1; i < txns.length; i++) {
        const b = batches.find((b) => b.every((j) => mayShare(txns[i]!, txns[j]!)) && b.length + 1 + widest([i, ...b]) <= 128);
        if (b) b.push(i);
        else batches.push([i]);
      }
      expected.push(...batches);
      assert.deepEqual(
        sent.map((r) => r.map((t) => txns.findIndex((x) => x.request === t))),
        expected,
        `trial ${trial} (SPANS_SEED=${seed})`,
      );
    }
    await client.delete(p, { prefix: true });
  });

  it("while a shared request is in flight (until the check phase after its answer) the tick's first waits for the check phase too", async () => {
    const p = file.fresh('busy');
    await using c = new Client({ endpoints: etcd.endpoints });
    const sent = requestsOf(c);
    const all: Promise<unknown>[] = [];
    /**
     * Sends `n` Txns in one tick; returns how many requests left at once, once its last Txn is
     * answered: in the tick its answer arrived (before that tick's check phase).
     */
    const tick = async (n: number, tag: string): Promise<number> => {
      const before = sent.length;
      const calls = Array.from({ length: n }, (_, i) => own(c, putIfAbsent(`${p}${tag}${i}`), `${p}${tag}${i}/`));
      all.push(...calls);
      const atOnce = sent.length - before;
      await calls.at(-1);
      return atOnce;
    };
    assert.equal(await tick(3, 'a'), 1, 'idle: the first at once');
    // Made as the shared request's answer arrives, as the calls it woke make theirs.
    assert.equal(await tick(2, 'b'), 0, 'a shared request answered in this tick: the first waits');
    assert.equal(await tick(1, 'c'), 0, 'again: a lone call waits, and goes alone');
    // c went alone: no shared request in flight, and the check phase after b's answer long past.
    assert.equal(await tick(1, 'd'), 1, 'idle again: a lone call goes at once');
    await Promise.all(all);
    assert.deepEqual(
      sent.map((r) => r.length),
      [1, 2, 2, 1, 1],
    );
    await client.delete(p, { prefix: true });
  });

  it('locks on one name from one client never share a request: distinct tokens, in FIFO order', async () => {
    const name = `${file.fresh('one-name')}lock`;
    const sessions = await file.sessions(8);
    const c = sessions[0]!.client;
    const sent = requestsOf(c);
    try {
      // Eight lock() calls at once on one name, and beside them locks on names of their own, so that
      // their Txns meet in the same ticks.
      const order: bigint[] = [];
      const others = sessions.map(async (s, i) => {
        for (let n = 0; n < 5; n++) await (await new Mutex(s, `${name}-other-${i}`).lock()).unlock();
      });
      const holds = sessions.map(async (s) => {
        const h = await new Mutex(s, name).lock();
        order.push(h.fencingToken);
        await h.unlock();
      });
      await Promise.all([...holds, ...others]);
      assert.equal(new Set(order).size, 8, 'eight distinct tokens');
      assert.deepEqual(
        order,
        [...order].sort((a, b) => (a < b ? -1 : 1)),
        'held in the order of the tokens',
      );
      const prefix = `${name}/`;
      for (const r of sent)
        assert.ok(r.filter((t) => keysOf(t).some((k) => k.startsWith(prefix))).length <= 1, 'two Txns of one lock in a request');
      assert.ok(
        sent.some((r) => r.length > 1),
        'some Txns did share a request',
      );
    } finally {
      await Promise.all(sessions.map((s: Session) => s.close()));
    }
  });

  it('a request refused as a whole is sent again Txn by Txn: each gets its own answer', async () => {
    const p = file.fresh('refused');
    await using c = new Client({ endpoints: etcd.endpoints });
    const [l1, l2, l3] = await Promise.all([c.leaseGrant(30), c.leaseGrant(30), c.leaseGrant(30)]);
    await c.leaseRevoke(l2!.id);
    const sent = requestsOf(c);
    try {
      const results = await Promise.allSettled([
        own(c, putIfAbsent(`${p}opener`, l1!.id)),
        own(c, putIfAbsent(`${p}1`, l1!.id), `${p}1/`),
        own(c, putIfAbsent(`${p}2`, l2!.id), `${p}2/`),
        own(c, putIfAbsent(`${p}3`, l3!.id), `${p}3/`),
      ]);
      assert.deepEqual(
        sent.map((r) => r.length),
        [1, 3, 1, 1, 1],
        'the shared request, then each of its Txns alone',
      );
      assert.equal(results[1]!.status, 'fulfilled');
      assert.equal(results[3]!.status, 'fulfilled');
      assert.ok(results[2]!.status === 'rejected' && results[2]!.reason instanceof LeaseNotFoundError, String(results[2]));
      assert.equal((await c.get(`${p}3`))?.lease, l3!.id);
    } finally {
      await c.leaseRevoke(l1!.id);
      await c.leaseRevoke(l3!.id);
    }
  });

  it('an abort inside a request answers that call alone, before the request leaves and after', async () => {
    const p = file.fresh('abort');
    await using c = new Client({ endpoints: etcd.endpoints });
    const sent = requestsOf(c);
    // Before: aborted while waiting for the check phase, it is not sent.
    const early = new AbortController();
    const before = [
      own(c, putIfAbsent(`${p}opener`)),
      own(c, putIfAbsent(`${p}a`), `${p}a/`),
      own(c, putIfAbsent(`${p}b`), `${p}b/`, { signal: early.signal }),
      own(c, putIfAbsent(`${p}c`), `${p}c/`),
    ];
    early.abort(new Error('gave up early'));
    const r1 = await Promise.allSettled(before);
    assert.deepEqual(
      r1.map((r) => r.status),
      ['fulfilled', 'fulfilled', 'rejected', 'fulfilled'],
    );
    assert.equal((r1[2] as PromiseRejectedResult).reason.message, 'gave up early');
    assert.deepEqual(
      sent.map((r) => r.length),
      [1, 2],
    );
    assert.equal(await c.get(`${p}b`), undefined, 'never sent');
    // After: aborted once its request has left; the others are answered, as it would have been alone.
    const late = new AbortController();
    const conn = c.conn;
    const call = conn.call.bind(conn);
    conn.call = ((...args: Parameters<typeof call>) => {
      const r = call(...args);
      if (((args[1] as pb.TxnRequest).success ?? []).length > 1) late.abort(new Error('gave up late'));
      return r;
    }) as typeof conn.call;
    const r2 = await Promise.allSettled([
      own(c, putIfAbsent(`${p}opener2`)),
      own(c, putIfAbsent(`${p}d`), `${p}d/`, { signal: late.signal }),
      own(c, putIfAbsent(`${p}e`), `${p}e/`),
    ]);
    assert.deepEqual(
      r2.map((r) => r.status),
      ['fulfilled', 'rejected', 'fulfilled'],
    );
    assert.equal((r2[1] as PromiseRejectedResult).reason.message, 'gave up late');
    assert.equal(sent.at(-1)!.length, 2);
    await client.delete(p, { prefix: true });
  });

  it('shared requests are counted per call in rpc.client.call.duration, and their sizes in a histogram', async () => {
    const p = file.fresh('metrics');
    await using sdk = new Sdk(etcd.endpoints);
    const c = sdk.client;
    const txns = { 'rpc.method': 'etcdserverpb.KV/Txn' };
    await Promise.all([0, 1, 2, 3].map((i) => own(c, putIfAbsent(`${p}${i}`), `${p}${i}/`)));
    assert.equal(await sdk.value('rpc.client.call.duration', txns), 4);
    const sizes = await sdk.points('etcd_concurrency.client.txn.batch_size');
    assert.equal(sizes.length, 1);
    assert.deepEqual(
      { count: (sizes[0]!.value as { count: number }).count, sum: (sizes[0]!.value as { sum: number }).sum },
      { count: 1, sum: 3 },
    );
    await c.close();
    await client.delete(p, { prefix: true });
  });
});

describe('deadlines in a shared request', () => {
  it("a call due before the others fails at its own deadline; the others wait for the request's answer", { timeout: 60_000 }, async () => {
    const own1 = await startEtcd();
    try {
      await using c = new Client({ endpoints: own1.endpoints });
      await c.put('warm', '');
      const conn = c.conn;
      const call = conn.call.bind(conn);
      // The member stops answering the moment the shared request leaves.
      conn.call = ((...args: Parameters<typeof call>) => {
        if (((args[1] as pb.TxnRequest).success ?? []).length > 1) own1.pause(0);
        return call(...args);
      }) as typeof conn.call;
      const opener = own(c, putIfAbsent('d/opener'));
      const short = c.txn(putIfAbsent('d/short'), { idempotent: true, coalesce: { scope: 'd/short/' }, timeoutMs: 300 });
      const long = own(c, putIfAbsent('d/long'), 'd/long/');
      const third = own(c, putIfAbsent('d/third'), 'd/third/');
      let settled = false;
      void Promise.allSettled([long, third]).then(() => (settled = true));
      await assert.rejects(short, DeadlineExceededError);
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(settled, false, 'the others still wait for the answer');
      own1.resume(0);
      const [o, l, t] = await Promise.all([opener, long, third]);
      assert.ok(o.succeeded && l.succeeded && t.succeeded);
      await c.delete('d/', { prefix: true });
      await c.delete('warm');
    } finally {
      await own1.stop();
    }
  });
});

describe('a shared request whose outcome is unknown, then refused as a whole', () => {
  it('its Txns are sent again alone and each still knows it may land late: an enqueue that lands after its release is swept', {
    timeout: 60_000,
  }, async () => {
    const p = file.fresh('late-refused');
    const names = ['a', 'b', 'c'].map((n) => `${p}${n}`);
    await using c = new Client({ endpoints: etcd.endpoints });
    const s = await Session.create(c, { ttl: 30 });
    const other = await Session.create(client, { ttl: 30 });
    // The member as a slow one and then a stricter one answer the shared request: its first attempt
    // gets no answer in time (held here, and sent for real later: it lands late), its second is
    // refused as a whole (a member with a lower --max-txn-ops). Every other request goes as it is.
    const member = holdThenRefuse(
      c,
      (r) => (r.compare ?? []).length === 0 && (r.success ?? []).length > 1 && r.success!.every((o) => o.requestTxn),
      () => new TransportError(Status.INVALID_ARGUMENT, 'etcdserver: too many operations in txn request', { fromServer: true }),
    );
    try {
      // Three locks in one tick: the first goes at once, the two after it share a request.
      const held = await Promise.all(names.map((n) => new Mutex(s, n).lock()));
      assert.equal(member.attempts, 2, 'the shared request: one attempt without an answer, one refused');
      await Promise.all(held.map((h) => h.unlock()));
      // The first attempt lands now: both of its enqueues create their keys again, on the live lease.
      const landed = await member.land();
      assert.deepEqual(
        (landed.responses ?? []).map((o) => o.responseTxn?.succeeded),
        [true, true],
        'both keys created again after their release',
      );
      // Nobody is blocked behind a ghost: the keys that landed late are swept.
      for (const n of names) await (await new Mutex(other, n).lock({ signal: AbortSignal.timeout(20_000) })).unlock();
    } finally {
      member.restore();
      await Promise.all([s.close(), other.close()]);
      await client.delete(p, { prefix: true });
    }
  });
});

describe('a shared answer above maxReceiveMessageBytes', () => {
  it('etcd applied the request but its answer is refused here: each Txn is sent again alone and gets its own answer', async () => {
    const p = file.fresh('answer-too-large');
    // Two values that fit one answer each, not one answer together.
    const big = 'x'.repeat(2000);
    await client.put(`${p}big1`, big);
    await client.put(`${p}big2`, big);
    await using c = new Client({ endpoints: etcd.endpoints, maxReceiveMessageBytes: 3000 });
    const sent = requestsOf(c);
    const putAndRead = (key: string, read: string): pb.TxnRequest => ({
      compare: [compare.createRevision(key, '=', 0n)],
      success: [op.put(key, 'v'), op.get(read)],
      failure: [op.get(read)],
    });
    try {
      const results = await Promise.allSettled([
        own(c, putIfAbsent(`${p}opener`)),
        own(c, putAndRead(`${p}a`, `${p}big1`), `${p}a/`),
        own(c, putAndRead(`${p}b`, `${p}big2`), `${p}b/`),
      ]);
      assert.deepEqual(
        sent.map((r) => r.length),
        [1, 2, 1, 1],
        'the shared request, then each of its Txns alone',
      );
      assert.deepEqual(
        results.map((r) => r.status),
        ['fulfilled', 'fulfilled', 'fulfilled'],
        String(results.map((r) => (r.status === 'rejected' ? r.reason : 'ok'))),
      );
      // The shared request created both keys: sent again alone, each finds its own and reads its value.
      for (const [i, read] of [
        [1, 'big1'],
        [2, 'big2'],
      ] as const) {
        const t = (results[i] as PromiseFulfilledResult<TxnResult>).value;
        assert.equal(t.succeeded, false, 'created by the shared request');
        assert.equal(t.responses[0]?.responseRange?.kvs?.[0]?.key?.toString(), `${p}${read}`);
      }
    } finally {
      await client.delete(p, { prefix: true });
    }
  });
});

describe('a lowered --max-txn-ops', () => {
  it('etcd counts the outer list plus the longest nested one; the client learns the limit from its refusal', {
    timeout: 60_000,
  }, async () => {
    const small = await startEtcd({ extraArgs: ['--max-txn-ops=8'] });
    try {
      await using c = new Client({ endpoints: small.endpoints });
      const nested = (txns: number, ops: number): pb.TxnRequest => ({
        compare: [],
        success: Array.from({ length: txns }, (_, t) => ({
          requestTxn: { compare: [], success: Array.from({ length: ops }, (_, o) => op.get(`n/${t}/${o}`)), failure: [] },
        })),
        failure: [],
      });
      // 4 + 4 = 8 fits; 4 + 5 and 2 + 7 do not, though each list alone holds at most 7.
      await c.txn(nested(4, 4));
      await c.txn(nested(1, 7));
      for (const [txns, ops] of [
        [4, 5],
        [2, 7],
        [9, 0],
      ] as const) {
        await assert.rejects(
          c.txn(nested(txns, ops)),
          (err: unknown) => err instanceof EtcdError && /too many operations/.test(err.message),
        );
      }
      const sent = requestsOf(c);
      const results = await Promise.all(Array.from({ length: 13 }, (_, i) => own(c, putIfAbsent(`m/${i}`), `m/${i}/`)));
      assert.ok(results.every((r) => r.succeeded));
      assert.ok(c.coalescer.maxOps <= 8, `learned ${c.coalescer.maxOps}`);
      assert.ok(sent.length > 2, 'refused, then sent again in smaller requests');
      // Every request after the last refusal fit: its Txns plus its widest (1) within 8.
      assert.ok(sent.slice(-2).every((r) => r.length + 1 <= 8));
      assert.equal((await c.getPrefix('m/')).kvs.length, 13);
    } finally {
      await small.stop();
    }
  });
});

/** Whether two Txns may share a request: not of one scope, and neither writes what the other touches. */
function mayShare(
  a: { request: pb.TxnRequest; scope?: string | undefined },
  b: { request: pb.TxnRequest; scope?: string | undefined },
): boolean {
  if (a.scope !== undefined && a.scope === b.scope) return false;
  const x = touched(a.request);
  const y = touched(b.request);
  const meet = (s: Span[], t: Span[]): boolean => s.some((u) => t.some((v) => overlaps(u, v)));
  return !meet(x.writes, [...y.writes, ...y.reads]) && !meet(y.writes, [...x.writes, ...x.reads]);
}

/** A key (`end` undefined) or etcd's range [key, end), end "\0" meaning every key from `key` on. */
type Span = { key: Buffer; end?: Buffer };

function touched(r: pb.TxnRequest): { reads: Span[]; writes: Span[] } {
  const span = (s: { key?: Buffer; rangeEnd?: Buffer }): Span =>
    s.rangeEnd && s.rangeEnd.length > 0 ? { key: s.key!, end: s.rangeEnd } : { key: s.key! };
  const reads = (r.compare ?? []).map(span);
  const writes: Span[] = [];
  for (const o of [...(r.success ?? []), ...(r.failure ?? [])]) {
    if (o.requestRange) reads.push(span(o.requestRange));
    else if (o.requestPut) writes.push(span(o.requestPut));
    else if (o.requestDeleteRange) writes.push(span(o.requestDeleteRange));
  }
  return { reads, writes };
}

function overlaps(a: Span, b: Span): boolean {
  const below = (k: Buffer, end: Buffer): boolean => (end.length === 1 && end[0] === 0) || k.compare(end) < 0;
  const holds = (s: Span, k: Buffer): boolean => (s.end === undefined ? s.key.equals(k) : k.compare(s.key) >= 0 && below(k, s.end));
  if (a.end === undefined) return holds(b, a.key);
  if (b.end === undefined) return holds(a, b.key);
  return below(a.key, b.end) && below(b.key, a.end);
}

/** A small seeded PRNG: a failing trial runs again with the seed its message gives. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
