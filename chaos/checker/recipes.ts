// The recipes' invariants on etcd's revisions: nobody passes a Barrier before its key is deleted, a
// DoubleBarrier's enter returns only once `count` members are in and its leave only once they all
// left, lockAll holds all of its locks or none. Each worker reads etcd right after the call returns
// (a witness); the observer's record of every key (revisions.ts KeyLife) says what existed then.
import { checkGrantsByRevision, type GrantWitness, type KeyLife } from '../revisions.js';
import type { Violation } from './history.js';

/** A Barrier waiter that saw the barrier held by the key created at `held`, waited, and passed. */
export interface BarrierPass {
  worker: string;
  /** The CreateRevision of the barrier key it saw before waiting. */
  held: bigint;
  /** The revision of a read made right after its wait() resolved. */
  rev: bigint;
}

/** A DoubleBarrier member whose enter() resolved. */
export interface DoubleBarrierEnter {
  worker: string;
  /** Its waiter key's CreateRevision. */
  own: bigint;
  /** The ModRevision of `<name>/ready` read right after enter() resolved: the put that opened its round. */
  ready: bigint;
  /** The revision of that read. */
  rev: bigint;
}

/** A DoubleBarrier member whose leave() resolved. */
export interface DoubleBarrierLeave {
  worker: string;
  /** The `ready` revision of its enter (its round: the waiter keys created before it). */
  ready: bigint;
  /** The revision of a read made right after leave() resolved. */
  rev: bigint;
}

/** A lockAll() that resolved: one token per lock, and a read of every lock's queue right after. */
export interface MultiLockGrant {
  worker: string;
  /** The lock names asked for. */
  names: string[];
  /** The fencing token of each lock the handle says it holds, by name. */
  tokens: Record<string, bigint>;
  rev: bigint;
  /** Every key of those queues at `rev`. */
  seen: { key: string; create: bigint; lease: string }[];
}

/** A lockAll() that rejected: keys of the caller's lease still under the lock names once its release had time to finish. */
export interface MultiLockFailure {
  worker: string;
  leftover: string[];
}

/** Whether the key incarnation `life` existed at revision `rev`. */
function aliveAt(life: KeyLife, rev: bigint): boolean {
  return life.create <= rev && (life.deleted === undefined || life.deleted > rev);
}

/**
 * Nobody passes a barrier before its release: the barrier key a waiter saw before waiting must be
 * deleted at the revision of the read it made after passing. A pass whose key the observer never
 * saw is not judged (counted as `unjudged`).
 */
export function checkBarrierPasses(
  passes: BarrierPass[],
  lives: KeyLife[],
  check = 'barrier-passed-before-release',
): { violations: Violation[]; unjudged: number } {
  const byCreate = new Map(lives.map((l) => [l.create, l]));
  const violations: Violation[] = [];
  let unjudged = 0;
  for (const p of passes) {
    const life = byCreate.get(p.held);
    if (!life) {
      unjudged++;
      continue;
    }
    if (aliveAt(life, p.rev)) {
      violations.push({
        check,
        detail: `${p.worker} passed barrier ${life.key} while its key (created at ${p.held}) still existed at revision ${p.rev}`,
      });
    }
  }
  return { violations, unjudged };
}

/**
 * A DoubleBarrier: enter() returns only when `count` members arrived, leave() only when all of the
 * round left. For an enter: at the `ready` put that let it in, at least `count` waiter keys (its own
 * among them) existed. For a leave: at its read after leave() resolved, no waiter key created before
 * its round's `ready` put exists any more (its round, and any member of the round before still
 * leaving, which the library counts too). An enter whose own key was already gone at its read (its
 * lease lost meanwhile) is not judged.
 */
export function checkDoubleBarrier(
  enters: DoubleBarrierEnter[],
  leaves: DoubleBarrierLeave[],
  lives: KeyLife[],
  waiters: string,
  count: number,
): { violations: Violation[]; unjudged: number } {
  const members = lives.filter((l) => l.key.startsWith(waiters));
  const violations: Violation[] = [];
  let unjudged = 0;
  for (const e of enters) {
    const own = members.find((l) => l.create === e.own);
    if (!own || !aliveAt(own, e.rev)) {
      unjudged++;
      continue;
    }
    const inAtReady = members.filter((l) => l.create < e.ready && aliveAt(l, e.ready));
    if (e.own >= e.ready || inAtReady.length < count) {
      violations.push({
        check: 'dbarrier-entered-early',
        detail: `${e.worker} (key ${e.own}) entered at the ready put of revision ${e.ready} with ${inAtReady.length} of ${count} members in${e.own >= e.ready ? ', its own key not among them' : ''}`,
      });
    }
  }
  for (const l of leaves) {
    const left = members.filter((m) => m.create < l.ready && aliveAt(m, l.rev));
    if (left.length > 0) {
      violations.push({
        check: 'dbarrier-left-early',
        detail: `${l.worker} left the round opened at revision ${l.ready} while ${left.length} member(s) of it remained at revision ${l.rev}: ${left.map((m) => `${m.key}@${m.create}`).join(', ')}`,
      });
    }
  }
  return { violations, unjudged };
}

/**
 * lockAll holds all or none. A grant must hold every lock it asked for (a token per name), each
 * granted by the rule of an exclusive lock (checkGrantsByRevision: no older key of that lock's queue
 * at its read; a lock's queue is `<name>/`); a failure must leave none of its keys behind once its
 * release had time to finish.
 */
export function checkMultiLock(grants: MultiLockGrant[], failures: MultiLockFailure[], lives: KeyLife[]): Violation[] {
  const violations: Violation[] = [];
  const witnesses: GrantWitness[] = [];
  for (const g of grants) {
    const missing = g.names.filter((n) => g.tokens[n] === undefined);
    if (missing.length > 0)
      violations.push({ check: 'multilock-partial-hold', detail: `${g.worker}: lockAll resolved without ${missing.join(', ')}` });
    for (const [name, token] of Object.entries(g.tokens)) {
      const queue = `${name}/`;
      witnesses.push({
        worker: g.worker,
        queue,
        token,
        rev: g.rev,
        seen: g.seen.filter((k) => k.key.startsWith(queue) && k.create < token),
      });
    }
  }
  violations.push(...checkGrantsByRevision(lives, witnesses, { kind: 'exclusive' }, 'multilock-grant-by-revision'));
  for (const f of failures) {
    if (f.leftover.length > 0)
      violations.push({ check: 'multilock-partial-hold', detail: `${f.worker}: a failed lockAll left ${f.leftover.join(', ')} behind` });
  }
  return violations;
}
