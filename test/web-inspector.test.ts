// `etcd-concurrency inspect --web`, in a real browser: Debian's chromium, driven headless through
// playwright-core, against a real etcd and real CLI processes (dist/cli/main.js: `npm run build`
// first). Every wait is on the page's content (waitForFunction), a child's output, its exit or etcd
// state; never on a sleep. Without a browser every browser test skips with the reason printed, or
// fails when CI is set (unless WEB_INSPECTOR_ALLOW_SKIP=1).
//
// The screenshot test writes docs/inspector.png when WEB_INSPECTOR_SCREENSHOT=1 (to refresh the
// README's picture), and a temporary file otherwise.
import { before, describe, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { hostname, networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { Client, Election, Mutex, RWMutex, runAsLeader, Semaphore, Session } from '../src/index.js';
import { startEtcd, startProxy } from '../src/testing/index.js';
import { assertNoKeys, assertOneErrorLine, closeAll, etcdForCliFile, grpcHandled, grpcStarted, hasEtcdctl, killClis, openSessions, runCli, runCliToEnd, settledOrHang, track, waitFor, type CliProc } from './helpers.js';

const ROOT = 'test/web/';
/** The screenshot's scene lives under a short prefix, so that the picture reads well. */
const SCENE = 'app/';
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
/**
 * In CI (CI set, not "false" or "0") a browser test may not skip: "passes in CI" must mean it ran.
 * WEB_INSPECTOR_ALLOW_SKIP=1 is the explicit opt-out, for a CI machine known to have no browser.
 */
const MUST_RUN = !!process.env.CI && !/^(false|0)$/i.test(process.env.CI) && process.env.WEB_INSPECTOR_ALLOW_SKIP !== '1';

/** A hang guard for page waits on a loaded 2-core machine, not a timing assertion. */
const PAGE_WAIT_MS = 45_000;

let client: Client;
let endpoint: string;
/** etcd's client URL, for its /metrics. */
let clientUrl: string;
let browser: Browser | undefined;
let skipReason: string | undefined;
/** Commands run under `lock -- cmd` whose lock process we SIGKILLed: they run on until killed. */
const orphans = new Set<number>();

const fresh = etcdForCliFile(ROOT, (e, c) => ((client = c), (endpoint = e.endpoints[0]!), (clientUrl = e.clientUrls[0]!)), {
  beforeChecks: async () => {
    await browser?.close();
    // SIGTERM first: lock and elect release their keys on it (after a failed test); then SIGKILL.
    await killClis('SIGTERM', 15_000);
    for (const pid of orphans) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await assertNoKeys(client, SCENE);
  },
});

before(async () => {
  if (!existsSync(CHROMIUM)) skipReason = `no browser at ${CHROMIUM} (install Debian's chromium, or set CHROMIUM_PATH)`;
  else {
    try {
      browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
    } catch (err) {
      skipReason = `chromium at ${CHROMIUM} does not start: ${(err as Error).message.split('\n')[0]}`;
    }
  }
  if (skipReason) process.stderr.write(`web-inspector: ${MUST_RUN ? 'FAILING (CI; WEB_INSPECTOR_ALLOW_SKIP=1 to skip)' : 'skipping'} the browser tests: ${skipReason}\n`);
});

/**
 * Skips the test, with the reason printed, when no browser can run; fails it instead in CI (see
 * MUST_RUN).
 */
function needBrowser(t: TestContext): Browser | undefined {
  if (!browser) {
    const reason = skipReason ?? 'no browser';
    if (MUST_RUN) assert.fail(`no browser under CI=${process.env.CI}: ${reason}. Install chromium, or set WEB_INSPECTOR_ALLOW_SKIP=1 to let the browser tests skip`);
    t.skip(reason);
  }
  return browser;
}

// ── child processes ────────────────────────────────────────────────────────────────────────────

/**
 * A CLI child. It has ended once it exits, not once its pipes close: a command under `lock -- cmd`
 * whose lock process was SIGKILLed keeps the stdout pipe open.
 */
const start = (args: string[], env?: NodeJS.ProcessEnv): CliProc => runCli(args, { exitEvent: 'exit', env });

/** Starts the web inspector on `prefix`; resolves once it printed its URL. */
async function inspector(prefix: string, extra: string[] = [], ep = endpoint, env?: NodeJS.ProcessEnv): Promise<{ proc: CliProc; url: string }> {
  const port = extra.includes('--listen') ? [] : ['--port', '0'];
  const proc = start(['inspect', '--web', prefix, ...port, '--endpoints', ep, ...extra], env);
  const m = await proc.match(/^inspector: (http:\/\/\S+)/);
  return { proc, url: m[1]! };
}

/** A command for `lock -- ...` that says when it runs (with its token and pid), then runs until killed. */
const HOLD = [process.execPath, '-e', `console.log('running rev=' + process.env.ETCD_LOCK_REV + ' pid=' + process.pid); setInterval(() => {}, 1000);`];

/** The participant keys of `name`, oldest first, as etcd has them. */
async function queueOf(name: string): Promise<{ key: string; token: string }[]> {
  const r = await client.getPrefix(`${name}/`);
  return r.kvs.sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1)).map((kv) => ({ key: kv.key.toString(), token: kv.createRevision.toString() }));
}

