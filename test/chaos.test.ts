// The quick fault-injection run (`npm run chaos -- --quick`) as a test: a real 3-member etcd, several
// worker processes, and a nemesis killing, pausing and cutting off members and workers for about a
// minute. The run itself judges the history (chaos/checker.ts); here we check its verdict: exit 0,
// no violation of any check, no unexpected error, no stuck wait, no harness problem, and nothing
// left behind. test/chaos-checker.test.ts shows that each of those verdicts can fail.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));

interface ChaosResult {
  ok: boolean;
  failures: string[];
  seed: number;
  totals: {
    operations: number;
    faults: number;
    fencedViolations: number;
    etcdCounterViolations: number;
    electionViolations: number;
    semaphoreViolations: number;
    rwViolations: number;
    violations: number;
    unexplainedUnfencedOverlaps: number;
    unexplainedFencedHoldOverlaps: number;
    unexplainedLeaderTermOverlaps: number;
    unexplainedSemaphoreOverlaps: number;
    unexplainedRWOverlaps: number;
    leaseExpiredEarly: number;
    leaseRevokedByDeposedLeader: number;
    carefulWritesRefused: number;
    unexpectedErrors: number;
    stuckWaits: number;
    harnessProblems: number;
    cleanupOk: boolean;
    ledgerWritesRefused: number;
  };
  phases: {
    name: string;
    operations: {
      cycles: number;
      electionTerms: number;
      fencedAcquisitions: number;
      unfencedHolds: number;
      semaphoreHolds: number;
      rwReadHolds: number;
      rwWriteHolds: number;
    };
    faults: Record<string, number>;
    cleanup: { ok: boolean };
    violations: { check: string; detail: string }[];
    unexpectedErrors: string[];
    stuckWaits: string[];
    problems: string[];
  }[];
}

test('chaos --quick: no violation, overlap, early expiry, unexpected error or stuck wait, and a clean cluster afterwards', { timeout: 6 * 60_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'etcd-concurrency-chaos-test-'));
  const json = join(dir, 'result.json');
  try {
    const child = spawn(process.execPath, ['--import', 'tsx', 'chaos/main.ts', '--quick', '--json', json], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (output += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (output += d));
    const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
    const result = JSON.parse(await readFile(json, 'utf8')) as ChaosResult;
    const context = `seed ${result.seed}; output:\n${output}`;
    assert.equal(result.totals.fencedViolations, 0, context);
    assert.equal(result.totals.etcdCounterViolations, 0, context);
    assert.equal(result.totals.electionViolations, 0, context);
    assert.equal(result.totals.semaphoreViolations, 0, context);
    assert.equal(result.totals.rwViolations, 0, context);
    assert.equal(result.totals.unexplainedUnfencedOverlaps, 0, context);
    assert.equal(result.totals.unexplainedFencedHoldOverlaps, 0, context);
    assert.equal(result.totals.unexplainedLeaderTermOverlaps, 0, context);
    assert.equal(result.totals.unexplainedSemaphoreOverlaps, 0, context);
    assert.equal(result.totals.unexplainedRWOverlaps, 0, context);
    assert.equal(result.totals.leaseExpiredEarly, 0, context);
    assert.equal(result.totals.carefulWritesRefused, 0, context);
    assert.equal(result.totals.violations, 0, context);
    assert.equal(result.totals.unexpectedErrors, 0, context);
    assert.equal(result.totals.stuckWaits, 0, context);
    assert.equal(result.totals.harnessProblems, 0, context);
    assert.equal(result.totals.cleanupOk, true, context);
    assert.deepEqual(result.failures, [], context);
    assert.equal(code, 0, `exit ${code ?? signal}; ${context}`);
    assert.equal(result.ok, true, context);
    // It really ran: work was done and faults were injected in every phase.
    assert.ok(result.phases.length >= 1, context);
    for (const p of result.phases) {
      assert.ok(p.operations.cycles > 50, `${p.name}: only ${p.operations.cycles} cycles; ${context}`);
      // Every workload ran, so each verdict had something to judge.
      const ops = p.operations;
      assert.ok(ops.fencedAcquisitions > 0 && ops.unfencedHolds > 0 && ops.electionTerms > 0, `${p.name}: a workload did nothing; ${context}`);
      assert.ok(ops.semaphoreHolds > 0 && ops.rwReadHolds > 0 && ops.rwWriteHolds > 0, `${p.name}: the semaphore or RW lock workload did nothing; ${context}`);
      assert.deepEqual(p.violations, [], context);
      assert.deepEqual(p.unexpectedErrors, [], context);
      assert.deepEqual(p.stuckWaits, [], context);
      assert.deepEqual(p.problems, [], context);
      assert.ok(Object.values(p.faults).reduce((a, b) => a + b, 0) >= 3, `${p.name}: too few faults; ${context}`);
      assert.equal(p.cleanup.ok, true, context);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
