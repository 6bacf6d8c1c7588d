// The oracle: what must hold in every run, checked exactly on virtual time. Beliefs run from the
// instant lock() (or its kin) resolves to the instant its signal aborts or the caller releases.
//
// Rules (docs/simulation.md has them in prose):
// - A grant happens only while the key stands: it exists on our lease with our token as its
//   CreateRevision and no older key on a lease is under the prefix (exclusive kinds) at the grant's
//   instant (a key on no lease is stray data, which participants skip). Excused: a fault (an
//   operator's edit, a revoke) took the key between the request that proved the turn and the
//   grant; that holder is then lost from birth and must learn it as below.
// - Two handles of different keys never believe at once for one exclusive name. Excused: the older
//   belief's key was removed or edited by a fault (it must then learn within LEARN_MS); the older
//   holder's process is paused (excused only if its assertHeld() throws at the instant it wakes).
// - Tokens strictly increase per name in grant order (a shared key repeats its token).
// - A lease never expires on the server while a running (not paused) holder believes on it.
// - Liveness: once faults stop, every call settles within a bound; at the end no key, lease or
//   timer is left.
import type { Change } from './store.js';
import type { Proc } from './time.js';

export interface Violation {
  readonly rule: string;
  readonly at: number;
  readonly detail: string;
}

export interface Belief {
  readonly id: number;
  readonly kind: string;
  readonly name: string;
  readonly key: string;
  readonly token: bigint;
  readonly lease: bigint;
  readonly proc: Proc;
  readonly from: number;
  to?: number;
  /** When and how a fault removed or edited its key. */
  lost?: { at: number; cause: string };
  /** An RWMutex holding's mode. */
  readonly mode?: 'read' | 'write';
  /** Checks the handle now (its assertHeld), throwing when it knows it is lost. */
  readonly assertHeld: () => void;
}

/** How long a holder may go on believing after a fault took its key (it learns by watch or renewal). */
const LEARN_MS = 15_000;

export class Oracle {
  readonly violations: Violation[] = [];
  private readonly open = new Set<Belief>();
  private readonly maxToken = new Map<string, { token: bigint; key: string }>();
  /** Overlaps with a paused holder, judged when it wakes. */
  private readonly pending: { older: Belief; newer: Belief }[] = [];
  private nextId = 0;
  /** Each key's last change (time and cause). */
  private readonly lastChange = new Map<string, { at: number; cause: string; type: string }>();
  grants = 0;
  /** The last grant (for checks made right after it). */
  last: Belief | undefined;

  constructor(
    private readonly now: () => number,
    private readonly store: { get(k: string): { lease: bigint; createRevision: bigint } | undefined; keys(): readonly string[] },
    private readonly trace: (line: string) => void,
  ) {}

  private fail(rule: string, detail: string): void {
    const v = { rule, at: this.now(), detail };
    this.violations.push(v);
    this.trace(`VIOLATION ${rule}: ${detail}`);
  }

  /** A store change: beliefs whose key it removes or edits are marked (and judged). */
  changed(c: Change): void {
    this.lastChange.set(c.k, { at: this.now(), cause: c.cause, type: c.type });
    for (const b of this.open) {
      if (b.key !== c.k || b.lost) continue;
      const stands = c.type === 'put' && c.kv!.lease === b.lease && c.kv!.createRevision === b.token;
      if (stands) continue;
      b.lost = { at: this.now(), cause: c.cause };
      if (c.cause === 'expiry' && !b.proc.paused && !b.proc.crashed) {
        this.fail('lease-expired-under-holder', `${b.kind} ${b.name}: lease ${b.lease.toString(16)} expired at the server while ${b.proc.name} still believed it held ${b.key}`);
      }
    }
  }