/** An HTTP request to the inspector with a chosen Host header and method (fetch cannot set Host). */
function rawGet(url: string, options: { host?: string; method?: string; address?: string } = {}): Promise<number> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: options.address ?? u.hostname, port: u.port, path: '/', method: options.method ?? 'GET', headers: options.host ? { host: options.host } : {} },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

// ── the page ───────────────────────────────────────────────────────────────────────────────────

/**
 * Page-side helpers, as source text: evaluated in the page with every wait (functions passed to
 * playwright would be serialized from tsx's output, which may reference its helpers).
 */
const HELPERS = `
  var card = function (name) { return Array.from(document.querySelectorAll('.card')).find(function (c) { return c.dataset.name === name; }); };
  var rows = function (name) {
    var c = card(name);
    return c ? Array.from(c.querySelectorAll('tbody tr')).map(function (tr) {
      return { role: tr.dataset.role, token: tr.dataset.token, key: tr.dataset.key, label: tr.children[0].textContent, ttl: tr.children[3].textContent, text: tr.innerText };
    }) : [];
  };
  var timeline = function (name) {
    return Array.from(document.querySelectorAll('#timeline li')).filter(function (li) { return li.dataset.name === name; })
      .map(function (li) { return { type: li.dataset.type || li.className, token: li.dataset.token, text: li.innerText }; });
  };
  var text = function () { return document.body.innerText; };
`;

/**
 * Waits until `expr` (page-side, with HELPERS in scope) is truthy, checking every 100 ms; on failure
 * says what and shows the page. Checks run through page.evaluate (the DevTools protocol), which the
 * page's Content-Security-Policy does not apply to, while waitForFunction's polling would need eval.
 */
async function until(page: Page, expr: string, what: string): Promise<void> {
  const deadline = performance.now() + PAGE_WAIT_MS;
  let last: unknown;
  for (;;) {
    try {
      if (await evaluate(page, expr)) return;
    } catch (err) {
      last = err;
    }
    if (performance.now() > deadline) {
      const body = await page.innerText('body').catch(() => '(page gone)');
      throw new Error(`the page never showed ${what}${last ? ` (${(last as Error).message.split('\n')[0]})` : ''}\n--- page ---\n${body}`);
    }
    await delay(100);
  }
}

async function evaluate<T>(page: Page, expr: string): Promise<T> {
  return (await page.evaluate(`(function () { ${HELPERS}; return (${expr}); })()`)) as T;
}

async function open(url: string): Promise<Page> {
  const page = await browser!.newPage({ viewport: { width: 1280, height: 900 } });
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  (page as Page & { errors?: string[] }).errors = errors;
  await page.goto(url);
  await until(page, `document.querySelector('.status.live')`, 'the live status');
  return page;
}

