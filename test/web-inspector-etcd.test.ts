// `etcd-concurrency inspect --web`, in a real browser, under what etcd does: a compaction while the
// inspector was cut off, one watch feeding every page, an auth-enabled etcd with a read-only user;
// and the README's screenshot. Debian's chromium driven headless through
// playwright-core (test/web-inspector-browser.ts), against a real etcd and real CLI processes
// (dist/cli/main.js: `npm run build` first). Every wait is on the page's content, a child's output,
// its exit or etcd state; never on a sleep. Without a browser every browser test skips with the
// reason printed, or fails when CI is set (unless WEB_INSPECTOR_ALLOW_SKIP=1).
//
// The screenshot test writes docs/inspector.png when WEB_INSPECTOR_SCREENSHOT=1 (to refresh the
// README's picture), and a temporary file otherwise.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { Client, Election, Mutex, RWMutex, Semaphore, Session } from '../src/index.js';
import { startEtcd, startProxy } from '../src/testing/index.js';
import {
  assertOneErrorLine,
  closeAll,
  grpcHandled,
  grpcStarted,
  hasEtcdctl,
  openSessions,
  settledOrHang,
  track,
  waitFor,
  type CliProc,
} from './helpers.js';
import { SCENE, inspectorFile } from './web-inspector-fixture.js';
import { assertNoPageErrors, evaluate, needBrowser, open, until } from './web-inspector-browser.js';

const ROOT = 'test/web-etcd/';
/** The screenshot test writes the README's picture (docs/inspector.png). */
const PICTURE = process.env.WEB_INSPECTOR_SCREENSHOT === '1';

let client: Client;
let endpoint: string;
/** etcd's client URL, for its /metrics. */
let clientUrl: string;

const { fresh, start, inspector, queueOf } = inspectorFile(
  ROOT,
  (e, c) => ((client = c), (endpoint = e.endpoints[0]!), (clientUrl = e.clientUrls[0]!)),
  { browser: true },
);

// ── tests ──────────────────────────────────────────────────────────────────────────────────────

describe('inspect --web in chromium', { timeout: 240_000 }, () => {
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
      await until(
        page,
        `rows(${n}).length === 2 && rows(${n})[0].token === '${q[0]!.token}' && rows(${n})[1].token === '${q[1]!.token}'`,
        'the holder and the waiter',
      );

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
        await until(
          page,
          `rows(${n}).length === ${count} && rows(${n}).every(function (r) { return /^\\d+ s \\/ 600 s$/.test(r.ttl); })`,
          `${count} rows with their TTLs`,
        );
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

  test('an auth-enabled etcd and a user with a read-only role on the prefix: the page goes live, and no password shows anywhere', {
    skip: !hasEtcdctl() && 'needs etcdctl (to set up users and enable auth)',
  }, async (t) => {
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
      await until(
        page,
        `rows(${n}).length === 2 && rows(${n}).every(function (r) { return /^\\d+ s \\/ 30 s$/.test(r.ttl); })`,
        'the holder and the waiter with their TTLs',
      );
      await held.unlock();
      await settledOrHang(waiting, 'the waiter taking the lock');
      await until(
        page,
        `document.querySelector('.status.live') && rows(${n}).length === 1 && timeline(${n}).some(function (e) { return e.type === 'acquired'; })`,
        'the hand-over, still live',
      );
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
  });

  test('the screenshot: a lock, a semaphore, a readers-writer lock and an election with a history', async (t) => {
    if (!needBrowser(t)) return;
    const ss = await Promise.all(Array.from({ length: 11 }, () => Session.create(client, { ttl: 30 })));
    const ins = await inspector(SCENE);
    const page = await open(ins.url);
    /** Waits that only end when the sessions close: settled quietly then. */
    const pending: Promise<unknown>[] = [];
    const later = (p: Promise<unknown>): void => void pending.push(p.catch(() => {}));
    try {
      // Staged step by step, each seen on the page before the next. When the README's picture is
      // written, each step also lasts a while, so that its bars have a history to show (nothing
      // waits on that time: it is the picture's content).
      const step = async (expr: string, what: string, lastsMs: number): Promise<void> => {
        await until(page, expr, what);
        if (PICTURE) await delay(lastsMs);
      };
      const [L, J, C, E] = ['locks/deploy', 'jobs/encoders', 'config', 'election/scheduler'].map((n) => JSON.stringify(`${SCENE}${n}`));
      const lock = (i: number, label: string) => new Mutex(ss[i]!, `${SCENE}locks/deploy`).lock({ label });
      const queued = async (prefix: string, n: number) =>
        waitFor(async () => (await client.getPrefix(prefix)).kvs.length === n, `${n} keys under ${prefix}`);
      const e0 = await new Election(ss[9]!, `${SCENE}election/scheduler`).campaign('instance-01');
      const first = await lock(0, 'ci-runner-3:4121');
      const second = lock(1, 'ci-runner-7:977');
      await queued(`${SCENE}locks/`, 2);
      await step(`rows(${L}).length === 2 && rows(${E}).length === 1`, 'the lock with a holder and a waiter, and the leader', 2500);
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
      await step(
        `rows(${J}).length === 3 && rows(${C}).length === 3`,
        'the semaphore and the readers-writer lock, each with a waiter',
        1500,
      );
      await e0.resign(); // nobody leads for a while
      await step(`rows(${E}).length === 0`, 'nobody leading', 1500);
      const e1 = await new Election(ss[9]!, `${SCENE}election/scheduler`).campaign('instance-01');
      const e2 = new Election(ss[10]!, `${SCENE}election/scheduler`).campaign('instance-02');
      await queued(`${SCENE}election/`, 2);
      await step(`rows(${E}).length === 2`, 'the leader and a candidate', 1500);
      await e1.resign(); // hands over at once
      const leader = await e2;
      await step(
        `rows(${E}).length === 1 && rows(${E})[0].role === 'holder' && rows(${E})[0].token === '${leader.fencingToken}'`,
        'the new leader',
        1000,
      );
      await waitFor(async () => (await client.getPrefix(SCENE)).kvs.length === 10, 'every participant queued');
      await until(
        page,
        `document.querySelectorAll('.card').length === 4 && document.querySelectorAll('tbody tr').length === 10 && document.querySelectorAll('#timeline li').length >= 10 && !/…/.test(Array.from(document.querySelectorAll('tbody td')).map(function (td) { return td.textContent; }).join(''))`,
        'the whole scene, with every lease TTL',
      );
      // Each kind told apart, each row in its role: holders first, then waiters in queue order.
      const kinds = await evaluate<Record<string, string>>(
        page,
        `Object.fromEntries(Array.from(document.querySelectorAll('.card')).map(function (c) { return [c.dataset.name, c.dataset.kind]; }))`,
      );
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
        const file = PICTURE ? fileURLToPath(new URL('../docs/inspector.png', import.meta.url)) : path.join(dir, 'inspector.png');
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
