// `etcd-concurrency inspect --web`, in a real browser: what the page once misled a newcomer about
// (elections shown as locks, a counting-down TTL, an emptied semaphore, labels). Debian's chromium
// driven headless through playwright-core (test/web-inspector-browser.ts), against a real etcd and real CLI processes
// (dist/cli/main.js: `npm run build` first). Every wait is on the page's content, a child's output,
// its exit or etcd state; never on a sleep. Without a browser every browser test skips with the
// reason printed, or fails when CI is set (unless WEB_INSPECTOR_ALLOW_SKIP=1).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, Election, Mutex, runAsLeader, Semaphore, Session } from '../src/index.js';
import { runCliToEnd } from './helpers.js';
import { inspectorFile } from './web-inspector-fixture.js';
import { assertNoPageErrors, evaluate, needBrowser, open, until } from './web-inspector-browser.js';

const ROOT = 'test/web-newcomer/';

let client: Client;
let endpoint: string;

const { fresh, start, inspector } = inspectorFile(ROOT, (e, c) => ((client = c), (endpoint = e.endpoints[0]!)), { browser: true });

// ── tests ──────────────────────────────────────────────────────────────────────────────────────

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
      const badge = await evaluate<{ text: string; title: string }>(
        page,
        `(function () { var b = card(${cr}).querySelector('.badge'); return { text: b.textContent, title: b.title }; })()`,
      );
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
      await evaluate(
        page,
        `(function () {
        var s = window.__ttl = { min: Infinity, warn: false, start: Date.now(), samples: 0 };
        setInterval(function () {
          var c = card(${n}); if (!c) return;
          var td = c.querySelector('tbody tr').children[3], m = /^(\\d+) s \\/ 6 s$/.exec(td.textContent);
          s.samples++;
          if (m) s.min = Math.min(s.min, Number(m[1])); else s.min = -1;
          if (/warn|bad/.test(td.className)) s.warn = true;
        }, 100);
        return true;
      })()`,
      );
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
      await until(
        page,
        `rows(${sm}).length === 0 && rows(${lk}).length === 0 && rows(${el}).length === 0 && timeline(${el}).some(function (e) { return e.type === 'gap'; })`,
        'all three free',
      );
      const semText = await evaluate<string>(page, `card(${sm}).innerText`);
      assert.doesNotMatch(semText, /undefined/);
      assert.match(semText, /semaphore · 3 permits/);
      assert.equal(
        await evaluate<number>(page, `timeline(${lk}).filter(function (e) { return e.type === 'gap'; }).length`),
        0,
        'a free lock is no event',
      );
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
