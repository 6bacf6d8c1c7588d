// `npm run bench -- --quick`: the benchmark runs as a child process against its own etcd, exits 0 on
// its own, and every phase ran with its correctness checks held (mutual exclusion, one leader at a
// time, FIFO handover, at most N permit holders, writers alone, nothing left behind, one keepalive
// stream), etcd's own Go package (interop/go) included. Speeds are not asserted: CI machines vary, and the goals are reported by the bench
// itself. A second run takes two etcd servers in turns (--etcd V,V) and bench/compare.ts renders
// its JSON side by side.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildGoInterop } from '../interop/go-build.js';
import { etcdVersion } from '../src/testing/index.js';

const root = fileURLToPath(new URL('..', import.meta.url));

// The bench builds interop/go itself, but a first build (module downloads) may take minutes: do it
// here, outside the bench's hang guard. Go >= 1.26 is required (CI installs it).
before(() => buildGoInterop().then(() => {}), { timeout: 15 * 60_000 });

/**
 * Runs `node --import tsx <script> ...args` in the repository and returns its exit and output (after
 * 'close', so the output is complete). `guardMs` is a hang guard, not a timing assertion: the script
 * must end by itself.
 */
async function runScript(script: string, args: string[], guardMs: number): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const guard = setTimeout(() => child.kill('SIGKILL'), guardMs);
  try {
    const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
    return { code, output: `${script} exit ${code ?? signal}\n--- stdout ---\n${stdout}\n--- stderr ---\n${stderr}` };
  } finally {
    clearTimeout(guard);
  }
}

/** Runs bench/main.ts with `args`; fails with its output unless it exits 0. */
async function bench(args: string[], guardMs: number): Promise<string> {
  const { code, output } = await runScript('bench/main.ts', args, guardMs);
  assert.equal(code, 0, output);
  return output;
}

interface LocksJson {
  processes: number;
  sessionsPerProcess: number;
  names: number;
  keysLeft: number;
  floor: { cycles: number; requestsPerCycle: number };
  ours: { cycles: number; violations: number; requestsPerCycle: number; txnsPerCycle?: number };
  go?: { cycles: number; violations: number; client?: string };
}

interface BenchJson {
  meta: { quick: boolean; etcd: string; go?: { client?: string; skipped?: string }; load?: { start: number[]; end?: number[] } };
  floor?: { put: { n: number }; get: { n: number }; watchNotify: { n: number } };
  uncontended?: { ours: { cycles: number; rpcsPerCycle: number }; etcd3: { cycles: number }; txns?: { cycles: number } };
  contended?: {
    impl: string;
    client?: string;
    acquisitions: number;
    mutualExclusion: boolean;
    violations: number;
    keysLeft: number;
    perContender: number[];
  }[];
  election?: { impl: string; client?: string; queued: string; violations: number; keysLeft: number; handover: { n: number } }[];
  scale?: { waiters: number; violations: number; keysLeft: number; incomplete?: unknown; rpcsPerRelease: number }[];
  semaphore?: {
    results: {
      impl: string;
      permits: number;
      holdMs: number;
      acquisitions: number;
      maxHolders: number;
      violations: number;
      tokenViolations: number;
      keysLeft: number;
    }[];
  };
  rwlock?: {
    results: {
      impl: string;
      holdMs: number;
      reads: number;
      writes: number;
      maxReaders: number;
      violations: number;
      tokenViolations: number;
      keysLeft: number;
    }[];
  };
  semaphoreScale?: {
    waiters: number;
    permits: number;
    violations: number;
    keysLeft: number;
    incomplete?: unknown;
    rpcsPerRelease: number;
  }[];
  sessions?: { sessions: number; lost: number; keepAliveStreamsOpened: number; hubLeases: number };
  locks?: LocksJson;
  oneClient?: LocksJson;
  renewals?: {
    sessions: number;
    ttl: number;
    ours: { renewals: number; lost: number; usPerRenewal: number };
    go?: { renewals: number; lost: number; usPerRenewal: number };
    idle: { renewals: number; lost: number; cpuMs: number; wallMs: number };
  };
  sessionsScale?: {
    sessions: number;
    processes: number;
    keepAliveStreamsPerProcess: number[];
    renewalsPerSec: number;
    neverLearnedGone: number;
    neverLearnedBack: number;
    learnedGone: { n: number };
    learnedBack: { n: number };
    lost: number;
  };
  goals: { id: string; met: boolean }[];
  checks: { phase: string; what: string; ok: boolean; detail: string }[];
  errors: unknown[];
}

