// How `inspect --web` scales: 1,000 waiters on one lock, then 100 locks under one prefix, each
// with a holder and two waiters. Measures the page's update latency (a change in etcd until the
// DOM shows it, read in the page at the animation frame that shows it) and the inspector's CPU.
// Not part of `npm test` (no .test.ts): run it when the inspector changes, and put the figures in
// docs/cli.md.
//
//   npm run build && ETCD_VERSION=3.7 node scripts/etcd.mjs exec 3.7 -- node --import tsx test/web-inspector-scale.ts
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chromium, type Page } from 'playwright-core';
import { Client, Mutex, Session, type LockHandle } from '../src/index.js';
import { startEtcd } from '../src/testing/index.js';
import { CLI_MAIN, grpcHandled, waitFor } from './helpers.js';

const WAITERS = Number(process.env.WAITERS ?? 1000);
const LOCKS = Number(process.env.LOCKS ?? 100);
const SAMPLES = Number(process.env.SAMPLES ?? 30);
const TTL = 30;

/** CPU seconds (user + system) a process has used, from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

function summary(xs: number[]): string {
  return `p50 ${pct(xs, 50)} ms, p90 ${pct(xs, 90)} ms, max ${Math.max(...xs)} ms (n=${xs.length})`;
}

/** Resolves (with the page's Date.now()) at the first animation frame where `expr` holds. */
async function pageTime(page: Page, expr: string): Promise<number> {
  const h = await page.waitForFunction(`(function () { return (${expr}) ? Date.now() : 0; })()`, undefined, {
    timeout: 120_000,
    polling: 'raf',
  });
  return (await h.jsonValue()) as number;
}

const holderIs = (name: string, token: bigint): string =>
  `(function () { var c = Array.from(document.querySelectorAll('.card')).find(function (c) { return c.dataset.name === ${JSON.stringify(name)}; }); var r = c && c.querySelector('tbody tr'); return r && r.dataset.role === 'holder' && r.dataset.token === '${token}'; })()`;

/** A lock call whose failure (its session closed at the end) is expected. */
function quiet<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return p;
}

async function sessions(client: Client, n: number): Promise<Session[]> {
  const out: Session[] = [];
  for (let i = 0; i < n; i += 100)
    out.push(...(await Promise.all(Array.from({ length: Math.min(100, n - i) }, () => Session.create(client, { ttl: TTL })))));
  return out;
}

