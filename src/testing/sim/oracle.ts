// The oracle: what must hold in every run, checked exactly on virtual time. Beliefs run from the
// instant lock() (or its kin) resolves to the instant its signal aborts or the caller releases.
//
// Rules (docs/simulation.md has them in prose):
// - A grant happens only while the key stands: it exists on our lease with our token as its
//   CreateRevision and no older key on a lease is under the prefix (exclusive kinds) at the grant's
//   instant (a key on no lease is stray data, which participants skip). The answer that proved it
//   is the last one its process received (the library resolves in the same turn): the key must
//   have stood at that answer's revision. Excused: a fault (an operator's edit, a revoke) took the
//   key after that revision; that holder is then lost from birth and must learn it as below. A
//   grant on what the process already held (a downgrade, lockAll's locks) has no such answer: the
//   fault is then excused when it came after the call was made.
// - A holder learns that a fault took its key within HEARD_MS of its process receiving the watch
//   event that says so (unless it was paused meanwhile), and within LEARN_MS in any case.
// - A client never puts a key that is on no lease (stray: an operator's plain put) back on a lease.
// - Two handles of different keys never believe at once for one exclusive name. Excused: the older
//   belief's key was removed or edited by a fault (it must then learn within LEARN_MS); the older
//   holder's process is paused (excused only if its assertHeld() throws at the instant it wakes).
// - Tokens strictly increase per name in grant order (a shared key repeats its token); a call that
//   does not share never gets an incarnation granted before (a new holding, a new key).
// - A holding ends as lost (its key deleted, or moved off its lease) only when it is.
// - A lease never expires on the server while a running (not paused) holder believes on it.
// - Liveness: once faults stop, every call settles within a bound; at the end no key, lease or
//   timer is left.
import { heardEvent, lastHeard } from './heard.js';
import { type Change, keysUnder } from './store.js';
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
  /** When, how and at which revision a fault removed or edited its key. */
  lost?: { at: number; cause: string; rev?: bigint };
  /** When the call that led to this grant was made (a fault before it is no excuse: the call could see it). */
  readonly asked: number;
  /** An RWMutex holding's mode. */
  readonly mode?: 'read' | 'write';
  /** Granted on what its process already held (a downgrade, lockAll's locks): no answer proved it just now. */
  readonly onHolding?: boolean;
  /** Asked for with `share` (a read lock by default): it may join a key another call of its process uses. */
  readonly shared?: boolean;
  /** Checks the handle now (its assertHeld), throwing when it knows it is lost. */
  readonly assertHeld: () => void;
}

/** How long a holder may go on believing after a fault took its key (it learns by watch or renewal). */
const LEARN_MS = 15_000;
/** How long after its process received the event that took its key a holder may go on believing. */
const HEARD_MS = 2000;

export class Oracle {
  readonly violations: Violation[] = [];
  private readonly open = new Set<Belief>();
  private readonly maxToken = new Map<string, { token: bigint; key: string }>();
  /**
   * Overlaps with a paused holder, judged when it wakes: `room` places for `newer`'s name, `taken` of
   * them by running rivals at its grant. A paused rival still holding when it wakes is `held`.
   */
  private readonly pending: { older: Belief; newer: Belief; rule: string; room: number; taken: number; held?: boolean }[] = [];
  private nextId = 0;
  /** Each key's last change (time, cause and revision). */
  private readonly lastChange = new Map<string, { at: number; cause: string; type: string; rev: bigint }>();
  /** Each key's changes, oldest first: its lease and CreateRevision from each revision on (none: deleted). */
  private readonly history = new Map<string, Entry[]>();
  /** The incarnations granted so far: `<key> <token>`. */
  private readonly incarnations = new Set<string>();
  /** The processes that crashed, by name: when. */
  private readonly crashedAt = new Map<string, number>();
  /** The leases of the sessions that were lost (ended by their client for want of renewals, or found gone). */
  private readonly lostLeases = new Set<bigint>();
  /** When each process last woke from a pause. */
  private readonly wokeAt = new Map<Proc, number>();
  grants = 0;
  /** Writes the fenced store refused (a stale holder's): the fence doing its job. */
  staleWrites = 0;
  private readonly fence = new Map<string, bigint>();
  private readonly lastAccepted = new Map<string, bigint>();
  /** Each DoubleBarrier's round, from its last `ready` put: the revision of that put, and the waiter keys it counted. */
  private readonly rounds = new Map<string, { name: string; ready: bigint; members: readonly string[] }>();
  /** How each DoubleBarrier call ended: entered, left, or gave up (enter() or leave() rejected). */
  private readonly barrierCalls: BarrierCall[] = [];
  /**
   * When a fault may have kept a process (every process: `proc` undefined) from etcd: cut off from
   * the member it talks to (a partition, that member down, its connection reset), an answer lost,
   * paused, no leader.
   */
  private readonly cuts: { proc?: string; from: number; to: number }[] = [];
  /** Since when the cluster has had no leader (undefined: it has one). */
  private leaderlessSince: number | undefined;
  /** The last grant (for checks made right after it). */
  last: Belief | undefined;