/** The page raised no script error and no CSP violation. */
function assertNoPageErrors(page: Page): void {
  assert.deepEqual((page as Page & { errors?: string[] }).errors, [], 'errors in the page');
}


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
      assert.ok(handOverMs <= (2 + 5) * 1000, `the page showed the hand-over ${Math.round(handOverMs)} ms after the SIGKILL (TTL 2 s + 5 s allowed)`);
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
      await until(page, `(function () { var c = card(${JSON.stringify(name)}); return c && /free/.test(c.innerText) && rows(${JSON.stringify(name)}).length === 0; })()`, 'the lock free');
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
      await until(page, `timeline(${n}).some(function (e) { return e.type === 'released' && e.token === '${termA}' && /resigned/.test(e.text); })`, 'the resignation');
      await until(page, `timeline(${n}).some(function (e) { return e.type === 'acquired' && e.token === '${termB}' && e.text.indexOf('handed over from token ${termA}') >= 0; })`, 'the new term');
      // The last candidate resigns: nobody leads, and the page counts the gap.
      assert.equal(await b.kill('SIGINT'), 0);
      await until(page, `timeline(${n}).some(function (e) { return e.type === 'gap' && /no leader for [0-9]/.test(e.text); })`, 'the gap so far');
      await until(page, `/no leader for/.test(card(${n}).innerText)`, 'the card saying nobody leads');
      const c = start(['elect', name, 'proposal-c', '--ttl', '30', '--endpoints', endpoint]);
      const [, termC] = await c.match(/^leader key=\S+ term=(\d+)/);
      await until(page, `timeline(${n}).some(function (e) { return e.type === 'acquired' && e.token === '${termC}' && /after no leader for [0-9]/.test(e.text); })`, 'the next term, after the gap');
      await until(page, `!timeline(${n}).some(function (e) { return e.type === 'gap'; })`, 'the gap closed');
      const events = await evaluate<{ type: string; token: string }[]>(page, `timeline(${n})`);
      // Newest first: C leads, B resigned, B leads, A resigned, A leads.
      assert.deepEqual(
        events.map((e) => `${e.type} ${e.token}`),
        [`acquired ${termC}`, `released ${termB}`, `acquired ${termB}`, `released ${termA}`, `acquired ${termA}`],
      );
      const body = await evaluate<string>(page, 'text()');
      assert.ok(/proposal-c/.test(body), 'the leader\'s proposal shown (values are shown by default on loopback)');
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
      await until(page, `/disconnected from etcd, reconnecting/.test(text()) && /disconnected, reconnecting/.test(document.getElementById('status').textContent)`, 'the lost connection to etcd');
      // A change while it is away shows once it is back (a fresh read, not a lost event).
      await held.unlock();
      const second = await new Mutex(s2, name).lock({ label: 'label-visible-2' });
      proxy.refuse(false);
      await until(page, `document.querySelector('.status.live') && rows(${n}).length === 1 && /label-visible-2/.test(rows(${n})[0].text)`, 'the state after reconnecting');
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
      await until(page, `card(${pr}).dataset.kind === 'election' && rows(${pr})[0].label === 'leader'`, 'tasks/primary as an election after its proclaim');
      assert.equal(await evaluate(page, `card(${dp}).dataset.kind + ' ' + rows(${dp})[0].label + ' ' + rows(${dp}).length`), 'lock-or-election holder 1');

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

  test('etcd compacted past a hand-over while the inspector was cut off: the page shows the new holder after a fresh read', async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('compact');
    const name = `${prefix}locks/deploy`;
    const n = JSON.stringify(name);
    const proxy = await startProxy(endpoint);
    const ins = await inspector(prefix, ['--dial-timeout', '500ms', '--command-timeout', '2s'], proxy.endpoint);
    const page = await open(ins.url);
    const [s1, s2] = await openSessions(client, 2);
    try {
      const first = await new Mutex(s1!, name).lock();
      const next = track(new Mutex(s2!, name).lock());
      const q = await waitFor(async () => {
        const k = await queueOf(name);
        return k.length === 2 ? k : undefined;
      }, 'the waiter queued');
      await until(page, `rows(${n}).length === 2 && rows(${n})[0].token === '${q[0]!.token}' && rows(${n})[1].token === '${q[1]!.token}'`, 'the holder and the waiter');

      // Cut off: the watch stream and every connection reset, new ones refused.
      proxy.refuse(true);
      proxy.cut();
      await until(page, `/disconnected, reconnecting/.test(document.getElementById('status').textContent)`, 'the lost connection to etcd');
      // Meanwhile the lock changes hands and etcd forgets that history: the watch cannot resume.
      await first.unlock();
      const second = await settledOrHang(next, 'the waiter taking the lock');
      const { header } = await client.getPrefix(name);
      await client.compact(header.revision, { physical: true });
      proxy.refuse(false);

      await until(
        page,
        `document.querySelector('.status.live') && rows(${n}).length === 1 && rows(${n})[0].role === 'holder' && rows(${n})[0].token === '${q[1]!.token}'`,
        'the new holder after reconnecting',
      );
      // What happened while away is in the timeline, marked as found on reconnecting.
      await until(
        page,
        `timeline(${n}).some(function (e) { return e.type === 'released' && e.token === '${q[0]!.token}' && /seen on reconnecting/.test(e.text); }) &&
         timeline(${n}).some(function (e) { return e.type === 'acquired' && e.token === '${q[1]!.token}' && e.text.indexOf('handed over from token ${q[0]!.token}') >= 0 && /seen on reconnecting/.test(e.text); })`,
        'the hand-over, seen on reconnecting',
      );
      await second.unlock();
      await until(page, `rows(${n}).length === 0`, 'the lock free');
      assertNoPageErrors(page);
    } finally {
      await page.close();
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
      await closeAll([s1, s2]);
            await proxy.close();
    }
  });

  test('one watch feeds every page: three pages cost etcd no more Watch, Range or TimeToLive calls than one', async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('pages');
    const name = `${prefix}locks/deploy`;
    const n = JSON.stringify(name);
    const ins = await inspector(prefix);
    const pages: Page[] = [];
    const leases: bigint[] = [];
    /** A participant key on a lease of its own, written directly: LeaseGrant and Put, nothing else. */
    const join = async (): Promise<void> => {
      // 600 s: a holder's lease is asked again every sixth of its TTL, which this test must not see.
      const { id } = await client.leaseGrant(600);
      leases.push(id);
      await client.put(`${name}/${id.toString(16)}`, 'x', { lease: id });
    };
    /** Every page shows `count` rows, each with its lease's TTL (its TimeToLive answered). */
    const allShow = async (count: number): Promise<void> => {
      for (const page of pages) {
        await until(page, `rows(${n}).length === ${count} && rows(${n}).every(function (r) { return /^\\d+ s \\/ 600 s$/.test(r.ttl); })`, `${count} rows with their TTLs`);
      }
    };
    const counters = async (): Promise<Record<string, number>> => ({
      Watch: await grpcStarted(clientUrl, 'Watch'),
      Range: await grpcHandled(clientUrl, 'Range'),
      LeaseTimeToLive: await grpcHandled(clientUrl, 'LeaseTimeToLive'),
    });
    try {
      await join();
      pages.push(await open(ins.url));
      await allShow(1);
      const one = await counters();
      // The counters are read: the inspector's watch, its first read and its first call are in them.
      assert.ok(one.Watch! >= 1 && one.Range! >= 1 && one.LeaseTimeToLive! >= 1, JSON.stringify(one));
      pages.push(await open(ins.url), await open(ins.url));
      await allShow(1);
      assert.deepEqual(await counters(), one, 'two more pages made etcd calls');
      // A change reaches all three pages through the one watch, and its new lease costs one call.
      await join();
      await allShow(2);
      assert.deepEqual(await counters(), { ...one, LeaseTimeToLive: one.LeaseTimeToLive! + 1 });
      for (const page of pages) assertNoPageErrors(page);
    } finally {
      for (const page of pages) await page.close();
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
      for (const id of leases) await client.leaseRevoke(id);
    }
  });

  test(
    'an auth-enabled etcd and a user with a read-only role on the prefix: the page goes live, and no password shows anywhere',
    { skip: !hasEtcdctl() && 'needs etcdctl (to set up users and enable auth)' },
    async (t) => {
      if (!needBrowser(t)) return;
      const rootPw = `r00t-pw-${randomBytes(6).toString('hex')}`;
      const viewerPw = `v1ewer-pw-${randomBytes(6).toString('hex')}`;
      const wrongPw = `wr0ng-pw-${randomBytes(6).toString('hex')}`;
      const prefix = 'secured/';
      const name = `${prefix}locks/deploy`;
      const n = JSON.stringify(name);
      const secured = await startEtcd();
      const ep = secured.endpoints[0]!;
      const ctl = (...args: string[]): void => {
        const r = spawnSync('etcdctl', [`--endpoints=${ep}`, ...args], { env: { ...process.env, ETCDCTL_API: '3' }, encoding: 'utf8' });
        assert.equal(r.status, 0, `etcdctl ${args[0]} ${args[1]}: ${r.stderr}`);
      };
      let root: Client | undefined;
      let ss: Session[] = [];
      let ins: { proc: CliProc; url: string } | undefined;
      let page: Page | undefined;
      try {
        ctl('user', 'add', `root:${rootPw}`, '--interactive=false');
        ctl('user', 'add', `viewer:${viewerPw}`, '--interactive=false');
        ctl('role', 'add', 'inspector');
        ctl('role', 'grant-permission', 'inspector', '--prefix=true', 'read', prefix);
        ctl('user', 'grant-role', 'viewer', 'inspector');
        ctl('auth', 'enable');
        root = new Client({ endpoints: secured.endpoints, auth: { username: 'root', password: rootPw } });
        ss = await openSessions(root, 2);
        const held = await new Mutex(ss[0]!, name).lock();
        const waiting = track(new Mutex(ss[1]!, name).lock());
        await waitFor(async () => (await root!.getPrefix(name)).kvs.length === 2, 'the waiter queued');

        // A wrong password: one error line, without it.
        const wrong = start(['inspect', '--web', prefix, '--port', '0', '--endpoints', ep, '--user', `viewer:${wrongPw}`]);
        assert.equal(await wrong.exited, 1, wrong.stderr());
        assertOneErrorLine(wrong.stderr(), /authentication failed/);
        assert.ok(!wrong.output().includes(wrongPw), wrong.output());

        ins = await inspector(prefix, ['--user', `viewer:${viewerPw}`], ep);
        page = await open(ins.url);
        // Live, with both participants and their leases' TTLs (TimeToLive answered for this user).
        await until(page, `rows(${n}).length === 2 && rows(${n}).every(function (r) { return /^\\d+ s \\/ 30 s$/.test(r.ttl); })`, 'the holder and the waiter with their TTLs');
        await held.unlock();
        await settledOrHang(waiting, 'the waiter taking the lock');
        await until(page, `document.querySelector('.status.live') && rows(${n}).length === 1 && timeline(${n}).some(function (e) { return e.type === 'acquired'; })`, 'the hand-over, still live');
        const state = await (await fetch(`${ins.url}state`)).text();
        const shown = [state, ins.proc.output(), await page.content(), await evaluate<string>(page, 'text()')];
        for (const text of shown) {
          for (const secret of [viewerPw, rootPw]) assert.ok(!text.includes(secret), `a password shows: ${text.slice(0, 300)}`);
        }
        assertNoPageErrors(page);
      } finally {
        await page?.close();
        if (ins) assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
        await closeAll(ss);
        await root?.close();
        await secured.stop();
      }
    },
  );

  test('the screenshot: a lock, a semaphore, a readers-writer lock and an election with a history', async (t) => {
    if (!needBrowser(t)) return;
    const ss = await Promise.all(Array.from({ length: 11 }, () => Session.create(client, { ttl: 30 })));
    const ins = await inspector(SCENE);
    const page = await open(ins.url);
    /** Waits that only end when the sessions close: settled quietly then. */
    const pending: Promise<unknown>[] = [];
    const later = (p: Promise<unknown>): void => void pending.push(p.catch(() => {}));
    try {
      // Staged with pauses, so that the picture has a history to show (nothing is timed here).
      const lock = (i: number, label: string) => new Mutex(ss[i]!, `${SCENE}locks/deploy`).lock({ label });
      const queued = async (prefix: string, n: number) => waitFor(async () => (await client.getPrefix(prefix)).kvs.length === n, `${n} keys under ${prefix}`);
      const e0 = await new Election(ss[9]!, `${SCENE}election/scheduler`).campaign('instance-01');
      const first = await lock(0, 'ci-runner-3:4121');
      const second = lock(1, 'ci-runner-7:977');
      await queued(`${SCENE}locks/`, 2);
      await delay(2500);
      await first.unlock();
      await second;
      later(lock(2, 'laptop-ana:31337'));
      await queued(`${SCENE}locks/`, 2);
      later(lock(0, 'ci-runner-3:4121'));
      const sem = (i: number) => new Semaphore(ss[i]!, `${SCENE}jobs/encoders`, { permits: 2 }).acquire({ label: `encoder-${i}` });
      await sem(3);
      await sem(4);
      later(sem(5));
      const rw = (i: number) => new RWMutex(ss[i]!, `${SCENE}config`);
      await rw(6).rLock();
      await rw(7).rLock();
      later(rw(8).lock());
      await delay(1500);
      await e0.resign(); // nobody leads for a while
      await delay(1500);
      const e1 = await new Election(ss[9]!, `${SCENE}election/scheduler`).campaign('instance-01');
      const e2 = new Election(ss[10]!, `${SCENE}election/scheduler`).campaign('instance-02');
      await queued(`${SCENE}election/`, 2);
      await delay(1500);
      await e1.resign(); // hands over at once
      await e2;
      await delay(1000);
      await waitFor(async () => (await client.getPrefix(SCENE)).kvs.length === 10, 'every participant queued');
      await until(
        page,
        `document.querySelectorAll('.card').length === 4 && document.querySelectorAll('tbody tr').length === 10 && document.querySelectorAll('#timeline li').length >= 10 && !/…/.test(Array.from(document.querySelectorAll('tbody td')).map(function (td) { return td.textContent; }).join(''))`,
        'the whole scene, with every lease TTL',
      );
      // Each kind told apart, each row in its role: holders first, then waiters in queue order.
      const kinds = await evaluate<Record<string, string>>(page, `Object.fromEntries(Array.from(document.querySelectorAll('.card')).map(function (c) { return [c.dataset.name, c.dataset.kind]; }))`);
      assert.deepEqual(kinds, {
        [`${SCENE}config`]: 'rwlock',
        [`${SCENE}election/scheduler`]: 'election',
        [`${SCENE}jobs/encoders`]: 'semaphore',
        [`${SCENE}locks/deploy`]: 'lock',
      });
      const roles = async (name: string): Promise<string[]> =>
        (await evaluate<{ role: string; label: string }[]>(page, `rows(${JSON.stringify(name)})`)).map((r) => `${r.role} ${r.label}`);
      assert.deepEqual(await roles(`${SCENE}locks/deploy`), ['holder holder', 'waiting #1', 'waiting #2']);
      assert.deepEqual(await roles(`${SCENE}jobs/encoders`), ['holder permit', 'holder permit', 'waiting #1']);
      assert.deepEqual(await roles(`${SCENE}config`), ['holder reader', 'holder reader', 'waiting #1 write']);
      assert.deepEqual(await roles(`${SCENE}election/scheduler`), ['holder leader']);
      assert.match(await evaluate<string>(page, `card(${JSON.stringify(`${SCENE}jobs/encoders`)}).innerText`), /semaphore · 2 permits/);
      const dir = mkdtempSync(path.join(tmpdir(), 'web-inspector-'));
      try {
        const file = process.env.WEB_INSPECTOR_SCREENSHOT === '1' ? fileURLToPath(new URL('../docs/inspector.png', import.meta.url)) : path.join(dir, 'inspector.png');
        await page.screenshot({ path: file, fullPage: false });
        assert.ok(statSync(file).size > 10_000, 'a screenshot with something in it');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
      assertNoPageErrors(page);
    } finally {
      await page.close();
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
      await closeAll(ss); // revokes every lease: the waits fail, and every key goes
      await Promise.all(pending);
    }
  });
});

