// Mutual exclusion judged on etcd's own history, with no clock: the observer's record of every key's
// create and delete revision (observer.ts) against the revision at which each holder saw its turn.
// Pure: no I/O.
import type { Violation } from './checker/history.js';

/**
 * How a key incarnation went, as far as etcd's history can tell:
 * - `operator-delete` / `operator-revoke`: at the revision of the nemesis's own delete or revoke;
 * - `deleted`: a delete while its lease still lived (an unlock, a resign, a cleanup);
 * - `lease-ended`: with its lease (asked right after the delete: the lease was gone). A revoke and
 *   an expiry are the same in etcd's history (the leader's lessor expires a lease by proposing a
 *   revoke), so they are not told apart, and a holder that deletes its key and then revokes its
 *   lease at once may be counted here;
 * - `unknown`: the lease could not be asked about (an outage).
 */
export type KeyEnd = 'operator-delete' | 'operator-revoke' | 'deleted' | 'lease-ended' | 'unknown';

/** One incarnation of a key under a chaos prefix, from the observer's watch. */
export interface KeyLife {
  key: string;
  /** Its CreateRevision (a holder's fencing token). */
  create: bigint;
  /** Its lease, hex; '0' for none. */
  lease: string;
  /** The revision of the event that deleted it; undefined while it exists. */
  deleted?: bigint;
  how?: KeyEnd;
}

/**
 * A holder's proof of its turn, as close as a client can see it: the revision of a linearizable read
 * it made right after the grant, while its key was still there. The grant's own answer came at or
 * before that revision (the library does not expose it), so a key older than the holder's that still
 * existed at `rev` existed at the grant too.
 */
export interface GrantWitness {
  worker: string;
  /** The queue's prefix (`<name>/`). */
  queue: string;
  token: bigint;
  rev: bigint;
  /** RW lock holds: which lock. */
  mode?: 'read' | 'write';
  /**
   * The older keys the witness read itself returned (the read asks for CreateRevision below
   * `token`): the same evidence, that does not depend on the observer's watch having missed nothing.
   */
  seen?: { key: string; create: bigint; lease: string }[];
}

/** The rule a queue grants by. */
export type GrantRule = { kind: 'exclusive' } | { kind: 'permits'; permits: number } | { kind: 'rw' };

/** Whether `life` is a queue participant of `queue`: a leased key right under it (or under read/, write/). */
function participant(queue: string, rule: GrantRule, life: KeyLife): boolean {
  if (life.lease === '0' || !life.key.startsWith(queue)) return false;
  const rest = life.key.slice(queue.length);
  if (rule.kind === 'rw') return /^(read|write)\/[^/]+$/.test(rest);
  return !rest.includes('/');
}

/**
 * "No two holders", as a fact of etcd's history: at the revision of each holder's witness read, with
 * its own key still there, every older participant it had to wait for must already be deleted (an
 * exclusive lock or an election: every older one; a semaphore of N permits: all but N-1 of them; a
 * writer: every older reader and writer; a reader: every older writer). Older keys come from the
 * observer's record and from the witness read's own answer. A grant made while such a key
 * still existed is a violation, with no clock and no excuse: a frozen or cut-off holder does not
 * change what etcd held at that revision.
 */
export function checkGrantsByRevision(lives: KeyLife[], witnesses: GrantWitness[], rule: GrantRule, check: string): Violation[] {
  const violations: Violation[] = [];
  // A sweep over revisions per queue (runs hold tens of thousands of keys and grants): the keys
  // alive at each witness's revision are the few created and not yet deleted by then.
  const byQueue = new Map<string, GrantWitness[]>();
  for (const w of witnesses) byQueue.set(w.queue, [...(byQueue.get(w.queue) ?? []), w]);
  for (const [queue, ws] of byQueue) {
    const mine = lives.filter((l) => participant(queue, rule, l)).sort((a, b) => (a.create < b.create ? -1 : a.create > b.create ? 1 : 0));
    const ends = mine
      .filter((l) => l.deleted !== undefined)
      .sort((a, b) => (a.deleted! < b.deleted! ? -1 : a.deleted! > b.deleted! ? 1 : 0));
    const alive = new Set<KeyLife>();
    let ci = 0;
    let di = 0;
    for (const w of [...ws].sort((a, b) => (a.rev < b.rev ? -1 : a.rev > b.rev ? 1 : 0))) {
      while (ci < mine.length && mine[ci]!.create <= w.rev) alive.add(mine[ci++]!);
      while (di < ends.length && ends[di]!.deleted! <= w.rev) alive.delete(ends[di++]!);
      // Older than ours and still there at the witness's revision, which came after the grant: so it
      // was there at the grant too (created before our key, and deleted after the witness, if ever).
      const older = [...alive].filter((l) => l.create < w.token);
      for (const k of w.seen ?? []) {
        const life: KeyLife = { ...k };
        if (life.create < w.token && participant(w.queue, rule, life) && !older.some((o) => o.create === k.create)) older.push(life);
      }
      const blocking =
        rule.kind === 'rw' && w.mode === 'read' ? older.filter((l) => l.key.slice(w.queue.length).startsWith('write/')) : older;
      const allowed = rule.kind === 'permits' ? rule.permits - 1 : 0;
      if (blocking.length > allowed) {
        violations.push({
          check,
          detail:
            `${w.worker} (token ${w.token}${w.mode ? `, ${w.mode}` : ''}) held at revision ${w.rev} while ${blocking.length} older key(s) it waited for ` +
            `still existed: ${blocking.map((l) => `${l.key}@${l.create}${l.deleted !== undefined ? ` (deleted at ${l.deleted}, ${l.how ?? '?'})` : ' (never deleted)'}`).join(', ')}`,
        });
      }
    }
  }
  return violations;
}

/**
 * Whether etcd `version` (e.g. "3.4.23") has bug 15247 (a deposed Raft leader's stale lessor revoking
 * live leases): fixed in 3.4.28 and 3.5.11, never in 3.6 or later. Unknown versions do not have it.
 */
export function hasBug15247(version: string | undefined): boolean {
  const m = /(\d+)\.(\d+)\.(\d+)/.exec(version ?? '');
  if (!m) return false;
  const [maj, min, patch] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (maj !== 3) return maj < 3;
  if (min < 4) return true;
  if (min === 4) return patch < 28;
  if (min === 5) return patch < 11;
  return false;
}

/**
 * Holds lost to their key's deletion (`lostReason` `key_deleted`, as worker-loss.ts lossClock()
 * reports it) where etcd's history shows a plain delete while the key's lease lived, not the
 * operator's: in a correct build only a holder's own release deletes a live lease's key, and a
 * release is not a loss. So someone deleted a key that was not theirs to delete, such as a late
 * release of an older incarnation of the same key (a release that is not guarded on its
 * CreateRevision). `judged`: the holds lost to a deletion that the record shows.
 */
export function foreignDeletes(
  holds: { worker: string; token: bigint; lost: boolean; lostReason?: string }[],
  lives: KeyLife[],
  check: string,
): { violations: Violation[]; judged: number } {
  const violations: Violation[] = [];
  let judged = 0;
  for (const h of holds) {
    if (!h.lost || h.lostReason !== 'key_deleted') continue;
    const life = lives.find((l) => l.create === h.token);
    if (life?.deleted === undefined) continue;
    judged++;
    if (life.how !== 'deleted') continue;
    violations.push({
      check,
      detail: `${h.worker} (token ${h.token}) lost ${life.key}: deleted at revision ${life.deleted} while its lease lived, by neither its holder's release nor the operator`,
    });
  }
  return { violations, judged };
}
