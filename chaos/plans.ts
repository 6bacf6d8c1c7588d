// What a chaos run is made of: workers per role, the phases and each phase's fault weights.
import type { Role } from './common.js';
import type { FaultKind } from './nemesis.js';

/** Workers per role: a quick run's, or a full run's. */
export function workerCountsFor(quick: boolean): Record<Role, number> {
  return quick
    ? { fenced: 3, unfenced: 2, election: 2, semaphore: 4, rwlock: 3, barrier: 3, dbarrier: 2, multilock: 2 }
    : { fenced: 3, unfenced: 3, election: 3, semaphore: 5, rwlock: 4, barrier: 3, dbarrier: 3, multilock: 3 };
}
/** The share of rwlock cycles that take the write lock; the rest read. */
export const RW_WRITE_SHARE = 0.35;

export interface PhasePlan {
  name: 'loopback' | 'netns';
  chaosMs: number;
  weights: Partial<Record<FaultKind, number>>;
}

export const LOOPBACK_WEIGHTS: Partial<Record<FaultKind, number>> = {
  'member-kill': 3,
  'member-pause': 3,
  'worker-pause': 3,
  'ghost-pause': 3,
  'worker-crash': 2,
  'proxy-cut': 2,
  'proxy-delay': 2,
  'proxy-blackhole': 3,
  'proxy-blackhole-member': 2,
  'key-delete': 2,
  'lease-revoke': 2,
  'stale-write': 2,
};
/**
 * What a quick loopback phase must see, first (the nemesis's mustHappen): a Raft leader paused past
 * the TTL, a holder frozen inside its critical section, a stale fenced holder's writes reaching every
 * fence (the run fails when they were judged nowhere: checker/verdict.ts), and an operator taking a
 * holder's key away both ways (the key deleted twice: a fenced holder whose worker takes the lock
 * again meanwhile, and a leader; nemesis.ts OPERATOR_VICTIMS). test/chaos.test.ts fails a CI run in
 * which one of the others did not happen.
 */
export const QUICK_MUST_HAPPEN: FaultKind[] = ['member-pause', 'ghost-pause', 'stale-write', 'key-delete', 'lease-revoke', 'key-delete'];
export const NETNS_WEIGHTS: Partial<Record<FaultKind, number>> = {
  partition: 6,
  'member-kill': 1,
  'member-pause': 1,
  'worker-pause': 1,
  'ghost-pause': 1,
  'worker-crash': 1,
  'proxy-cut': 1,
  'key-delete': 1,
  'stale-write': 1,
};
/** The phases: loopback 65% and netns 35% of the fault time where namespaces work, else loopback alone. */
export function phasePlans(chaosSeconds: number, netnsOk: boolean): PhasePlan[] {
  return netnsOk
    ? [
        { name: 'loopback', chaosMs: chaosSeconds * 650, weights: LOOPBACK_WEIGHTS },
        { name: 'netns', chaosMs: chaosSeconds * 350, weights: NETNS_WEIGHTS },
      ]
    : [{ name: 'loopback', chaosMs: chaosSeconds * 1000, weights: LOOPBACK_WEIGHTS }];
}
