// The built CLI's `inspect` (plain, --json and --watch; a prefix, nested names, stray keys) as a
// child process against a real etcd. Run `npm run build` first. Every wait is on a child's output
// line, its exit, or etcd state.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Client } from '../src/index.js';
import { assertNoKeys, assertOneErrorLine, cliFile, runCli as start, runCliToEnd as run, waitFor, type CliProc } from './helpers.js';

const ROOT = 'test/cli-inspect/';

let client: Client;
let endpoint: string;

const { fresh, keysOf } = cliFile(ROOT, (e, c) => ((client = c), (endpoint = e.endpoints[0]!)));

describe('inspect', () => {
  test('shows the holder and the queue in order, plain and --json', async () => {
    const name = fresh('inspect');
    const empty = await run(['inspect', name, '--endpoints', endpoint]);
    assert.equal(empty.code, 0, empty.stderr);
    assert.match(empty.stdout, new RegExp(`^${name}: free, nobody waiting`));

    const holder = start(['lock', name, '--endpoints', endpoint, '--ttl', '20']);
    await holder.next(/^key=/);
    const waiters: CliProc[] = [];
    for (let i = 0; i < 2; i++) {
      waiters.push(start(['lock', name, '--endpoints', endpoint, '--', 'true']));
      await waitFor(async () => (await keysOf(name)).length === i + 2, `waiter ${i} to queue`);
    }
    const keys = await keysOf(name);

    const j = await run(['inspect', name, '--endpoints', endpoint, '--json']);
    assert.equal(j.code, 0, j.stderr);
    type P = { key: string; lease: string; ttl: number; grantedTtl: number; token: string; ageRevisions: string; value: string };
    const doc = JSON.parse(j.stdout) as { name: string; revision: string; owner: P; waiting: P[] };
    assert.equal(doc.name, name);
    assert.deepEqual([doc.owner.key, ...doc.waiting.map((w) => w.key)], keys);
    for (const p of [doc.owner, ...doc.waiting]) {
      assert.equal(p.key, `${name}/${p.lease}`);
      assert.ok(p.ttl > 0 && p.ttl <= p.grantedTtl, `ttl ${p.ttl}/${p.grantedTtl}`);
      assert.equal(BigInt(p.ageRevisions), BigInt(doc.revision) - BigInt(p.token));
      assert.equal((await client.get(p.key))?.createRevision.toString(), p.token);
    }
    assert.equal(doc.owner.grantedTtl, 20);
    assert.ok(BigInt(doc.owner.token) < BigInt(doc.waiting[0]!.token));
    assert.ok(BigInt(doc.waiting[0]!.token) < BigInt(doc.waiting[1]!.token));

    const plain = await run(['inspect', name, '--endpoints', endpoint]);
    assert.equal(plain.code, 0, plain.stderr);
    const lines = plain.stdout.trimEnd().split('\n');
    assert.match(lines[0]!, new RegExp(`^${name}: owned by ${keys[0]}, 2 waiting`));
    // Each lock carries its holder's label (default <hostname>:<pid>) as its value.
    assert.match(lines[1]!, /^ROLE\s+KEY\s+LEASE\s+TTL\s+TOKEN\s+AGE\s+VALUE$/);
    assert.match(
      lines[2]!,
      new RegExp(`^owner\\s+${keys[0]}\\s+[0-9a-f]+\\s+\\d+s/20s\\s+${doc.owner.token}\\s+\\d+ revs?\\s+\\S+:${holder.child.pid}$`),
    );
    assert.match(lines[3]!, new RegExp(`^#1\\s+${keys[1]}\\s`));
    assert.match(lines[4]!, new RegExp(`^#2\\s+${keys[2]}\\s`));

    holder.signal('SIGINT');
    assert.deepEqual(await Promise.all([holder.exited, ...waiters.map((w) => w.exited)]), [0, 0, 0]);
    await assertNoKeys(client, `${name}/`);
  });

  test('--watch prints again on every change until SIGINT', async () => {
    const name = fresh('inspect-watch');
    const w = start(['inspect', name, '--endpoints', endpoint, '--watch', '--json']);
    assert.equal((JSON.parse(await w.next(/^\{/)) as { owner: unknown }).owner, null);
    const holder = start(['lock', name, '--endpoints', endpoint]);
    const key = /^key=(\S+)/.exec(await holder.next(/^key=/))![1]!;
    const seen = JSON.parse(await w.next(/"owner":\{/)) as { owner: { key: string } };
    assert.equal(seen.owner.key, key);
    holder.signal('SIGINT');
    await w.next(/"owner":null/);
    w.signal('SIGINT');
    assert.equal(await w.exited, 0);
    assert.equal(await holder.exited, 0);

    // Plain output: one block per change, separated by blank lines when not on a terminal.
    const plain = start(['inspect', name, '-w', '--endpoints', endpoint]);
    await plain.next(/free, nobody waiting/);
    const h2 = start(['lock', name, '--endpoints', endpoint]);
    await plain.next(/owned by/);
    h2.signal('SIGINT');
    await plain.next(/free, nobody waiting/);
    plain.signal('SIGINT');
    assert.equal(await plain.exited, 0);
    assert.equal(await h2.exited, 0);
    await assertNoKeys(client, `${name}/`);
  });

  test('--watch follows waiters joining and leaving the queue, and the owner changing, in order', { timeout: 60_000 }, async () => {
    const name = fresh('inspect-watch-queue');
    type Snap = { owner: { key: string } | null; waiting: { key: string }[] };
    const w = start(['inspect', name, '--endpoints', endpoint, '--watch', '--json']);
    /** The next snapshot (one JSON line each) for which `want` holds; the ones before it are skipped. */
    const snapshot = async (want: (s: Snap) => boolean): Promise<Snap> => {
      for (;;) {
        const s = JSON.parse(await w.next(/^\{/)) as Snap;
        if (want(s)) return s;
      }
    };
    const queue = (s: Snap): string[] => [s.owner?.key ?? '-', ...s.waiting.map((x) => x.key)];
    await snapshot((s) => s.owner === null);

    const holder = start(['lock', name, '--endpoints', endpoint]);
    const h = /^key=(\S+)/.exec(await holder.next(/^key=/))![1]!;
    assert.deepEqual(queue(await snapshot((s) => s.owner !== null)), [h]);
    // Two waiters join, one after the other: each appears at the end of the queue.
    const w1 = start(['lock', name, '--endpoints', endpoint]);
    const one = await snapshot((s) => s.waiting.length === 1);
    const k1 = one.waiting[0]!.key;
    assert.deepEqual(queue(one), [h, k1]);
    const w2 = start(['lock', name, '--endpoints', endpoint]);
    const two = await snapshot((s) => s.waiting.length === 2);
    const k2 = two.waiting[1]!.key;
    assert.deepEqual(queue(two), [h, k1, k2]);
    assert.deepEqual(await keysOf(name), [h, k1, k2], 'as etcd has it');
    // The first waiter gives up (SIGINT while waiting): it leaves, the second moves up.
    w1.signal('SIGINT');
    assert.equal(await w1.exited, 130);
    assert.deepEqual(queue(await snapshot((s) => s.waiting.length === 1)), [h, k2]);
    // The holder lets go: the second waiter owns the lock, nobody waits.
    holder.signal('SIGINT');
    assert.equal(await holder.exited, 0);
    assert.deepEqual(queue(await snapshot((s) => s.owner?.key === k2)), [k2]);
    assert.equal(/^key=(\S+)/.exec(await w2.next(/^key=/))![1], k2);
    w2.signal('SIGINT');
    assert.equal(await w2.exited, 0);
    await snapshot((s) => s.owner === null);
    w.signal('SIGINT');
    assert.equal(await w.exited, 0);
    assert.equal(w.stderr() + w2.stderr(), '');
    assertOneErrorLine(w1.stderr(), /interrupted by SIGINT/);
    await assertNoKeys(client, `${name}/`);
  });

  test('a prefix shows every name under it, and a name the names nested under it, each as what it is', async () => {
    const base = fresh('inspect-prefix');
    const deploy = `${base}locks/deploy`;
    const canary = `${base}locks/deploy/canary`;
    const rw = `${base}locks/config`;
    const holders = [
      start(['lock', deploy, '--endpoints', endpoint, '--label', 'deployer']),
      start(['lock', canary, '--endpoints', endpoint, '--label', 'canary-1']),
      start(['lock', rw, '--read', '--endpoints', endpoint, '--label', 'reader-1']),
    ];
    const keys = await Promise.all(holders.map(async (h) => /^key=(\S+)/.exec(await h.next(/^key=/))![1]!));
    type S = { name: string; kind: string; owner: { key: string; label: string } | null; waiting: unknown[]; nested?: S[] };
    try {
      // A prefix: every name under it, in name order.
      const prefixed = await run(['inspect', `${base}locks/`, '--endpoints', endpoint, '--json']);
      assert.equal(prefixed.code, 0, prefixed.stderr);
      const doc = JSON.parse(prefixed.stdout) as { prefix: string; revision: string; names: S[] };
      assert.equal(doc.prefix, `${base}locks/`);
      assert.deepEqual(
        doc.names.map((n) => [n.name, n.kind, n.owner?.key, n.owner?.label]),
        [
          [rw, 'rwlock', keys[2], 'reader-1'],
          [deploy, 'lock', keys[0], 'deployer'],
          [canary, 'lock', keys[1], 'canary-1'],
        ],
      );
      const text = await run(['inspect', `${base}locks/`, '--endpoints', endpoint]);
      assert.equal(text.code, 0, text.stderr);
      const heads = text.stdout.split('\n').filter((l) => l.startsWith(base));
      assert.deepEqual(heads, [
        `${base}locks/: 3 names (at revision ${doc.revision})`,
        `${rw}: read-locked by 1 reader, 0 waiting`,
        `${deploy}: owned by ${keys[0]}, 0 waiting`,
        `${canary}: owned by ${keys[1]}, 0 waiting`,
      ]);

      // A name with no participant of its own says so, and shows what is under it.
      const parent = await run(['inspect', `${base}locks`, '--endpoints', endpoint]);
      assert.equal(parent.code, 0, parent.stderr);
      assert.match(parent.stdout, new RegExp(`^${base}locks: free, nobody waiting \\(at revision \\d+\\)\\n`));
      assert.match(parent.stdout, new RegExp(`^${deploy}: owned by ${keys[0]}, 0 waiting$`, 'm'));
      assert.match(parent.stdout, new RegExp(`^${canary}: owned by ${keys[1]}, 0 waiting$`, 'm'));

      // A name holds its own queue; the names nested under it come apart, never as its waiters.
      const own = await run(['inspect', deploy, '--endpoints', endpoint, '--json']);
      assert.equal(own.code, 0, own.stderr);
      const d = JSON.parse(own.stdout) as S;
      assert.equal(d.owner?.key, keys[0]);
      assert.deepEqual(d.waiting, []);
      assert.deepEqual(
        d.nested?.map((n) => [n.name, n.owner?.key]),
        [[canary, keys[1]]],
      );
    } finally {
      for (const h of holders) h.signal('SIGINT');
      assert.deepEqual(await Promise.all(holders.map((h) => h.exited)), [0, 0, 0]);
    }
    await assertNoKeys(client, base);
  });

  test('a key an operator overwrote without a lease shows as stray: not the holder, not waiting', async () => {
    const name = fresh('inspect-stray');
    const holder = start(['lock', name, '--endpoints', endpoint]);
    const held = /^key=(\S+)/.exec(await holder.next(/^key=/))![1]!;
    const waiter = start(['lock', name, '--endpoints', endpoint]);
    await waitFor(async () => (await keysOf(name)).length === 2, 'the waiter to queue');
    // etcdctl put <key> <value>: the key keeps its CreateRevision and loses its lease.
    await client.put(held, 'edited by hand');
    assert.equal(await holder.exited, 3, holder.stderr());
    const next = /^key=(\S+)/.exec(await waiter.next(/^key=/))![1]!;
    try {
      type P = { key: string; token: string; value: string; lease?: string };
      const j = await run(['inspect', name, '--endpoints', endpoint, '--json']);
      assert.equal(j.code, 0, j.stderr);
      const doc = JSON.parse(j.stdout) as { owner: P; holders: P[]; waiting: P[]; stray: P[] };
      assert.equal(doc.owner.key, next);
      assert.deepEqual(
        doc.holders.map((p) => p.key),
        [next],
      );
      assert.deepEqual(doc.waiting, []);
      assert.equal(doc.stray.length, 1);
      assert.equal(doc.stray[0]!.key, held);
      assert.equal(doc.stray[0]!.value, 'edited by hand');
      assert.equal(doc.stray[0]!.lease, undefined);
      assert.ok(BigInt(doc.stray[0]!.token) < BigInt(doc.owner.token), 'the stray key is the older one');

      const text = await run(['inspect', name, '--endpoints', endpoint]);
      assert.equal(text.code, 0, text.stderr);
      const lines = text.stdout.trimEnd().split('\n');
      assert.match(lines[0]!, new RegExp(`^${name}: owned by ${next}, 0 waiting, 1 stray key \\(at revision \\d+\\)$`));
      assert.match(text.stdout, new RegExp(`^owner\\s+${next}\\s`, 'm'));
      assert.match(text.stdout, new RegExp(`^stray\\s+${held}\\s+-\\s+-\\s+${doc.stray[0]!.token}\\s.*"edited by hand"$`, 'm'));
      assert.match(lines[lines.length - 1]!, /stray: a key without a lease .*nobody waits for it.*etcdctl del/);
    } finally {
      waiter.signal('SIGINT');
      assert.equal(await waiter.exited, 0);
    }
    // Alone, it still shows: the name is free, with a stray key.
    const alone = await run(['inspect', name, '--endpoints', endpoint]);
    assert.match(alone.stdout, new RegExp(`^${name}: free, nobody waiting, 1 stray key \\(at revision \\d+\\)$`, 'm'));
    await client.delete(held);
    await assertNoKeys(client, `${name}/`);
  });
});