  /** `proc` woke: each of its beliefs whose key is gone must know it (assertHeld throws). */
  woke(proc: Proc): void {
    for (const b of this.open) {
      if (b.proc !== proc) continue;
      let threw = false;
      try {
        b.assertHeld();
      } catch {
        threw = true;
      }
      (b as { woke?: boolean }).woke = true;
      for (const p of this.pending.filter((x) => x.older === b)) {
        this.pending.splice(this.pending.indexOf(p), 1);
        if (!threw) {
          this.fail(
            'two-holders',
            `${b.kind} ${b.name}: ${b.proc.name} woke still holding ${b.key} (assertHeld passed) while ${p.newer.proc.name} held ${p.newer.key} since ${p.newer.from}`,
          );
        }
      }
    }
  }

  /**
   * A grant, judged by `rule`: 'exclusive' (a lock, a leader: one key at a time), 'read'/'write'
   * (an RWMutex: a writer excludes every other session), or a number of permits.
   */
  granted(g: Omit<Belief, 'id' | 'from'>, rule: Rule): Belief {
    const b: Belief = { ...g, id: this.nextId++, from: this.now() };
    this.grants++;
    const kv = this.store.get(b.key);
    const last = this.lastChange.get(b.key);
    const standing = kv !== undefined && kv.lease === b.lease && kv.createRevision === b.token;
    if (!standing && last !== undefined && isFault(last.cause)) {
      // A fault took the key after the request that proved our turn: the grant is lost at birth,
      // and the holder must learn it like any other holder whose key a fault took.
      b.lost = { at: last.at, cause: last.cause };
      this.open.add(b);
      this.trace(`grant ${b.kind} ${b.name} ${b.key} token ${b.token} to ${b.proc.name} (its key already taken by ${last.cause})`);
      return b;
    }
    if (!standing) {
      this.fail(
        'grant-without-key',
        `${b.kind} ${b.name}: ${b.proc.name} was granted ${b.key} (token ${b.token}) but the store has ${kv ? `lease ${kv.lease.toString(16)} rev ${kv.createRevision}` : 'no such key'}`,
      );
    }
    // Older keys on a lease under the prefix that should have kept us waiting (a key on no lease is
    // stray data, which participants skip).
    const prefix = `${b.name}/`;
    let older = 0;
    let blocker: string | undefined;
    for (const k of this.store.keys()) {
      if (!k.startsWith(prefix) || k === b.key) continue;
      const other = this.store.get(k)!;
      if (other.lease === 0n || other.createRevision >= b.token) continue;
      if (rule === 'read' && (other.lease === b.lease || !k.startsWith(`${prefix}write/`))) continue;
      if (rule === 'write' && other.lease === b.lease) continue;
      older++;
      blocker ??= k;
    }
    const room = typeof rule === 'number' ? rule : 1;
    if (older >= room) {
      this.fail('grant-behind-older-key', `${b.kind} ${b.name}: ${b.proc.name} was granted ${b.key} (token ${b.token}) while ${blocker} is older`);
    }
    if (rule === 'exclusive' || rule === 'write') {
      const max = this.maxToken.get(`${b.kind} ${b.name}`);
      if (max && b.token < max.token) this.fail('token-order', `${b.kind} ${b.name}: token ${b.token} granted after token ${max.token}`);
      if (!max || b.token > max.token) this.maxToken.set(`${b.kind} ${b.name}`, { token: b.token, key: b.key });
    }
    const rivals: Belief[] = [];
    for (const o of this.open) {
      if (o.name !== b.name || o.kind !== b.kind || o.key === b.key) continue;
      if (rule === 'read' || rule === 'write') {
        if (o.lease === b.lease || (rule === 'read' && o.mode !== 'write')) continue;
      }
      if (o.lost && isFault(o.lost.cause)) continue;
      rivals.push(o);
    }
    const keys = new Set(rivals.map((o) => o.key));
    if (keys.size >= room) {
      for (const o of rivals) {
        if (o.proc.paused && !o.proc.crashed) {
          this.pending.push({ older: o, newer: b });
          continue;
        }
        this.fail(
          typeof rule === 'number' ? 'too-many-permits' : 'two-holders',
          `${b.kind} ${b.name}: ${b.proc.name} got ${b.key} (token ${b.token}) while ${o.proc.name} holds ${o.key} (token ${o.token}) since ${o.from}${typeof rule === 'number' ? ` (${keys.size} of ${rule} permits held)` : ''}`,
        );
        break;
      }
    }
    this.open.add(b);
    this.last = b;
    this.trace(`grant ${b.kind}${b.mode ? ` ${b.mode}` : ''} ${b.name} ${b.key} token ${b.token} to ${b.proc.name}`);
    return b;
  }