  constructor(
    private readonly now: () => number,
    private readonly store: {
      get(k: string): { lease: bigint; createRevision: bigint } | undefined;
      /** In byte order. */
      keys(): readonly string[];
    },
    private readonly trace: (line: string) => void,
  ) {}

  private fail(rule: string, detail: string): void {
    const v = { rule, at: this.now(), detail };
    this.violations.push(v);
    this.trace(`VIOLATION ${rule}: ${detail}`);
  }

  /** A store change: beliefs whose key it removes or edits are marked (and judged). */
  changed(c: Change): void {
    this.lastChange.set(c.k, { at: this.now(), cause: c.cause, type: c.type, rev: c.rev });
    const h = this.history.get(c.k) ?? [];
    const when = { rev: c.rev, at: this.now(), cause: c.cause };
    h.push(c.type === 'put' ? { ...when, lease: c.kv!.lease, createRevision: c.kv!.createRevision } : when);
    this.history.set(c.k, h);
    const p = c.prev;
    if (c.type === 'put' && p && p.lease === 0n && c.kv!.lease !== 0n && c.kv!.createRevision === p.createRevision && !isFault(c.cause)) {
      this.fail(
        'stray-key-revived',
        `${c.k}: put back on lease ${c.kv!.lease.toString(16)} by ${c.cause}, after it was moved off every lease`,
      );
    }
    for (const b of this.open) {
      if (b.key !== c.k || b.lost) continue;
      const stands = c.type === 'put' && c.kv!.lease === b.lease && c.kv!.createRevision === b.token;
      if (stands) continue;
      b.lost = { at: this.now(), cause: c.cause, rev: c.rev };
      if (c.cause === 'expiry' && !b.proc.paused && !b.proc.crashed) {
        this.fail(
          'lease-expired-under-holder',
          `${b.kind} ${b.name}: lease ${b.lease.toString(16)} expired at the server while ${b.proc.name} still believed it held ${b.key}`,
        );
      }
    }
  }

