// `etcd-concurrency inspect --web`, in a real browser: locks, elections and values on the page.
// Debian's chromium driven headless through playwright-core (test/web-inspector-browser.ts), against
// a real etcd and real CLI processes (dist/cli/main.js: `npm run build` first). Every wait is on the
// page's content, a child's output, its exit or etcd state; never on a sleep. Without a browser
// every browser test skips with the reason printed, or fails when CI is set (unless
// WEB_INSPECTOR_ALLOW_SKIP=1). Compaction, shared watches, auth and the screenshot:
// web-inspector-etcd.test.ts; what a newcomer misread: web-inspector-newcomer.test.ts; the server
// without a browser: web-inspector-server.test.ts.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { type Client, Election, Mutex, Session } from '../src/index.js';
import { startProxy } from '../src/testing/index.js';
import { closeAll, openSessions, waitFor, type CliProc } from './helpers.js';
import { inspectorFile } from './web-inspector-fixture.js';
import { assertNoPageErrors, evaluate, needBrowser, open, until } from './web-inspector-browser.js';

const ROOT = 'test/web/';

let client: Client;
let endpoint: string;

const { fresh, start, inspector, orphans, queueOf } = inspectorFile(ROOT, (e, c) => ((client = c), (endpoint = e.endpoints[0]!)), {
  browser: true,
});

/** A command for `lock -- ...` that says when it runs (with its token and pid), then runs until killed. */
const HOLD = [
  process.execPath,
  '-e',
  `console.log('running rev=' + process.env.ETCD_LOCK_REV + ' pid=' + process.pid); setInterval(() => {}, 1000);`,
];

// ── tests ──────────────────────────────────────────────────────────────────────────────────────