test('npm run bench -- --quick: every phase runs with mutual exclusion held and exits 0 on its own', { timeout: 330_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'bench-test-'));
  const out = join(dir, 'bench.json');
  try {
    const output = await bench(['--quick', '--require-go', '--json', out], 320_000);

    const r = JSON.parse(await readFile(out, 'utf8')) as BenchJson;
    assert.equal(r.meta.quick, true);
    assert.match(r.meta.etcd, /^3\./, 'the etcd version was read from the server');
    assert.equal(r.meta.etcd, await etcdVersion(), 'the etcd the tests pick (ETCD_VERSION, else the newest cached)');
    assert.match(r.meta.go?.client ?? '', /^v3\./, "etcd's Go package ran, and its version is recorded");
    assert.equal(r.meta.load?.start.length, 3, 'the load average is recorded');
    assert.deepEqual(r.errors, [], output);
    assert.deepEqual(
      r.checks.filter((c) => !c.ok),
      [],
      output,
    );

    // floor
    assert.ok(r.floor && r.floor.put.n > 0 && r.floor.get.n > 0 && r.floor.watchNotify.n > 0, 'floor measured');
    // uncontended: ours and etcd3 both cycled; ours is lock Txn + unlock Txn
    assert.ok(r.uncontended && r.uncontended.ours.cycles > 0 && r.uncontended.etcd3.cycles > 0, 'uncontended measured');
    assert.equal(r.uncontended.ours.rpcsPerCycle, 2, 'uncontended lock + unlock is two RPCs');
    assert.ok((r.uncontended.txns?.cycles ?? 0) > 0, "the cycle's two Txns alone measured beside it");
    // contended: all four implementations (the Go package's real one too), mutual exclusion held in
    // each, nothing left behind
    assert.deepEqual(r.contended?.map((c) => c.impl).sort(), ['etcd3', 'go', 'ours', 'reference']);
    assert.match(r.contended.find((c) => c.impl === 'go')!.client ?? '', /^v3\./);
    for (const c of r.contended!) {
      assert.ok(c.acquisitions > 0, `${c.impl}: acquired at least once`);
      assert.equal(c.mutualExclusion, true, `${c.impl}: mutual exclusion`);
      assert.equal(c.violations, 0, `${c.impl}: no violation`);
      assert.equal(c.keysLeft, 0, `${c.impl}: no key left`);
      // (acquisitions is the sum of perContender by construction, bench/contended.ts: nothing to assert;
      // the shared counter against the acquisitions is mutualExclusion, above.)
    }
    // election: both scenarios for all four, one leader at a time
    assert.deepEqual([...new Set(r.election?.map((e) => e.impl))].sort(), ['etcd3', 'go', 'ours', 'reference']);
    assert.equal(r.election?.length, 8);
    for (const e of r.election!) {
      assert.ok(e.handover.n > 0, `${e.impl}/${e.queued}: measured`);
      assert.equal(e.violations, 0, `${e.impl}/${e.queued}: no follower led before the resign`);
      assert.equal(e.keysLeft, 0, `${e.impl}: no key left`);
    }
    // scale: 100 and 1,000 waiters fully queued, FIFO, every key removed
    assert.deepEqual(
      r.scale?.map((s) => s.waiters),
      [100, 1000],
    );
    for (const s of r.scale!) {
      assert.equal(s.incomplete, undefined, `${s.waiters} waiters all queued`);
      assert.equal(s.violations, 0, `${s.waiters}: FIFO, one holder at a time`);
      assert.equal(s.keysLeft, 0, `${s.waiters}: every key removed`);
    }
    // semaphore: our Mutex and N = 1, 2, 4 (tiny sizes), with an empty critical section and one of
    // 20 ms (which keeps the permits full, so that one holder too many would be seen); never more
    // than N holders, tokens unique
    assert.deepEqual(
      r.semaphore?.results.map((x) => `${x.impl}/${x.permits}/${x.holdMs}`),
      ['mutex/1/0', 'semaphore/1/0', 'semaphore/2/0', 'semaphore/4/0', 'mutex/1/20', 'semaphore/1/20', 'semaphore/2/20', 'semaphore/4/20'],
    );
    for (const x of r.semaphore!.results) {
      const what = `semaphore ${x.impl} N=${x.permits} holding ${x.holdMs} ms`;
      assert.ok(x.acquisitions > 0, `${what}: acquired at least once`);
      assert.ok(
        x.maxHolders <= x.permits && x.violations === 0,
        `${what}: at most N holders (${x.maxHolders} seen, ${x.violations} violations)`,
      );
      assert.equal(x.tokenViolations, 0, `${what}: fencing tokens`);
      assert.equal(x.keysLeft, 0, `${what}: no key left`);
    }
    // rwlock: reads and writes both ran, readers shared, a writer never overlapped anyone
    assert.deepEqual(
      r.rwlock?.results.map((x) => `${x.impl}/${x.holdMs}`),
      ['rwmutex/0', 'mutex/0', 'rwmutex/20', 'mutex/20'],
    );
    for (const x of r.rwlock!.results) {
      const what = `rwlock ${x.impl} holding ${x.holdMs} ms`;
      assert.ok(x.reads > 0 && x.writes > 0, `${what}: ${x.reads} reads, ${x.writes} writes`);
      if (x.impl === 'rwmutex') assert.ok(x.maxReaders > 1, `${what}: readers shared (at most ${x.maxReaders} at once)`);
      assert.equal(x.violations, 0, `${what}: exclusion`);
      assert.equal(x.tokenViolations, 0, `${what}: fencing tokens in queue order`);
      assert.equal(x.keysLeft, 0, `${what}: no key left`);
    }
    // semaphore-scale: both sizes fully queued behind 4 holders, one waiter let in per release, every key removed
    assert.deepEqual(
      r.semaphoreScale?.map((s) => s.waiters),
      [20, 100],
    );
    for (const s of r.semaphoreScale!) {
      assert.equal(s.permits, 4);
      assert.equal(s.incomplete, undefined, `semaphore-scale ${s.waiters}: all queued`);
      assert.equal(s.violations, 0, `semaphore-scale ${s.waiters}: FIFO, one waiter per release`);
      assert.equal(s.keysLeft, 0, `semaphore-scale ${s.waiters}: every key removed`);
    }
    // sessions: one shared keepalive stream, nothing lost
    assert.ok(r.sessions, 'sessions measured');
    assert.equal(r.sessions.lost, 0);
    assert.equal(r.sessions.keepAliveStreamsOpened, 1);
    assert.equal(r.sessions.hubLeases, r.sessions.sessions);
    // locks: 2 processes x 5 sessions on 20 names, ours and Go's package (as many processes), each
    // name held by one session at a time across the processes, nothing left behind
    assert.ok(r.locks, 'locks measured');
    assert.deepEqual([r.locks.processes, r.locks.sessionsPerProcess, r.locks.names], [2, 5, 20]);
    assert.ok(r.locks.floor.cycles > 0 && r.locks.floor.requestsPerCycle === 1, 'the floor: one request per Txn');
    // Two Txns a cycle at least, though several may share one request (src/client/coalescer.ts).
    assert.ok(
      r.locks.ours.cycles > 0 && (r.locks.ours.txnsPerCycle ?? 0) >= 2,
      `ours cycled, lock + unlock at least (${r.locks.ours.txnsPerCycle} Txns per cycle)`,
    );
    assert.equal(r.locks.ours.violations, 0, 'ours: one holder per name');
    assert.ok(r.locks.go && r.locks.go.cycles > 0, "Go's package cycled");
    assert.match(r.locks.go.client ?? '', /^v3\./);
    assert.equal(r.locks.go.violations, 0, 'Go: one holder per name');
    assert.equal(r.locks.keysLeft, 0, 'locks: no key left');
    // one-client: one process, 20 sessions each on a name of its own, ours and Go's package
    const one = r.oneClient;
    assert.ok(one, 'one-client measured');
    assert.deepEqual([one.processes, one.sessionsPerProcess, one.names], [1, 20, 20]);
    assert.ok(
      one.ours.cycles > 0 && (one.ours.txnsPerCycle ?? 0) >= 2,
      `one-client: ours cycled (${one.ours.txnsPerCycle} Txns per cycle)`,
    );
    assert.equal(one.ours.violations, 0, 'one-client: one holder per name');
    assert.ok(one.go && one.go.cycles > 0 && one.go.violations === 0, "one-client: Go's package cycled, one holder per name");
    assert.equal(one.keysLeft, 0, 'one-client: no key left');
    // renewals: 100 sessions at TTL 6, ours and Go's package renewed in their windows; the idle
    // window was measured; no session lost
    const rn = r.renewals;
    assert.ok(rn, 'renewals measured');
    assert.deepEqual([rn.sessions, rn.ttl], [100, 6]);
    assert.ok(rn.ours.renewals > 0 && Number.isFinite(rn.ours.usPerRenewal), `ours renewed (${rn.ours.renewals})`);
    assert.ok(rn.go && rn.go.renewals > 0 && Number.isFinite(rn.go.usPerRenewal), "Go's package renewed");
    assert.ok(rn.idle.wallMs > 0 && rn.idle.cpuMs >= 0, 'the idle window was measured');
    assert.deepEqual([rn.ours.lost, rn.go.lost, rn.idle.lost], [0, 0, 0]);
    assert.ok(r.goals.some((g) => g.id === 'renewal-cpu-vs-go') && r.goals.some((g) => g.id === 'renewal-idle'), 'renewal goals judged');
    // sessions-scale: 2 x 50 sessions, one keepalive stream each; after etcd's kill and restart
    // every session learned both (none lost: the outage is shorter than any deadline)
    const ss = r.sessionsScale;
    assert.ok(ss, 'sessions-scale measured');
    assert.equal(ss.sessions, 100);
    assert.deepEqual(ss.keepAliveStreamsPerProcess, [1, 1]);
    assert.ok(ss.renewalsPerSec > 0, 'renewals seen in the window');
    assert.equal(ss.neverLearnedGone, 0, 'every session learned etcd was gone');
    assert.equal(ss.neverLearnedBack, 0, 'every session learned etcd was back');
    assert.equal(ss.learnedGone.n, 100);
    assert.equal(ss.learnedBack.n, 100);
    assert.equal(ss.lost, 0);
    // every goal is judged (MET or MISSED), none silently skipped
    assert.ok(
      r.goals.some((g) => g.id === 'locks-vs-floor') && r.goals.some((g) => g.id === 'sessions-scale-outage'),
      'the new goals judged',
    );
    assert.ok(r.goals.length >= 15, `goals judged: ${r.goals.map((g) => g.id).join(', ')}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('--etcd V,V: two servers take turns; the JSON lists both runs; bench/compare.ts renders them side by side', {
  timeout: 180_000,
}, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'bench-test-'));
  const out = join(dir, 'bench.json');
  const md = join(dir, 'bench.md');
  try {
    const v = await etcdVersion();
    const output = await bench(
      ['--quick', '--require-go', '--only', 'contended', '--contenders', '3', '--etcd', `${v},${v}`, '--json', out],
      170_000,
    );
    const runs = JSON.parse(await readFile(out, 'utf8')) as BenchJson[];
    assert.equal(runs.length, 2, output);
    for (const r of runs) {
      assert.equal(r.meta.etcd, v);
      assert.deepEqual(r.errors, [], output);
      assert.deepEqual(
        r.contended?.map((c) => c.impl),
        ['ours', 'go', 'reference', 'etcd3'],
      );
      for (const c of r.contended!) assert.equal(c.mutualExclusion, true, `${c.impl}: mutual exclusion`);
    }
    const compare = await runScript('bench/compare.ts', [out, '--markdown', md], 60_000);
    assert.equal(compare.code, 0, compare.output);
    const text = await readFile(md, 'utf8');
    assert.match(text, new RegExp(`acq/s ${v.replace(/\./g, '\\.')} \\| acq/s ${v.replace(/\./g, '\\.')}`));
    assert.match(text, /\| ours ÷ Go \|/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('--only rtt --quick: the phases on a 3-member cluster whose every path is delayed, checks held, goals judged', {
  timeout: 240_000,
}, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'bench-test-'));
  const out = join(dir, 'bench.json');
  const md = join(dir, 'bench.md');
  try {
    const output = await bench(
      ['--quick', '--require-go', '--only', 'rtt', '--rtt', '10', '--contenders', '3', '--json', out, '--markdown', md],
      230_000,
    );
    type S = { n: number; min: number };
    const r = JSON.parse(await readFile(out, 'utf8')) as BenchJson & {
      rtt?: {
        rttMs: number;
        net?: { rtt: S; put: S; notify: S };
        uncontended?: { ours: { cycles: number }; go?: { cycles: number } };
        contended?: BenchJson['contended'];
        election?: { results: NonNullable<BenchJson['election']> };
        errors: unknown[];
      }[];
    };
    assert.deepEqual(r.errors, [], output);
    assert.equal(r.rtt?.length, 1, output);
    const run = r.rtt![0]!;
    assert.deepEqual(run.errors, [], output);
    assert.equal(run.rttMs, 10);
    // The proxies hold every chunk 5 ms each way, so no round trip can take less than 10 ms (a
    // bound, not a timing): the client's path is delayed; and a Put commits through Raft, whose
    // messages cross a peer proxy too, so it cannot take less than two round trips.
    assert.ok(run.net!.rtt.min >= 10, `a round trip through the proxy: ${run.net!.rtt.min} ms`);
    assert.ok(run.net!.put.min >= 20, `a Put pays the client's and the members' round trips: ${run.net!.put.min} ms`);
    assert.ok(run.uncontended!.ours.cycles > 0 && run.uncontended!.go!.cycles > 0);
    assert.deepEqual(
      run.contended?.map((c) => c.impl),
      ['ours', 'go', 'etcd3'],
    );
    for (const c of run.contended!) {
      assert.equal(c.mutualExclusion, true, `${c.impl}: mutual exclusion`);
      assert.ok(c.acquisitions > 0, `${c.impl}: acquired`);
      assert.equal(c.keysLeft, 0);
    }
    assert.equal(run.election?.results.length, 6);
    for (const e of run.election!.results) assert.ok(e.violations === 0 && e.keysLeft === 0 && e.handover.n > 0, `${e.impl} ${e.queued}`);
    assert.deepEqual(
      r.checks.filter((c) => !c.ok),
      [],
      output,
    );
    assert.deepEqual(
      r.goals.map((g) => g.id),
      ['rtt10-contended', 'rtt10-election', 'rtt10-uncontended'],
      'each goal judged, MET or MISSED',
    );
    assert.match(await readFile(md, 'utf8'), /Real round-trip times: 10 ms RTT on every path, 3 members/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