  /** `proc` woke: each of its beliefs whose key is gone must know it (assertHeld throws). */
  woke(proc: Proc): void {
    this.wokeAt.set(proc, this.now());
    // Every belief of the process is asked first: a paused process may hold several of one name's
    // permits, and only those it still holds count against the grant made while it slept.
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
        if (threw) this.pending.splice(this.pending.indexOf(p), 1);
        else p.held = true;
      }
    }
    for (const p of this.pending.filter((x) => x.older.proc === proc && x.held)) {
      // Too many when the running rivals at the grant and the paused ones not known to have let go
      // (held at waking, or still asleep) fill every place.
      const others = this.pending.filter((x) => x.newer === p.newer);
      if (p.taken + new Set(others.map((x) => x.older.key)).size >= p.room) {
        const b = p.older;
        this.fail(
          p.rule,
          `${b.kind} ${b.name}: ${b.proc.name} woke still holding ${b.key} (assertHeld passed) while ${p.newer.proc.name} held ${p.newer.key} since ${p.newer.from}`,
        );
      }
    }
    for (const p of this.pending.filter((x) => x.older.proc === proc && x.held)) this.pending.splice(this.pending.indexOf(p), 1);
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
    const incarnation = `${b.key} ${b.token}`;
    if (!b.shared && this.incarnations.has(incarnation)) {
      this.fail(
        'token-reused',
        `${b.kind} ${b.name}: ${b.proc.name} was granted ${b.key} with token ${b.token}, an incarnation granted before, on a call that does not share`,
      );
    }
    this.incarnations.add(incarnation);
    // The revision of the answer that proved the grant: the last one its process received.
    const proof = b.onHolding ? undefined : lastHeard(b.proc);
    // What ended our incarnation after the answer that proved our turn (granted on a holding: the
    // key's last change, after the call). A change after that one (the key made again) is no excuse.
    const taken = standing ? undefined : proof !== undefined ? this.endedAfter(b.key, proof, b.lease, b.token) : last;
    if (proof !== undefined && !this.stoodAt(b.key, proof, b.lease, b.token)) {
      this.fail(
        'grant-without-key',
        `${b.kind} ${b.name}: ${b.proc.name} was granted ${b.key} (token ${b.token}) on an answer of revision ${proof}, when the store had ${this.describeAt(b.key, proof)}`,
      );
    } else if (taken !== undefined && isFault(taken.cause) && (proof !== undefined || taken.at >= b.asked)) {
      // A fault took the key after the answer that proved our turn (or, granted on a holding, after
      // the call): the grant is lost at birth, and the holder must learn it like any other holder
      // whose key a fault took.
      b.lost = { at: taken.at, cause: taken.cause, rev: taken.rev };
      this.open.add(b);
      this.trace(`grant ${b.kind} ${b.name} ${b.key} token ${b.token} to ${b.proc.name} (its key already taken by ${taken.cause})`);
      return b;
    } else if (!standing) {
      this.fail(
        'grant-without-key',
        `${b.kind} ${b.name}: ${b.proc.name} was granted ${b.key} (token ${b.token}) but the store has ${kv ? `lease ${kv.lease.toString(16)} rev ${kv.createRevision}` : 'no such key'}`,
      );
    }
    // Older participants on a lease under the prefix that should have kept us waiting (a key on no
    // lease is stray data, and a key of a nested name no participant: both are skipped).
    const prefix = `${b.name}/`;
    const rw = rule === 'read' || rule === 'write';
    let older = 0;
    let blocker: string | undefined;
    for (const k of keysUnder(this.store.keys(), prefix)) {
      if (k === b.key || !PARTICIPANT[rw ? 'rw' : 'one'].test(k.slice(prefix.length))) continue;
      const other = this.store.get(k)!;
      if (other.lease === 0n || other.createRevision >= b.token) continue;
      if (rule === 'read' && (other.lease === b.lease || !k.startsWith(`${prefix}write/`))) continue;
      if (rule === 'write' && other.lease === b.lease) continue;
      older++;
      blocker ??= k;
    }
    const room = typeof rule === 'number' ? rule : 1;
    if (older >= room) {
      this.fail(
        'grant-behind-older-key',
        `${b.kind} ${b.name}: ${b.proc.name} was granted ${b.key} (token ${b.token}) while ${blocker} is older`,
      );
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
    // Too many: judged now on the running rivals alone; a paused one is judged when it wakes (its
    // assertHeld must throw then), and only if the running ones leave no room for it.
    const over = typeof rule === 'number' ? 'too-many-permits' : 'two-holders';
    const keys = new Set(rivals.map((o) => o.key));
    const running = rivals.filter((o) => !o.proc.paused || o.proc.crashed);
    const runningKeys = new Set(running.map((o) => o.key));
    if (runningKeys.size >= room) {
      const o = running[0]!;
      this.fail(
        over,
        `${b.kind} ${b.name}: ${b.proc.name} got ${b.key} (token ${b.token}) while ${o.proc.name} holds ${o.key} (token ${o.token}) since ${o.from}${typeof rule === 'number' ? ` (${runningKeys.size} of ${rule} permits held)` : ''}`,
      );
    } else if (keys.size >= room) {
      const taken = runningKeys.size;
      for (const o of rivals) if (!running.includes(o)) this.pending.push({ older: o, newer: b, rule: over, room, taken });
    }
    this.open.add(b);
    this.last = b;
    this.trace(`grant ${b.kind}${b.mode ? ` ${b.mode}` : ''} ${b.name} ${b.key} token ${b.token} to ${b.proc.name}`);
    return b;
  }

  /**
   * A holder writes to the resource `resource` with `token`, through a fenced store that applies
   * PostgresFence's rule (a token below the highest one written is refused). The store must never
   * accept an older token after a newer one.
   */
  fencedWrite(resource: string, token: bigint): void {
    const top = this.fence.get(resource) ?? 0n;
    if (token < top) {
      this.staleWrites++;
      return;
    }
    const last = this.lastAccepted.get(resource) ?? 0n;
    if (token < last) this.fail('fence-accepted-older-token', `${resource}: accepted token ${token} after ${last}`);
    this.fence.set(resource, token);
    this.lastAccepted.set(resource, token);
  }

  /** A read asked for at this instant: the writers of other sessions queued now must be served first (issue 35's rule). */
  writersQueued(name: string, lease: bigint): Map<string, bigint> {
    const out = new Map<string, bigint>();
    const prefix = `${name}/write/`;
    for (const k of keysUnder(this.store.keys(), prefix)) {
      const kv = this.store.get(k)!;
      if (kv.lease !== 0n && kv.lease !== lease) out.set(k, kv.createRevision);
    }
    return out;
  }

  /** A read was granted: none of the writers queued when it was asked for may still be waiting. */
  readGranted(b: Belief, queued: Map<string, bigint>): void {
    // A downgrade (a read while this session holds the write lock, on the write key) holds at once.
    if (b.lost || b.key.startsWith(`${b.name}/write/`)) return;
    for (const [k, rev] of queued) {
      const kv = this.store.get(k);
      if (kv && kv.createRevision === rev && kv.lease !== 0n) {
        this.fail(
          'reader-overtook-writer',
          `${b.kind} ${b.name}: ${b.proc.name} got a read lock (${b.key}) asked for after ${k} queued, which still waits`,
        );
        return;
      }
    }
  }

  /** An observer saw `key` (token `token`) lead at `revision`: it must have been the oldest participant then. */
  observed(
    name: string,
    key: string,
    token: bigint,
    revision: bigint,
    leaders: (rev: bigint) => { key: string; token: bigint } | null | 'compacted',
  ): void {
    const l = leaders(revision);
    if (l === 'compacted') return;
    if (!l || l.key !== key || l.token !== token) {
      this.fail(
        'observe-named-non-leader',
        `observe ${name}: named ${key} (term ${token}) at revision ${revision}, when the leader was ${l ? `${l.key} (term ${l.token})` : 'nobody'}`,
      );
    }
  }

  /** `<name>/ready` was put at `rev`: the barrier opened, which needs `count` of `members` (the keys under waiters/) then. */
  barrierOpened(name: string, count: number, members: readonly string[], rev: bigint): void {
    if (members.length < count) {
      this.fail('barrier-opened-early', `double barrier ${name}: ready put with ${members.length} of ${count} members present`);
    }
    this.rounds.set(name, { name, ready: rev, members });
  }

  /** A session was lost (SessionExpiredError `deadline` or `lease_gone`; not closed). */
  sessionLost(lease: bigint): void {
    this.lostLeases.add(lease);
  }

  /**
   * A DoubleBarrier call of `proc` on the session of `lease` ended: enter() resolved with member
   * `key` (`entered`), leave() of member `key` resolved (`left`), or enter() (`key` undefined:
   * whatever key it made on the lease since `calledAt`) or leave() rejected (`gave-up`). A call that gives up deletes its key and, if it was its round's last, `ready`;
   * from `from` (the instant it began to give up: its signal or its session's aborted) to `at`.
   */
  barrierCall(call: BarrierCall): void {
    this.barrierCalls.push(call);
  }

  /** A fault may keep process `proc` (every process if undefined) from etcd from `from` to `to`. */
  cutOff(proc: string | undefined, from: number, to: number): void {
    this.cuts.push({ ...(proc !== undefined ? { proc } : {}), from, to });
  }

  /** The cluster lost its leader (false), or elected one (true): no process reaches etcd meanwhile. */
  leader(elected: boolean): void {
    if (!elected) this.leaderlessSince ??= this.now();
    else if (this.leaderlessSince !== undefined) {
      this.cutOff(undefined, this.leaderlessSince, this.now());
      this.leaderlessSince = undefined;
    }
  }

  /**
   * A key left after every session closed that is the documented behaviour, not a violation
   * (docs/barriers.md): a DoubleBarrier's `<name>/ready`, no lease, whose round's last member to go
   * could not delete it. Go's protocol leaves it too: the last one out deletes it, and none came out.
   * Any other key left, the `ready` of a round whose last member left alive included, is a violation.
   */
  leftByDesign(k: string, kv: { modRevision: bigint; lease: bigint }): boolean {
    return this.whyLeft(k, kv) !== undefined;
  }

  /** Why `k` is left by design (leftByDesign): how its round's last member died; undefined if it is not. */
  whyLeft(k: string, kv: { modRevision: bigint; lease: bigint }): string | undefined {
    if (!k.endsWith('/ready') || kv.lease !== 0n) return undefined;
    const round = this.rounds.get(k.slice(0, -'/ready'.length));
    return round !== undefined && round.ready === kv.modRevision ? this.lastDeath(round) : undefined;
  }

  /**
   * How the last member of `round` to go (the one whose counted key went last, or any that never
   * went; several if one revision took them) died, as docs/barriers.md has it: every other member
   * that was still in when it went must see the round empty and delete `ready` (its leave() as the
   * last one out, its closeIfLast() after it left or gave up). A member died when:
   * - its key went with its lease (expired, or revoked by a fault): its session was lost;
   * - its process crashed before its call on the key ended (before its enter(), even: a key counted
   *   that never comes out);
   * - its session was lost, and its key went with that session's revoke (the session closed after
   *   its loss, so no delete of its own landed) or never went (an operator's put took it off the
   *   lease, so the revoke left it);
   * - its call gave up (enter() or leave() rejected) while a fault kept its process from etcd, so
   *   that its delete of `ready` (closeIfLast, best effort) could not land, or could not find the
   *   round empty because its own key's delete had not landed yet (retried later, or left to its
   *   lease);
   * - it was a member of an earlier round still leaving when this one opened (Go's counting counts
   *   it), and a fault kept its process from etcd after its key went: its leave()'s Txn deletes
   *   only its own round's `ready`, and the closeIfLast() after it could not land.
   * Undefined when none of them died.
   */
  private lastDeath(round: { name: string; ready: bigint; members: readonly string[] }): string | undefined {
    const exits = round.members.map((k) => ({ k, made: this.madeAt(k, round.ready), exit: this.exit(k, round.ready) }));
    const top = exits.some((e) => e.exit === undefined)
      ? exits.filter((e) => e.exit === undefined)
      : exits.filter((e) => e.exit!.rev === exits.reduce((m, x) => (x.exit!.rev > m ? x.exit!.rev : m), 0n));
    for (const { k, made, exit } of top) {
      const went = exit ? `went at revision ${exit.rev} (${exit.cause})` : 'never went';
      if (exit !== undefined && endsLease(exit.cause)) return `${k} ${went}: its lease ended`;
      if (made === undefined) continue;
      const proc = made.cause.split(' ')[0]!;
      // The calls that ended its membership: its leave(), or the enter() or leave() that gave up.
      const calls = this.barrierCalls.filter((c) => c.outcome !== 'entered' && this.callOf(c, k, proc, made));
      const crashed = this.crashedAt.get(proc);
      if (crashed !== undefined && !calls.some((c) => c.at <= crashed))
        return `${k} ${went}: ${proc} crashed at ${crashed} within its call`;
      if (this.lostLeases.has(made.lease!) && (exit === undefined || exit.cause === `${proc} LeaseRevoke`)) {
        return `${k} ${went}: its session (lease ${made.lease!.toString(16)}) was lost`;
      }
      // No leader until the end: cut off from then on.
      const open: { proc?: string; from: number; to: number }[] =
        this.leaderlessSince === undefined ? [] : [{ from: this.leaderlessSince, to: Number.POSITIVE_INFINITY }];
      // Its closeIfLast() needed etcd: after it began to give up, or, a member of an earlier round
      // that came out as the last of this one (its own Txn's guard on `ready` failed), after its key went.
      const later = this.openedAfter(round.name, made.rev) !== round.ready;
      for (const c of calls) {
        const from = c.outcome === 'gave-up' ? c.from : later && exit !== undefined ? exit.at : undefined;
        if (from === undefined) continue;
        const cut = [...this.cuts, ...open].find((x) => (x.proc === undefined || x.proc === proc) && x.from <= c.at && x.to >= from);
        if (cut) {
          const what = c.outcome === 'gave-up' ? 'gave up' : `came out (a member of round ${this.openedAfter(round.name, made.rev)})`;
          return `${k} ${went}: ${proc}'s call ${what} from ${from} to ${c.at}, cut off from etcd from ${cut.from} to ${cut.to}${cut.proc ? '' : ' (every process)'}`;
        }
      }
    }
    return undefined;
  }

  /** The revision of the first put of `<name>/ready` after revision `rev` (the round a member made then entered). */
  private openedAfter(name: string, rev: bigint): bigint | undefined {
    return (this.history.get(`${name}/ready`) ?? []).find((e) => e.rev > rev && e.createRevision !== undefined && !isFault(e.cause))?.rev;
  }

  /**
   * Whether `call` of a DoubleBarrier was one of member `k`, which `proc` made at `made`: an enter()
   * that gave up made whatever key of its session no enter() returned, within its time.
   */
  private callOf(call: BarrierCall, k: string, proc: string, made: Entry): boolean {
    if (call.proc !== proc || call.lease !== made.lease) return false;
    if (call.key !== undefined) return call.key === k;
    return made.at >= call.calledAt && made.at <= call.at && !this.barrierCalls.some((c) => c.outcome === 'entered' && c.key === k);
  }

  /** The put that created the incarnation of `k` standing at revision `rev`. */
  private madeAt(k: string, rev: bigint): Entry | undefined {
    const c = this.at(k, rev)?.createRevision;
    return c === undefined ? undefined : (this.history.get(k) ?? []).find((e) => e.rev === c && e.createRevision === c);
  }

  /** The change that ended the incarnation of `k` standing at revision `rev` (undefined: it still stands). */
  private exit(k: string, rev: bigint): Entry | undefined {
    const c = this.at(k, rev)?.createRevision;
    return (this.history.get(k) ?? []).find((e) => e.rev > rev && (e.createRevision === undefined || e.createRevision !== c));
  }

  /** The holder stopped believing (its signal aborted, with the loss `reason` if lost, or it released). */
  ended(b: Belief, reason?: string): void {
    if (b.to !== undefined) return;
    b.to = this.now();
    const kv = this.store.get(b.key);
    if (
      (reason === 'key_deleted' || reason === 'moved_off_lease') &&
      !b.onHolding &&
      kv?.lease === b.lease &&
      kv.createRevision === b.token
    ) {
      this.fail(
        'false-loss',
        `${b.kind} ${b.name}: ${b.proc.name} was told ${b.key} (token ${b.token}) was lost (${reason}) while it stands on its lease`,
      );
    }
    this.open.delete(b);
    this.trace(`end ${b.kind} ${b.name} ${b.key} of ${b.proc.name}`);
  }

  /** A process crashed: its beliefs end with it. */
  crashed(proc: Proc): void {
    this.crashedAt.set(proc.name, this.now());
    for (const b of [...this.open]) if (b.proc === proc) this.ended(b);
    for (const p of [...this.pending]) if (p.older.proc === proc) this.pending.splice(this.pending.indexOf(p), 1);
  }

  /** Whether `k` existed at revision `rev` on `lease` with CreateRevision `token`. */
  private stoodAt(k: string, rev: bigint, lease: bigint, token: bigint): boolean {
    const e = this.at(k, rev);
    return e?.lease === lease && e.createRevision === token;
  }

  /** The first change of `k` after revision `rev` that ended its incarnation `token` on `lease`. */
  private endedAfter(k: string, rev: bigint, lease: bigint, token: bigint): Entry | undefined {
    return (this.history.get(k) ?? []).find((e) => e.rev > rev && !(e.lease === lease && e.createRevision === token));
  }

  /** `k`'s state at revision `rev`, from its history. */
  private at(k: string, rev: bigint): Entry | undefined {
    const h = this.history.get(k) ?? [];
    for (let i = h.length - 1; i >= 0; i--) if (h[i]!.rev <= rev) return h[i];
    return undefined;
  }

  private describeAt(k: string, rev: bigint): string {
    const e = this.at(k, rev);
    return e?.createRevision === undefined ? 'no such key' : `lease ${e.lease!.toString(16)} rev ${e.createRevision}`;
  }

  /** Holders that kept believing after a fault took their key: long after, or after their process heard it. */
  checkLearned(): void {
    const now = this.now();
    for (const b of this.open) {
      if (!b.lost || b.proc.paused || b.lost.rev === undefined) continue;
      const heard = heardEvent(b.proc, b.key, b.lost.rev);
      if (heard === undefined) continue;
      // Told by then: the holding began, the event came, and the process was running since.
      const told = Math.max(heard, b.from, this.wokeAt.get(b.proc) ?? 0);
      if (now - told > HEARD_MS) {
        this.fail(
          'holder-ignored-loss',
          `${b.kind} ${b.name}: ${b.proc.name} still believes it holds ${b.key}, ${now - told} ms after its process received the event of revision ${b.lost.rev} (${b.lost.cause}) that took it`,
        );
        b.lost = { ...b.lost, rev: undefined }; // once
      }
    }
    for (const b of this.open) {
      if (b.lost && !b.proc.paused && now - b.lost.at > LEARN_MS) {
        this.fail(
          'holder-never-learned',
          `${b.kind} ${b.name}: ${b.proc.name} still believes it holds ${b.key}, removed at ${b.lost.at} (${b.lost.cause})`,
        );
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

/** A DoubleBarrier call that ended (see Oracle.barrierCall). */
export interface BarrierCall {
  readonly proc: string;
  readonly lease: bigint;
  /** The member's key (leave()); undefined for enter(), whose key the oracle finds on the lease. */
  readonly key?: string;
  readonly calledAt: number;
  /** When it began to give up (its signal or its session's aborted), else when it was called. */
  readonly from: number;
  readonly at: number;
  /**
   * `entered`: enter() resolved with member `key`; `left`: leave() resolved, so the member deleted
   * `ready` if it was the last one out; `gave-up`: enter() or leave() rejected.
   */
  readonly outcome: 'entered' | 'left' | 'gave-up';
}

/** A change of a key: its revision, when and by what, and (a put) its lease and CreateRevision. */
interface Entry {
  readonly rev: bigint;
  readonly at: number;
  readonly cause: string;
  readonly lease?: bigint;
  readonly createRevision?: bigint;
}

/** How a grant is judged: one key at a time, an RWMutex's read or write, or a number of permits. */
export type Rule = 'exclusive' | 'read' | 'write' | number;

/** Whether a change was a fault's: the simulator's, or a write of the workload's operator process (etcdctl). */
export function isFault(cause: string): boolean {
  return cause.startsWith('fault') || cause.startsWith(`${OPERATOR} `);
}

/** Whether a change's cause ends a lease and takes its keys: the lease expired, or a fault revoked it. */
function endsLease(cause: string): boolean {
  return cause === 'expiry' || cause === 'fault early-revoke' || cause === 'fault operator-revoke';
}

/** The workload's operator process: its writes are an operator's edits, not a client's. */
export const OPERATOR = 'operator';

/** A participant's key below its name's prefix: `<hex>`, or for an RWMutex `read/<hex>` and `write/<hex>`. */
const PARTICIPANT = { one: /^[0-9a-f]+$/, rw: /^(read|write)\/[0-9a-f]+$/ };