describe('inspect --web in chromium', { timeout: 240_000 }, () => {
  test('a holder and two waiters (processes) show in queue order with their tokens; SIGKILL of the holder shows the hand-over', async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('lock');
    const name = `${prefix}locks/deploy`;
    const ins = await inspector(prefix);
    const page = await open(ins.url);
    try {
      // TTL 2 s: the holder's lease must expire on its own once its process is SIGKILLed.
      const holder = start(['lock', name, '--ttl', '2', '--endpoints', endpoint, '--', ...HOLD]);
      const running1 = await holder.match(/^running rev=(\d+) pid=(\d+)/);
      const [, holderToken, holderCmdPid] = running1;
      const w1 = start(['lock', name, '--ttl', '30', '--endpoints', endpoint, '--', ...HOLD]);
      await waitFor(async () => (await queueOf(name)).length === 2, 'the first waiter queued');
      const w2 = start(['lock', name, '--ttl', '30', '--endpoints', endpoint, '--', ...HOLD]);
      const queue = await waitFor(async () => {
        const q = await queueOf(name);
        return q.length === 3 ? q : undefined;
      }, 'both waiters queued');
      assert.equal(queue[0]!.token, holderToken);

      const expected = JSON.stringify(queue.map((q, i) => ({ role: i === 0 ? 'holder' : 'waiting', token: q.token, key: q.key })));
      await until(
        page,
        `JSON.stringify(rows(${JSON.stringify(name)}).map(function (r) { return { role: r.role, token: r.token, key: r.key }; })) === ${JSON.stringify(expected)}`,
        `the holder then both waiters, in order: ${expected}`,
      );
      const shown = await evaluate<{ role: string; token: string; text: string }[]>(page, `rows(${JSON.stringify(name)})`);
      assert.match(shown[0]!.text, /^holder/);
      assert.match(shown[0]!.text, /held \d/);
      assert.match(shown[1]!.text, /^#1/);
      assert.match(shown[2]!.text, /^#2/);
      assert.match(shown[2]!.text, /waiting \d/);
      assert.match(shown[0]!.text, /\d+ s \/ 2 s|≤ 0 s \/ 2 s/, 'the holder lease TTL, counting down');
      // The default label is <host>:<pid>: shown by default on loopback, so that a holder is more
      // than a lease id; --hide-values hides it (below).
      const body = await evaluate<string>(page, 'text()');
      assert.ok(body.includes(`${hostname()}:${holder.child.pid}`), 'the holder label shown by default on loopback');
      assert.match(body, /showing values/);

      // SIGKILL: no unlock, no revoke. The lease expires after its TTL and the first waiter takes over.
      orphans.add(Number(holderCmdPid));
      const killedAt = performance.now();
      await holder.kill('SIGKILL');
      const w1Token = queue[1]!.token;
      await until(
        page,
        `(function () { var r = rows(${JSON.stringify(name)}); return r.length === 2 && r[0].role === 'holder' && r[0].token === ${JSON.stringify(w1Token)} && r[1].token === ${JSON.stringify(queue[2]!.token)}; })()`,
        'the first waiter holding, the second waiting behind it',
      );
      // "Within a few seconds": the lease runs out after at most its TTL (2 s), then the page shows
      // the new holder. A generous bound for a loaded machine, as the issue asks.
      const handOverMs = performance.now() - killedAt;
      assert.ok(
        handOverMs <= (2 + 5) * 1000,
        `the page showed the hand-over ${Math.round(handOverMs)} ms after the SIGKILL (TTL 2 s + 5 s allowed)`,
      );
      assert.equal((await w1.match(/^running rev=(\d+)/))[1], w1Token);
      // The new holder's lease (TTL 30 s) counts down in the page: a later reading is smaller.
      const ttlOf = `(function () { var m = /^(\\d+) s \\/ 30 s$/.exec(rows(${JSON.stringify(name)})[0].ttl); return m ? Number(m[1]) : 0; })()`;
      await until(page, `${ttlOf} > 0`, "the new holder's lease TTL");
      const firstTtl = await evaluate<number>(page, ttlOf);
      await until(page, `${ttlOf} > 0 && ${ttlOf} < ${firstTtl}`, `the TTL counting down from ${firstTtl} s`);
      assert.ok((await evaluate<number>(page, ttlOf)) < firstTtl);
      await until(
        page,
        `timeline(${JSON.stringify(name)}).some(function (e) { return e.type === 'expired' && e.token === ${JSON.stringify(holderToken)} && /lease expired/.test(e.text); })`,
        "the holder's lease expiring in the timeline",
      );
      await until(
        page,
        `timeline(${JSON.stringify(name)}).some(function (e) { return e.type === 'acquired' && e.token === ${JSON.stringify(w1Token)} && e.text.indexOf('handed over from token ${holderToken}') >= 0; })`,
        'the hand-over in the timeline',
      );
      process.kill(Number(holderCmdPid), 'SIGKILL');
      orphans.delete(Number(holderCmdPid));

      // SIGTERM: each lock process passes it to its command and releases; then the lock is free.
      await w1.kill('SIGTERM');
      await w2.match(/^running rev=/);
      await w2.kill('SIGTERM');
      await until(
        page,
        `(function () { var c = card(${JSON.stringify(name)}); return c && /free/.test(c.innerText) && rows(${JSON.stringify(name)}).length === 0; })()`,
        'the lock free',
      );
      assertNoPageErrors(page);
    } finally {
      await page.close();
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
    }
  });

  test('an election: campaign, resign and a gap with no leader, in the timeline', async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('election');
    const name = `${prefix}election/scheduler`;
    const ins = await inspector(prefix);
    const page = await open(ins.url);
    const n = JSON.stringify(name);
    try {
      const a = start(['elect', name, 'proposal-a', '--ttl', '30', '--endpoints', endpoint]);
      const [, termA] = await a.match(/^leader key=\S+ term=(\d+)/);
      const b = start(['elect', name, 'proposal-b', '--ttl', '30', '--endpoints', endpoint]);
      const q = await waitFor(async () => {
        const k = await queueOf(name);
        return k.length === 2 ? k : undefined;
      }, 'the second candidate queued');
      await until(
        page,
        `(function () { var c = card(${n}), r = rows(${n}); return c && c.dataset.kind === 'election' && r.length === 2 && r[0].token === '${termA}' && /^leader/.test(r[0].text) && r[1].token === '${q[1]!.token}'; })()`,
        'the leader and the candidate behind it',
      );
      // Resign (SIGINT): the next candidate leads at once.
      assert.equal(await a.kill('SIGINT'), 0);
      const [, termB] = await b.match(/^leader key=\S+ term=(\d+)/);
      await until(
        page,
        `timeline(${n}).some(function (e) { return e.type === 'released' && e.token === '${termA}' && /resigned/.test(e.text); })`,
        'the resignation',
      );
      await until(
        page,
        `timeline(${n}).some(function (e) { return e.type === 'acquired' && e.token === '${termB}' && e.text.indexOf('handed over from token ${termA}') >= 0; })`,
        'the new term',
      );
      // The last candidate resigns: nobody leads, and the page counts the gap.
      assert.equal(await b.kill('SIGINT'), 0);
      await until(
        page,
        `timeline(${n}).some(function (e) { return e.type === 'gap' && /no leader for [0-9]/.test(e.text); })`,
        'the gap so far',
      );
      await until(page, `/no leader for/.test(card(${n}).innerText)`, 'the card saying nobody leads');
      const c = start(['elect', name, 'proposal-c', '--ttl', '30', '--endpoints', endpoint]);
      const [, termC] = await c.match(/^leader key=\S+ term=(\d+)/);
      await until(
        page,
        `timeline(${n}).some(function (e) { return e.type === 'acquired' && e.token === '${termC}' && /after no leader for [0-9]/.test(e.text); })`,
        'the next term, after the gap',
      );
      await until(page, `!timeline(${n}).some(function (e) { return e.type === 'gap'; })`, 'the gap closed');
      const events = await evaluate<{ type: string; token: string }[]>(page, `timeline(${n})`);
      // Newest first: C leads, B resigned, B leads, A resigned, A leads.
      assert.deepEqual(
        events.map((e) => `${e.type} ${e.token}`),
        [`acquired ${termC}`, `released ${termB}`, `acquired ${termB}`, `released ${termA}`, `acquired ${termA}`],
      );
      const body = await evaluate<string>(page, 'text()');
      assert.ok(/proposal-c/.test(body), "the leader's proposal shown (values are shown by default on loopback)");
      assert.equal(await c.kill('SIGINT'), 0);
      assertNoPageErrors(page);
    } finally {
      await page.close();
      assert.equal(await ins.proc.kill('SIGINT'), 0, ins.proc.stderr());
    }
  });

  test('--show-values shows values; names are text, never HTML; losing etcd and losing the server both show', async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('values');
    // A name that would run a script if it were ever put into the page as HTML.
    const name = `${prefix}x/<img src=x onerror="window.__pwned=1">`;
    const proxy = await startProxy(endpoint);
    const ins = await inspector(prefix, ['--show-values', '--dial-timeout', '500ms', '--command-timeout', '2s'], proxy.endpoint);
    const page = await open(ins.url);
    const [s1, s2] = await Promise.all([Session.create(client, { ttl: 30 }), Session.create(client, { ttl: 30 })]);
    try {
      const held = await new Mutex(s1, name).lock({ label: 'label-visible-1' });
      const n = JSON.stringify(name);
      await until(page, `rows(${n}).length === 1 && /label-visible-1/.test(rows(${n})[0].text)`, 'the value with --show-values');
      await until(page, `card(${n}).querySelector('.name').textContent === ${n}`, 'the name, as text');
      assert.equal(await evaluate(page, `document.querySelectorAll('.card img').length`), 0);
      assert.equal(await evaluate(page, `window.__pwned === undefined`), true);

      // etcd out of reach: connections reset and refused. The page says so.
      proxy.refuse(true);
      proxy.cut();
      await until(
        page,
        `/disconnected from etcd, reconnecting/.test(text()) && /disconnected, reconnecting/.test(document.getElementById('status').textContent)`,
        'the lost connection to etcd',
      );
      // A change while it is away shows once it is back (a fresh read, not a lost event).
      await held.unlock();
      const second = await new Mutex(s2, name).lock({ label: 'label-visible-2' });
      proxy.refuse(false);
      await until(
        page,
        `document.querySelector('.status.live') && rows(${n}).length === 1 && /label-visible-2/.test(rows(${n})[0].text)`,
        'the state after reconnecting',
      );
      await second.unlock();
      await until(page, `rows(${n}).length === 0`, 'the lock free');

      // The server goes away: the page says so (the browser keeps retrying).
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
      await until(page, `/Disconnected from the inspector, reconnecting/.test(text())`, 'the lost connection to the inspector');
      assertNoPageErrors(page);
    } finally {
      await page.close();
      await ins.proc.kill('SIGKILL');
      await closeAll([s1, s2]);
      await proxy.close();
    }
  });

  test('--elections names an election; a lock holder re-putting its key (same value) stays a lock; a proclaim with a new value makes an election', async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('kinds');
    const scheduler = `${prefix}jobs/scheduler`; // an election whose name does not say so
    const deploy = `${prefix}locks/deploy`; // a lock whose holder re-puts its key, value unchanged
    const primary = `${prefix}tasks/primary`; // an election known only by its proclaim
    const [sc, dp, pr] = [scheduler, deploy, primary].map((n) => JSON.stringify(n));
    const ins = await inspector(prefix, ['--elections', `${prefix}jobs/*`]);
    const page = await open(ins.url);
    const ss = await openSessions(client, 3);
    const others: CliProc[] = [];
    try {
      await new Election(ss[0]!, scheduler).campaign('node-a');
      const held = await new Mutex(ss[1]!, deploy).lock({ label: 'ci-runner-3' });
      const leader = await new Election(ss[2]!, primary).campaign('v1');
      await until(
        page,
        `card(${sc}) && card(${sc}).dataset.kind === 'election' && rows(${sc})[0].label === 'leader' &&
         card(${dp}) && card(${dp}).dataset.kind === 'lock-or-election' && rows(${dp}).length === 1 &&
         card(${pr}) && card(${pr}).dataset.kind === 'lock-or-election' && rows(${pr})[0].label === 'holder'`,
        'jobs/scheduler as an election (--elections), the other two as "lock or election" (a label and a proposal look the same)',
      );

      // The holder's mark: its key put again with ignore_value and ignore_lease (version 2, same value).
      await client.txn({ success: [{ requestPut: { key: Buffer.from(held.key), ignoreValue: true, ignoreLease: true } }] });
      const marked = await client.get(held.key);
      assert.equal(marked?.version, 2n);
      assert.equal(marked?.value.toString(), 'ci-runner-3');
      // A proclaim: the same key and lease, a new value. The watch delivers events in order, so once
      // the page shows this, it has seen the mark before it.
      await leader.proclaim('v2');
      await until(
        page,
        `card(${pr}).dataset.kind === 'election' && rows(${pr})[0].label === 'leader'`,
        'tasks/primary as an election after its proclaim',
      );
      assert.equal(
        await evaluate(page, `card(${dp}).dataset.kind + ' ' + rows(${dp})[0].label + ' ' + rows(${dp}).length`),
        'lock-or-election holder 1',
      );

      // A fresh read (another inspector): version 2 alone makes no election; --elections, as a comma
      // list with a ** glob, does.
      type State = { entities: { name: string; kind: string }[] };
      const kindsOf = async (extra: string[]): Promise<Record<string, string>> => {
        const other = await inspector(prefix, extra);
        others.push(other.proc);
        const state = (await (await fetch(`${other.url}state`)).json()) as State;
        return Object.fromEntries(state.entities.map((e) => [e.name, e.kind]));
      };
      const plain = await kindsOf([]);
      assert.equal(plain[deploy], 'lock-or-election');
      assert.equal(plain[scheduler], 'lock-or-election', 'without --elections, jobs/scheduler is not known as an election');
      const named = await kindsOf(['--elections', `${prefix}nothing/*,**/sched*`]);
      assert.equal(named[deploy], 'lock-or-election');
      assert.equal(named[scheduler], 'election');
      assertNoPageErrors(page);
    } finally {
      await page.close();
      for (const p of others) assert.equal(await p.kill('SIGTERM'), 0, p.stderr());
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
      await closeAll(ss);
    }
  });

  test("an operator's plain put over the holder's key: shown as a stray key, never as the holder; the next holder takes over", async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('stray');
    const name = `${prefix}locks/deploy`;
    const n = JSON.stringify(name);
    const ins = await inspector(prefix);
    const page = await open(ins.url);
    const others: CliProc[] = [];
    const holder = start(['lock', name, '--endpoints', endpoint, '--label', 'first']);
    let waiter: CliProc | undefined;
    try {
      const held = /^key=(\S+) rev=(\d+)/.exec(await holder.next(/^key=/))!;
      waiter = start(['lock', name, '--endpoints', endpoint, '--label', 'second']);
      await until(page, `rows(${n}).length === 2`, 'the holder and the waiter');
      // etcdctl put <key> <value>: the key keeps its CreateRevision and loses its lease.
      await client.put(held[1]!, 'edited by hand');
      assert.equal(await holder.exited, 3, holder.stderr());
      const next = /^key=(\S+) rev=(\d+)/.exec(await waiter.next(/^key=/))!;
      const expected = JSON.stringify([
        { role: 'holder', key: next[1], token: next[2] },
        { role: 'stray', key: held[1], token: held[2] },
      ]);
      await until(
        page,
        `JSON.stringify(rows(${n}).map(function (r) { return { role: r.role, key: r.key, token: r.token }; })) === ${JSON.stringify(expected)}`,
        `the new holder, then the edited key as stray: ${expected}`,
      );
      const stray = (await evaluate<{ label: string; ttl: string; text: string }[]>(page, `rows(${n})`))[1]!;
      assert.equal(stray.label, 'stray');
      assert.equal(stray.ttl, 'no lease');
      assert.match(stray.text, /edited by hand/);
      assert.match(await evaluate<string>(page, `card(${n}).querySelector('.summary').textContent`), /1 stray key/);
      await until(
        page,
        `timeline(${n}).some(function (e) { return e.type === 'detached' && e.token === '${held[2]}' && /overwritten without a lease/.test(e.text); }) &&
         timeline(${n}).some(function (e) { return e.type === 'acquired' && e.token === '${next[2]}'; })`,
        "the holder's key overwritten without a lease, then the next holder, in the timeline",
      );

      // A fresh read (another inspector) sees the same: the stray key apart, the holder by lease.
      const other = await inspector(prefix);
      others.push(other.proc);
      type State = { entities: { name: string; holders: string[]; parts: { key: string; stray?: boolean; lease?: string }[] }[] };
      const state = (await (await fetch(`${other.url}state`)).json()) as State;
      const e = state.entities.find((x) => x.name === name)!;
      assert.deepEqual(e.holders, [next[1]]);
      assert.deepEqual(
        e.parts.filter((p) => p.stray).map((p) => [p.key, p.lease]),
        [[held[1], undefined]],
      );

      // The holder leaves: free, the stray key still there; deleted, it goes.
      waiter.signal('SIGINT');
      assert.equal(await waiter.exited, 0);
      await until(
        page,
        `/free/.test(card(${n}).innerText) && rows(${n}).length === 1 && rows(${n})[0].role === 'stray'`,
        'free, with the stray key',
      );
      await client.delete(held[1]!);
      await until(page, `rows(${n}).length === 0`, 'the stray key gone');
      assertNoPageErrors(page);
    } finally {
      await page.close();
      for (const p of others) assert.equal(await p.kill('SIGTERM'), 0, p.stderr());
      await holder.kill('SIGINT');
      await waiter?.kill('SIGINT');
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
    }
  });
});
