// Everything that fails a run.
import type { Violation } from './history.js';
import { type RecordExtent, incompleteRecord } from './record.js';

export interface PhaseVerdictInput {
  name: string;
  violations: Violation[];
  unexpectedErrors: string[];
  stuckWaits: string[];
  problems: string[];
  cleanupOk: boolean;
  /** How far the observer's record of etcd's history goes. */
  record: RecordExtent;
  /** How many things each check judged in this phase (holds, grants, writes, ...), by check. */
  judged: Record<string, number>;
}

/**
 * Everything that fails a run: safety violations of any kind (fenced, etcd counter, election,
 * unexplained overlaps, early lease expiry, refused careful writes), unexpected errors, lock waits
 * past the stall bound, the harness's own problems (a fault that could not be injected or healed, a
 * cluster that did not recover), incomplete cleanup, a phase whose record of etcd's history ends
 * early, and a check that judged nothing in the whole run (it would pass whatever the build did).
 */
export function verdict(phases: PhaseVerdictInput[], fatal?: string): string[] {
  const failures: string[] = [];
  if (fatal) failures.push(`harness error: ${fatal.split('\n')[0]}`);
  if (phases.length === 0) failures.push('no phase completed');
  const judged = new Map<string, number>();
  for (const p of phases) {
    const incomplete = incompleteRecord(p.name, p.record);
    if (incomplete) failures.push(incomplete);
    const byCheck = new Map<string, number>();
    for (const v of p.violations) byCheck.set(v.check, (byCheck.get(v.check) ?? 0) + 1);
    for (const [check, n] of byCheck) failures.push(`${p.name}: ${n} ${check} violation(s)`);
    if (p.unexpectedErrors.length > 0) failures.push(`${p.name}: ${p.unexpectedErrors.length} unexpected error(s)`);
    if (p.stuckWaits.length > 0) failures.push(`${p.name}: ${p.stuckWaits.length} stuck lock wait(s)`);
    if (p.problems.length > 0) failures.push(`${p.name}: ${p.problems.length} harness problem(s): ${p.problems[0]}`);
    if (!p.cleanupOk) failures.push(`${p.name}: cleanup failed`);
    for (const [check, n] of Object.entries(p.judged)) judged.set(check, (judged.get(check) ?? 0) + n);
  }
  const vacuous = [...judged].filter(([, n]) => n === 0).map(([check]) => check);
  if (vacuous.length > 0) failures.push(`judged nothing in the whole run: ${vacuous.join(', ')}`);
  return failures;
}