  /** A read asked for at this instant: the writers of other sessions queued now must be served first (issue 35's rule). */
  writersQueued(name: string, lease: bigint): Map<string, bigint> {
    const out = new Map<string, bigint>();
    const prefix = `${name}/write/`;
    for (const k of this.store.keys()) {
      if (!k.startsWith(prefix)) continue;
      const kv = this.store.get(k)!;
      if (kv.lease !== 0n && kv.lease !== lease) out.set(k, kv.createRevision);
    }
    return out;
  }

  /** A read was granted: none of the writers queued when it was asked for may still be waiting. */
  readGranted(b: Belief, queued: Map<string, bigint>): void {
    if (b.lost) return;
    for (const [k, rev] of queued) {
      const kv = this.store.get(k);
      if (kv && kv.createRevision === rev && kv.lease !== 0n) {
        this.fail('reader-overtook-writer', `${b.kind} ${b.name}: ${b.proc.name} got a read lock (${b.key}) asked for after ${k} queued, which still waits`);
        return;
      }
    }
  }

  /** An observer saw `key` (token `token`) lead at `revision`: it must have been the oldest participant then. */
  observed(name: string, key: string, token: bigint, revision: bigint, leaders: (rev: bigint) => { key: string; token: bigint } | null | 'compacted'): void {
    const l = leaders(revision);
    if (l === 'compacted') return;
    if (!l || l.key !== key || l.token !== token) {
      this.fail('observe-named-non-leader', `observe ${name}: named ${key} (term ${token}) at revision ${revision}, when the leader was ${l ? `${l.key} (term ${l.token})` : 'nobody'}`);
    }
  }

  /** `<name>/ready` was put: the barrier opened, which needs `count` members on leases then. */
  barrierOpened(name: string, count: number, members: number): void {
    if (members < count) this.fail('barrier-opened-early', `double barrier ${name}: ready put with ${members} of ${count} members present`);
  }

  /** The holder stopped believing (its signal aborted, or it released). */
  ended(b: Belief): void {
    if (b.to !== undefined) return;
    b.to = this.now();
    this.open.delete(b);
    this.trace(`end ${b.kind} ${b.name} ${b.key} of ${b.proc.name}`);
  }

  /** A process crashed: its beliefs end with it. */
  crashed(proc: Proc): void {
    for (const b of [...this.open]) if (b.proc === proc) this.ended(b);
    for (const p of [...this.pending]) if (p.older.proc === proc) this.pending.splice(this.pending.indexOf(p), 1);
  }

  /** Holders that kept believing long after a fault took their key. */
  checkLearned(): void {
    const now = this.now();
    for (const b of this.open) {
      if (b.lost && !b.proc.paused && now - b.lost.at > LEARN_MS) {
        this.fail('holder-never-learned', `${b.kind} ${b.name}: ${b.proc.name} still believes it holds ${b.key}, removed at ${b.lost.at} (${b.lost.cause})`);
        b.lost = { at: Number.POSITIVE_INFINITY, cause: b.lost.cause }; // once
      }
    }
  }

  /** Whether `k` was last written by a client (not by a fault: an operator's stray key is theirs to clean). */
  ownedByClients(k: string): boolean {
    const last = this.lastChange.get(k);
    return last === undefined || !isFault(last.cause);
  }

  get believing(): number {
    return this.open.size;
  }
}

/** How a grant is judged: one key at a time, an RWMutex's read or write, or a number of permits. */
export type Rule = 'exclusive' | 'read' | 'write' | number;

export function isFault(cause: string): boolean {
  return cause.startsWith('fault');
}
