// `npm run bench -- --quick`: the benchmark runs as a child process against its own etcd, exits 0 on
// its own, and every phase ran with its correctness checks held (mutual exclusion, one leader at a
// time, FIFO handover, nothing left behind, one keepalive stream). Speeds are not asserted: CI
// machines vary, and the goals are reported by the bench itself.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

interface BenchJson {
  meta: { quick: boolean; etcd: string };
  floor?: { put: { n: number }; get: { n: number }; watchNotify: { n: number } };
  uncontended?: { ours: { cycles: number; rpcsPerCycle: number }; etcd3: { cycles: number } };
  contended?: { impl: string; acquisitions: number; mutualExclusion: boolean; violations: number; keysLeft: number; perContender: number[] }[];
  election?: { impl: string; queued: string; violations: number; keysLeft: number; handover: { n: number } }[];
  scale?: { waiters: number; violations: number; keysLeft: number; incomplete?: unknown; rpcsPerRelease: number }[];
  sessions?: { sessions: number; lost: number; keepAliveStreamsOpened: number; hubLeases: number };
  goals: { id: string; met: boolean }[];
  checks: { phase: string; what: string; ok: boolean; detail: string }[];
  errors: unknown[];
}

test('npm run bench -- --quick: every phase runs with mutual exclusion held and exits 0 on its own', { timeout: 240_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'bench-test-'));
  const out = join(dir, 'bench.json');
  try {
    const child = spawn(process.execPath, ['--import', 'tsx', 'bench/main.ts', '--quick', '--json', out], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    // A hang guard, not a timing assertion: the bench must end by itself.
    const guard = setTimeout(() => child.kill('SIGKILL'), 230_000);
    const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null];
    clearTimeout(guard);
    const output = `exit ${code ?? signal}\n--- stdout ---\n${stdout}\n--- stderr ---\n${stderr}`;
    assert.equal(code, 0, output);

    const r = JSON.parse(await readFile(out, 'utf8')) as BenchJson;
    assert.equal(r.meta.quick, true);
    assert.match(r.meta.etcd, /^3\./, 'the etcd version was read from the server');
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
    // contended: all three implementations, mutual exclusion held in each, nothing left behind
    assert.deepEqual(r.contended?.map((c) => c.impl).sort(), ['etcd3', 'ours', 'reference']);
    for (const c of r.contended!) {
      assert.ok(c.acquisitions > 0, `${c.impl}: acquired at least once`);
      assert.equal(c.mutualExclusion, true, `${c.impl}: mutual exclusion`);
      assert.equal(c.violations, 0, `${c.impl}: no violation`);
      assert.equal(c.keysLeft, 0, `${c.impl}: no key left`);
      assert.equal(
        c.perContender.reduce((a, b) => a + b, 0),
        c.acquisitions,
        `${c.impl}: total equals acquisitions`,
      );
    }
    // election: both scenarios for all three, one leader at a time
    assert.equal(r.election?.length, 6);
    for (const e of r.election!) {
      assert.ok(e.handover.n > 0, `${e.impl}/${e.queued}: measured`);
      assert.equal(e.violations, 0, `${e.impl}/${e.queued}: no follower led before the resign`);
      assert.equal(e.keysLeft, 0, `${e.impl}: no key left`);
    }
    // scale: 100 and 1,000 waiters fully queued, FIFO, every key removed
    assert.deepEqual(r.scale?.map((s) => s.waiters), [100, 1000]);
    for (const s of r.scale!) {
      assert.equal(s.incomplete, undefined, `${s.waiters} waiters all queued`);
      assert.equal(s.violations, 0, `${s.waiters}: FIFO, one holder at a time`);
      assert.equal(s.keysLeft, 0, `${s.waiters}: every key removed`);
    }
    // sessions: one shared keepalive stream, nothing lost
    assert.ok(r.sessions, 'sessions measured');
    assert.equal(r.sessions.lost, 0);
    assert.equal(r.sessions.keepAliveStreamsOpened, 1);
    assert.equal(r.sessions.hubLeases, r.sessions.sessions);
    // every goal is judged (MET or MISSED), none silently skipped
    assert.ok(r.goals.length >= 10, `goals judged: ${r.goals.map((g) => g.id).join(', ')}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
