// Proof that the simulator catches what matters (issue 37, item 8): each mutant of sim/mutants.ts,
// applied to a copy of the repository, is caught within 2,000 seeds of the default workload and
// profile, as `npm run sim -- --seeds 2000` (no other flag) would run them there. Two copies are
// hunted at a time; each hunt stops at its first failing seed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { huntAll, MUTANTS } from '../sim/mutants.js';

const SEEDS = 2000;

test('every mutant is caught within 2,000 seeds of the default workload and profile', async (t) => {
  const t0 = performance.now();
  const hunted = MUTANTS.filter((m) => m.open === undefined);
  for (const m of MUTANTS) if (m.open !== undefined) t.diagnostic(`not hunted, not caught yet: ${m.name}: ${m.open}`);
  const results = await huntAll(hunted, {
    seeds: SEEDS,
    jobs: 2,
    each: (r) =>
      t.diagnostic(
        `${r.mutant.name}: ${r.seed === null ? `not caught in ${SEEDS} seeds` : `seed ${r.seed} (${r.violations[0]?.rule})`}, ${(r.ms / 1000).toFixed(1)} s`,
      ),
  });
  t.diagnostic(`${hunted.length} mutants in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  const missed = results.filter((r) => r.seed === null).map((r) => `${r.mutant.name} (${r.mutant.breaks})`);
  assert.deepEqual(missed, [], 'mutants the simulator did not catch: strengthen the workload or the oracle');
});
