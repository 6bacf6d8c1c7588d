// The quick fault-injection run (`npm run chaos -- --quick`) as a test: a real 3-member etcd, several
// worker processes, and a nemesis killing, pausing and cutting off members and workers for about a
// minute. The run itself judges the history (chaos/checker.ts); here we check its verdict: exit 0,
// no fenced, ownerCompare or election violation, and nothing left behind.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkElection, checkEtcdCounter, checkFencedLedger, findOverlaps, type HeldInterval } from '../chaos/checker.js';
import { FencedRegister } from '../chaos/fenced-store.js';

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
    cleanupOk: boolean;
    ledgerWritesRefused: number;
  };
  phases: { name: string; operations: { cycles: number }; faults: Record<string, number>; cleanup: { ok: boolean } }[];
}

test('chaos --quick: no fenced violation and a clean cluster afterwards', { timeout: 6 * 60_000 }, async () => {
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
    assert.equal(result.totals.cleanupOk, true, context);
    assert.deepEqual(result.failures, [], context);
    assert.equal(code, 0, `exit ${code ?? signal}; ${context}`);
    assert.equal(result.ok, true, context);
    // It really ran: work was done and faults were injected in every phase.
    assert.ok(result.phases.length >= 1, context);
    for (const p of result.phases) {
      assert.ok(p.operations.cycles > 50, `${p.name}: only ${p.operations.cycles} cycles; ${context}`);
      assert.ok(Object.values(p.faults).reduce((a, b) => a + b, 0) >= 3, `${p.name}: too few faults; ${context}`);
      assert.equal(p.cleanup.ok, true, context);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

// The checker must be able to fail: fed histories with known violations, it finds each one.
test('the chaos checker catches lost updates, double owners, stale tokens and overlaps', () => {
  // Fenced ledger: the store refuses an older token; a lost update slips through only if a holder
  // writes over a value it did not read (two holders at once with tokens in order).
  const ledger = new FencedRegister('ledger');
  ledger.read('a', 10n, 0);
  ledger.write('a', 10n, 1, 1, 'a/1');
  ledger.read('b', 12n, 2);
  ledger.read('c', 13n, 3); // c reads 1 ...
  ledger.write('b', 12n, 2, 4, 'b/1'); // refused: 12 < 13
  ledger.write('c', 13n, 2, 5, 'c/1');
  assert.deepEqual(checkFencedLedger(ledger).violations, []);
  assert.equal(checkFencedLedger(ledger).writesRefused, 1);
  const lost = new FencedRegister('ledger');
  lost.read('a', 10n, 0);
  lost.read('b', 11n, 1); // both read 0
  lost.write('b', 11n, 1, 2, 'b/1');
  lost.write('b', 11n, 1, 3, 'b/2'); // same token again, over 1: lost update
  const checks = checkFencedLedger(lost).violations.map((v) => v.check).sort();
  assert.deepEqual(checks, ['fenced-count', 'fenced-lost-update', 'fenced-token-order']);

  // etcd counter: two owners both incremented to 2; a key written twice; an acknowledged write missing.
  const entry = (token: number, value: number, version = 1n) => ({ key: `ops/${token}`, value: `w:${value}`, version });
  assert.deepEqual(checkEtcdCounter(2, [entry(1, 1), entry(2, 2)], []).violations, []);
  const bad = checkEtcdCounter(2, [entry(1, 1), entry(2, 2), entry(3, 2, 2n)], [
    { worker: 'w', token: 4n, opKey: 'ops/4', value: 3, outcome: 'accepted' },
  ]);
  assert.deepEqual(bad.violations.map((v) => v.check).sort(), ['etcd-count', 'etcd-double-apply', 'etcd-lost-ack', 'etcd-lost-update']);

  // Overlaps: a frozen holder's belief covering two later holds counts once, for its whole stale stretch.
  const iv = (worker: string, token: bigint, from: number, to: number): HeldInterval => ({ worker, token, from, to, lost: false });
  const intervals = [iv('a', 1n, 0, 1000), iv('b', 2n, 300, 310), iv('c', 3n, 500, 520), iv('b', 4n, 1100, 1120)];
  const { report } = findOverlaps(intervals, [{ kind: 'worker-pause', target: 'a', worker: 'a', start: 10, end: 990 }]);
  assert.equal(report.overlaps, 1);
  assert.equal(report.overlappingPairs, 2);
  assert.equal(report.longestMs, 700);
  assert.deepEqual(report.byCause, { 'worker-pause': 1 });
  assert.equal(findOverlaps(intervals, []).report.unexplained, 1);

  // Election: one term claimed by two workers; the register refusing nothing out of order.
  const reg = new FencedRegister('election');
  reg.write('x', 5n, 0, 0);
  reg.write('y', 5n, 1, 1);
  const e = checkElection([iv('x', 5n, 0, 10), iv('y', 5n, 20, 30)], reg, []);
  assert.deepEqual(e.violations.map((v) => v.check).sort(), ['election-foreign-write', 'election-two-leaders', 'election-two-writers']);
});