async function main(): Promise<void> {
  const etcd = await startEtcd();
  const client = new Client({ endpoints: etcd.endpoints });
  const prof = process.env.INSPECTOR_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.INSPECTOR_PROF}`] : [];
  const ins = spawn(process.execPath, [...prof, CLI_MAIN, 'inspect', '--web', 'scale/', '--port', '0', '--endpoints', etcd.endpoints[0]!], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve) =>
    ins.stdout!.on('data', (d: Buffer) => {
      const m = /(http:\/\/\S+)/.exec(String(d));
      if (m) resolve(m[1]!);
    }),
  );
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox'],
  });
  // waitForFunction's per-frame polling needs eval, which the page's CSP forbids: bypass it here.
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, bypassCSP: true });
  await page.goto(url);
  const pid = ins.pid!;
  const ttlCalls = () => grpcHandled(etcd.clientUrls[0]!, 'LeaseTimeToLive');
  const lines: string[] = [];
  const say = (s: string): void => {
    lines.push(s);
    console.log(s);
  };
  say(`etcd ${etcd.version}, one member; inspector and chromium on the same 2-core machine; lease TTL ${TTL} s`);

  // ── 1,000 waiters on one lock ─────────────────────────────────────────────────────────────
  {
    const name = 'scale/one/lock';
    const ss = await sessions(client, WAITERS + SAMPLES);
    let cpu0 = cpuSeconds(pid);
    let t0 = Date.now();
    const handles: Promise<LockHandle>[] = [];
    handles.push(quiet(new Mutex(ss[0]!, name).lock()));
    await handles[0];
    for (let i = 1; i < WAITERS; i++) {
      handles.push(quiet(new Mutex(ss[i]!, name).lock()));
      if (i % 100 === 0) await new Promise((r) => setTimeout(r, 0));
    }
    const keys = async () => (await client.getPrefix(`${name}/`)).kvs.sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1));
    let all = await keys();
    while (all.length < WAITERS) all = await keys();
    const lastRev = all[all.length - 1]!.createRevision;
    const shownAll = await pageTime(page, `window.__inspector && BigInt(window.__inspector.revision) >= ${lastRev}n`);
    say(
      `${WAITERS} waiters queued on one lock as fast as one client can (${((Date.now() - t0) / 1000).toFixed(1)} s): the page showed them all ${shownAll - t0} ms after the first lock call; inspector CPU ${(cpuSeconds(pid) - cpu0).toFixed(2)} s for the ${WAITERS} keys and their TimeToLive calls`,
    );

    // A newcomer joining the back of a 1,000-long queue.
    const joins: number[] = [];
    cpu0 = cpuSeconds(pid);
    t0 = Date.now();
    for (let i = 0; i < SAMPLES; i++) {
      const before = (await keys()).length;
      const start = Date.now();
      handles[WAITERS + i] = quiet(new Mutex(ss[WAITERS + i]!, name).lock());
      const shown = await pageTime(
        page,
        `(function () { var c = document.querySelector('.card'); return c && new RegExp('· ' + ${before} + ' waiting').test(c.innerText); })()`,
      );
      joins.push(shown - start);
    }
    let wall = (Date.now() - t0) / 1000;
    say(
      `  a new waiter at the back of the queue, key written → row count on the page: ${summary(joins)}; inspector CPU ${(((cpuSeconds(pid) - cpu0) / wall) * 100).toFixed(0)} % of a core while it ran`,
    );

    // Hand-overs at the front of the 1,000-long queue (concurrent calls queue in any order: follow etcd's).
    const queue = await keys();
    const tokens = queue.map((kv) => kv.createRevision);
    const bySession = new Map(ss.map((s, i) => [`${name}/${s.leaseId.toString(16)}`, i]));
    const handovers: number[] = [];
    cpu0 = cpuSeconds(pid);
    t0 = Date.now();
    for (let i = 0; i < SAMPLES; i++) {
      const h = await handles[bySession.get(queue[i]!.key.toString())!]!;
      const start = Date.now();
      await h.unlock();
      const shown = await pageTime(page, holderIs(name, tokens[i + 1]!));
      handovers.push(shown - start);
    }
    wall = (Date.now() - t0) / 1000;
    say(
      `  hand-over (unlock sent → next holder on the page): ${summary(handovers)}; inspector CPU ${(((cpuSeconds(pid) - cpu0) / wall) * 100).toFixed(0)} % of a core while it ran`,
    );

    // Idle for a TTL's worth of the inspector's work: until it has asked about the holder's lease
    // six times (it asks every sixth of a TTL, docs/cli.md), each ask an event etcd counts.
    const calls0 = await ttlCalls();
    cpu0 = cpuSeconds(pid);
    t0 = Date.now();
    await waitFor(async () => (await ttlCalls()) >= calls0 + 6, "six asks about the holder's lease", {
      intervalMs: 500,
      limitMs: (TTL + 30) * 1000,
    });
    wall = (Date.now() - t0) / 1000;
    say(
      `  idle with ${WAITERS} leases for ${wall.toFixed(0)} s: inspector CPU ${(((cpuSeconds(pid) - cpu0) / wall) * 100).toFixed(1)} % of a core, ${(((await ttlCalls()) - calls0) / wall).toFixed(1)} LeaseTimeToLive/s (holders only are asked again)`,
    );

    await Promise.all(ss.map((s) => s.close()));
    await Promise.allSettled(handles);
    await pageTime(page, `document.querySelectorAll('tbody tr').length === 0`);
  }

  // ── 100 locks, each with a holder and two waiters ─────────────────────────────────────────
  {
    const ss = await sessions(client, LOCKS * 3);
    const names = Array.from({ length: LOCKS }, (_, i) => `scale/many/lock-${String(i).padStart(3, '0')}`);
    let cpu0 = cpuSeconds(pid);
    let t0 = Date.now();
    const handles = names.map((n, i) => [0, 1, 2].map((j) => quiet(new Mutex(ss[i * 3 + j]!, n).lock())));
    let count = 0;
    while (count < LOCKS * 3) count = (await client.getPrefix('scale/many/')).kvs.length;
    const rev = (await client.getPrefix('scale/many/')).header.revision;
    const shown = await pageTime(
      page,
      `window.__inspector && BigInt(window.__inspector.revision) >= ${rev}n && document.querySelectorAll('.card').length >= ${LOCKS}`,
    );
    say(
      `${LOCKS} locks under one prefix, each with a holder and 2 waiters (${LOCKS * 3} keys): on the page ${shown - t0} ms after the first lock call; inspector CPU ${(cpuSeconds(pid) - cpu0).toFixed(2)} s`,
    );

    const bySession = new Map(ss.map((s, i) => [s.leaseId, i]));
    const lat: number[] = [];
    cpu0 = cpuSeconds(pid);
    t0 = Date.now();
    for (let i = 0; i < Math.min(SAMPLES, LOCKS); i++) {
      const li = (i * 37) % LOCKS;
      const n = names[li]!;
      // The queue in etcd's order (the three calls raced): the holder's handle, and who comes next.
      const q = (await client.getPrefix(`${n}/`)).kvs.sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1));
      const h = await handles[li]![bySession.get(q[0]!.lease)! - li * 3]!;
      const start = Date.now();
      await h.unlock();
      lat.push((await pageTime(page, holderIs(n, q[1]!.createRevision))) - start);
    }
    const wall = (Date.now() - t0) / 1000;
    say(
      `  hand-over on one of ${LOCKS} locks (unlock sent → next holder on the page): ${summary(lat)}; inspector CPU ${(((cpuSeconds(pid) - cpu0) / wall) * 100).toFixed(0)} % of a core while it ran`,
    );
    await Promise.all(ss.map((s) => s.close()));
    await Promise.allSettled(handles.flat());
  }

  await browser.close();
  ins.kill('SIGTERM');
  await new Promise((r) => ins.once('exit', r));
  await client.close();
  await etcd.stop();
}

await main();