describe('inspect --web without a browser', () => {
  test('binds loopback only unless --listen, which warns; refuses other Host names and writes', async () => {
    const prefix = fresh('bind');
    const ins = await inspector(prefix);
    try {
      const url = new URL(ins.url);
      assert.equal(url.hostname, '127.0.0.1');
      assert.equal(ins.proc.stderr(), '');
      assert.equal(await rawGet(ins.url), 200);
      // A DNS name rebound to 127.0.0.1 by some web page must not reach the data.
      assert.equal(await rawGet(ins.url, { host: `attacker.example:${url.port}` }), 403);
      assert.equal(await rawGet(ins.url, { method: 'POST' }), 405);
      const outside = Object.values(networkInterfaces())
        .flat()
        .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
      if (outside) {
        await assert.rejects(rawGet(ins.url, { address: outside }), /ECONNREFUSED/, `the inspector answers on ${outside} without --listen`);
      }
    } finally {
      assert.equal(await ins.proc.kill('SIGTERM'), 0);
    }

    const wide = await inspector(prefix, ['--listen', '0.0.0.0:0']);
    try {
      assert.match(wide.url, /^http:\/\/0\.0\.0\.0:\d+\/$/);
      const port = new URL(wide.url).port;
      // The warning names the address bound (the port picked for :0), as the URL does.
      await waitFor(() => new RegExp(`listening on 0\\.0\\.0\\.0:${port}, not only on loopback`).test(wide.proc.stderr()), 'the warning');
      assert.doesNotMatch(wide.proc.stderr(), /0\.0\.0\.0:0\b/);
      assert.equal(await rawGet(`http://127.0.0.1:${port}/`, { host: `inspector.example:${port}` }), 200);
    } finally {
      assert.equal(await wide.proc.kill('SIGINT'), 0);
    }
  });

  test('--open runs the desktop opener with the URL, or says how to open the page when there is none', { skip: process.platform !== 'linux' && 'xdg-open is the opener on Linux' }, async () => {
    const prefix = fresh('open');
    const dir = mkdtempSync(path.join(tmpdir(), 'web-open-'));
    try {
      // A fake xdg-open first on PATH: it records what it was asked to open, and exits.
      const opened = path.join(dir, 'opened');
      mkdirSync(path.join(dir, 'opener'));
      writeFileSync(path.join(dir, 'opener', 'xdg-open'), `#!/bin/sh\nprintf '%s\\n' "$*" > '${opened}.tmp' && mv '${opened}.tmp' '${opened}'\n`, { mode: 0o755 });
      const ins = await inspector(prefix, ['--open'], endpoint, { PATH: `${path.join(dir, 'opener')}:${process.env.PATH ?? ''}` });
      try {
        const got = await waitFor(() => existsSync(opened) && readFileSync(opened, 'utf8'), 'the opener run');
        assert.equal(got, `${ins.url}\n`);
      } finally {
        assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
      }
      // No opener on PATH (only a shell): the URL to open by hand.
      mkdirSync(path.join(dir, 'bare'));
      symlinkSync('/bin/sh', path.join(dir, 'bare', 'sh'));
      const bare = await inspector(prefix, ['--open'], endpoint, { PATH: path.join(dir, 'bare') });
      try {
        await bare.proc.next(new RegExp(`^--open: no browser opener found \\(xdg-open\\); open ${bare.url.replace(/[.]/g, '\\.')} in a browser$`));
      } finally {
        assert.equal(await bare.proc.kill('SIGTERM'), 0, bare.proc.stderr());
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('bad flags exit 2 with one line', async () => {
    const cases: [string[], RegExp][] = [
      [['inspect', '--web', 'x/', '--port', '1', '--listen', '127.0.0.1:2'], /--port or --listen/],
      [['inspect', '--web', 'x/', '--listen', 'nowhere'], /--listen must be host:port/],
      [['inspect', '--web', 'x/', '--port', '70000'], /--port must be a port number/],
      [['inspect', 'x', '--port', '1'], /--port only applies with --web/],
      [['inspect', 'x', '--show-values'], /--show-values only applies with --web/],
      [['inspect', '--web', 'x/', '--json'], /does not go with --json/],
      [['inspect', 'x', '--elections', 'x'], /--elections only applies with --web/],
      [['inspect', '--web', 'x/', '--elections', 'a,,b'], /--elections needs a name or glob/],
    ];
    for (const [args, re] of cases) {
      const p = start(args);
      assert.equal(await p.exited, 2, `${args.join(' ')}: ${p.stderr()}`);
      assert.match(p.stderr(), re);
      assert.equal(p.stderr().trimEnd().split('\n').length, 1, p.stderr());
    }
  });
});

describe('what the inspector misread for a newcomer', { timeout: 240_000 }, () => {
  test('runAsLeader and elect elections do not show as locks; a CLI lock does; --elections names them', async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('misread-kinds');
    const cron = `${prefix}app/cron`; // runAsLeader, value worker-7: the README's own names
    const scheduler = `${prefix}app/scheduler`; // etcd-concurrency elect
    const deploy = `${prefix}locks/deploy`; // etcd-concurrency lock: its default label <host>:<pid>
    const [cr, sc, dp] = [cron, scheduler, deploy].map((n) => JSON.stringify(n));
    const ins = await inspector(prefix);
    const page = await open(ins.url);
    const shutdown = new AbortController();
    let nowLeading!: () => void;
    const leading = { promise: new Promise<void>((resolve) => (nowLeading = resolve)) };
    const run = runAsLeader(client, cron, { value: 'worker-7', signal: shutdown.signal }, async (leader) => {
      nowLeading();
      await new Promise((resolve) => leader.signal.addEventListener('abort', resolve, { once: true }));
    });
    const elect = start(['elect', scheduler, 'instance-01', '--endpoints', endpoint]);
    const lock = start(['lock', deploy, '--endpoints', endpoint]);
    try {
      await leading.promise;
      await elect.match(/^leader key=/);
      await lock.match(/^key=/);
      await until(
        page,
        `card(${cr}) && card(${cr}).dataset.kind === 'lock-or-election' && card(${sc}) && card(${sc}).dataset.kind === 'lock-or-election' && card(${dp}) && card(${dp}).dataset.kind === 'lock'`,
        'the two elections as "lock or election", the CLI lock as a lock',
      );
      const badge = await evaluate<{ text: string; title: string }>(page, `(function () { var b = card(${cr}).querySelector('.badge'); return { text: b.textContent, title: b.title }; })()`);
      assert.equal(badge.text, 'lock or election');
      assert.match(badge.title, /cannot tell .*--elections/);
      const named = await inspector(prefix, ['--elections', `${prefix}app/*`]);
      const state = (await (await fetch(`${named.url}state`)).json()) as { entities: { name: string; kind: string }[] };
      const kinds = Object.fromEntries(state.entities.map((e) => [e.name, e.kind]));
      assert.deepEqual([kinds[cron], kinds[scheduler], kinds[deploy]], ['election', 'election', 'lock']);
      assert.equal(await named.proc.kill('SIGTERM'), 0);
      assertNoPageErrors(page);
    } finally {
      shutdown.abort();
      await run;
      await elect.kill('SIGINT');
      await lock.kill('SIGINT');
      await page.close();
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
    }
  });

  test("a healthy holder's TTL is refreshed from etcd: it never counts down into the warning", async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('misread-ttl');
    const name = `${prefix}locks/ttl`;
    const n = JSON.stringify(name);
    const ins = await inspector(prefix);
    const page = await open(ins.url);
    // TTL 6: the holder renews every 2 s. Before, the page asked etcd again only a second before the
    // known deadline, so it showed 1 s (orange) while etcd had 4 to 6 s.
    const holder = start(['lock', name, '--ttl', '6', '--endpoints', endpoint]);
    try {
      await holder.match(/^key=/);
      await until(page, `rows(${n}).length === 1 && /^\\d+ s \\/ 6 s$/.test(rows(${n})[0].ttl)`, "the holder's TTL");
      // The page's own clock watches the cell for more than two TTLs.
      await evaluate(page, `(function () {
        var s = window.__ttl = { min: Infinity, warn: false, start: Date.now(), samples: 0 };
        setInterval(function () {
          var c = card(${n}); if (!c) return;
          var td = c.querySelector('tbody tr').children[3], m = /^(\\d+) s \\/ 6 s$/.exec(td.textContent);
          s.samples++;
          if (m) s.min = Math.min(s.min, Number(m[1])); else s.min = -1;
          if (/warn|bad/.test(td.className)) s.warn = true;
        }, 100);
        return true;
      })()`);
      await until(page, 'Date.now() - window.__ttl.start > 14000', 'two TTLs and more of samples');
      const seen = await evaluate<{ min: number; warn: boolean; samples: number }>(page, 'window.__ttl');
      assert.ok(seen.samples > 50, JSON.stringify(seen));
      assert.equal(seen.warn, false, `the healthy holder's TTL went into the warning: ${JSON.stringify(seen)}`);
      assert.ok(seen.min >= 3, `the lowest TTL shown, ${seen.min} s, is below what a holder renewing every 2 s can have`);
      assertNoPageErrors(page);
    } finally {
      await holder.kill('SIGINT');
      await page.close();
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
    }
  });

  test('an emptied semaphore keeps its permit count (not "undefined permits"); a free lock puts no "no holder for" line in the timeline', async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('misread-empty');
    const sem = `${prefix}jobs/encoders`;
    const lockName = `${prefix}locks/free`;
    const electionName = `${prefix}elect/primary`;
    const [sm, lk, el] = [sem, lockName, electionName].map((n) => JSON.stringify(n));
    const ins = await inspector(prefix);
    const page = await open(ins.url);
    const s = await Session.create(client);
    try {
      const permit = await new Semaphore(s, sem, { permits: 3 }).acquire();
      const held = await new Mutex(s, lockName).lock();
      const leader = await new Election(s, electionName).campaign('a');
      await until(page, `rows(${sm}).length === 1 && rows(${lk}).length === 1 && rows(${el}).length === 1`, 'the three held');
      await permit.release();
      await held.unlock();
      await leader.resign();
      await until(page, `rows(${sm}).length === 0 && rows(${lk}).length === 0 && rows(${el}).length === 0 && timeline(${el}).some(function (e) { return e.type === 'gap'; })`, 'all three free');
      const semText = await evaluate<string>(page, `card(${sm}).innerText`);
      assert.doesNotMatch(semText, /undefined/);
      assert.match(semText, /semaphore · 3 permits/);
      assert.equal(await evaluate<number>(page, `timeline(${lk}).filter(function (e) { return e.type === 'gap'; }).length`), 0, 'a free lock is no event');
      assert.match(await evaluate<string>(page, `card(${lk}).innerText`), /free/, 'the card still says so');
      assertNoPageErrors(page);
    } finally {
      await s.close();
      await page.close();
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
    }
  });

  test('labels show by default on loopback; --hide-values hides them from the page and the event stream', async (t) => {
    if (!needBrowser(t)) return;
    const prefix = fresh('misread-labels');
    const name = `${prefix}locks/label`;
    const n = JSON.stringify(name);
    const s = await Session.create(client);
    const shown = await inspector(prefix);
    const hidden = await inspector(prefix, ['--hide-values']);
    const page = await open(shown.url);
    try {
      await new Mutex(s, name).lock({ label: 'ci-runner-42' });
      await until(page, `rows(${n}).length === 1 && /ci-runner-42/.test(rows(${n})[0].text)`, 'the label next to the holder');
      const state = await (await fetch(`${hidden.url}state`)).text();
      assert.ok(state.includes(name) && !state.includes('ci-runner-42'), 'a value in the stream despite --hide-values');
      const both = await runCliToEnd(['inspect', '--web', prefix, '--hide-values', '--show-values', '--endpoints', endpoint]);
      assert.equal(both.code, 2);
      assertNoPageErrors(page);
    } finally {
      await s.close();
      await page.close();
      for (const p of [shown.proc, hidden.proc]) assert.equal(await p.kill('SIGTERM'), 0, p.stderr());
    }
  });
});
