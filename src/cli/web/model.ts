// The web inspector's picture of a key prefix: every lock, semaphore, readers-writer lock, election
// and double barrier found from its keys' layout, who holds and who waits, and a timeline of the
// recent hand-overs. Fed by a fresh range (resync) and by watch events; knows nothing of HTTP.
import type { KeyValue } from '../../index.js';
import type { Change, EntityView, Kind, PartView, TimelineEvent } from './views.js';

interface Part {
  key: string;
  name: string;
  layout: 'plain' | 'read' | 'write' | 'member';
  lease: bigint;
  leaseHex: string;
  /**
   * In a participant's place with no lease (an operator's plain put over a participant's key): shown
   * apart, never a holder or a waiter, as the lock and election algorithms skip it.
   */
  stray: boolean;
  token: bigint;
  value: Buffer;
  createdAt: number | null;
  heldSince?: number | null;
}

interface Entity {
  name: string;
  layout: EntityView['layout'];
  parts: Map<string, Part>;
  /**
   * A participant's key was written again with another value (a proclaim): this name is an
   * election. A put that leaves the value as it was is not one: a lock holder may re-put its own key
   * (same value, same lease) to mark it.
   */
  proclaimed: boolean;
  /** Named an election by the operator (`--elections`). */
  declared: boolean;
  kind: Kind;
  permits?: number;
  holders: Set<string>;
  vacantSince: number | null;
  /** When the last participant left (for dropping old empty names). */
  emptySince?: number;
}

const HEX = /^[0-9a-f]+$/;
/** A name that says it is an election: shown as one even before a proclaim proves it (the fallback when no --elections glob matches). */
const ELECTION_NAME = /elect|leader/i;
/**
 * Values only a lock writes: none (Go's Mutex, etcdctl lock, our Mutex without a label) or the CLI's
 * default label `<host>:<pid>`. A candidate always proposes a value, and rarely one of that shape.
 */
const LOCK_VALUE = /^(|[^\s:]+:\d+)$/;

/**
 * A test for the names the operator says are elections (`--elections`), from globs matched against
 * the whole name: `*` is any run of characters but `/`, `**` any run including `/`, `?` one
 * character but `/`; anything else stands for itself. Undefined when there is no glob.
 */
export function electionMatcher(globs: readonly string[]): ((name: string) => boolean) | undefined {
  if (globs.length === 0) return undefined;
  const res = globs.map((g) => {
    let re = '';
    for (let i = 0; i < g.length; i++) {
      const c = g[i]!;
      if (c === '*' && g[i + 1] === '*') {
        re += '.*';
        i++;
      } else if (c === '*') re += '[^/]*';
      else if (c === '?') re += '[^/]';
      else re += c.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&');
    }
    return new RegExp(`^${re}$`, 's');
  });
  return (name) => res.some((re) => re.test(name));
}
/** At most this many names without participants are kept (shown as free), oldest dropped first. */
const MAX_EMPTY = 200;
/** Timeline events kept. */
const MAX_TIMELINE = 500;

/**
 * Where a key belongs: `<name>/<hex>` (a lock's, election's or semaphore's participant, Go's
 * Mutex and Election), `<name>/read|write/<id>` (a readers-writer lock, ours and Go's
 * recipe.RWMutex), `<name>/waiters/<id>` (a double barrier's member, ours and Go's recipe).
 * Undefined for anything else. `prefix` must be a prefix of `<name>/`: a prefix cutting into the
 * participant part would show half a queue.
 */
export function classifyKey(prefix: string, key: string): { name: string; layout: Part['layout'] } | undefined {
  let m = /^(.+)\/(read|write)\/([0-9a-f]+)$/s.exec(key);
  let found: { name: string; layout: Part['layout'] } | undefined;
  if (m) found = { name: m[1]!, layout: m[2] as 'read' | 'write' };
  else if ((m = /^(.+)\/waiters\/([0-9A-Za-z]+)$/s.exec(key))) found = { name: m[1]!, layout: 'member' };
  else {
    const slash = key.lastIndexOf('/');
    if (slash > 0 && HEX.test(key.slice(slash + 1))) found = { name: key.slice(0, slash), layout: 'plain' };
  }
  if (!found || !`${found.name}/`.startsWith(prefix)) return undefined;
  return found;
}

/** The first space-separated token of a value: a semaphore's permit count. */
function countOf(value: string): string {
  return value.split(' ', 1)[0]!;
}

export class Model {
  private readonly entities = new Map<string, Entity>();
  private readonly byKey = new Map<string, Part>();
  /** Keys per lease (hex), to know when a lease appears and disappears. */
  private readonly leaseKeys = new Map<string, number>();
  readonly timeline: TimelineEvent[] = [];
  private seq = 0;

  constructor(
    readonly prefix: string,
    readonly showValues: boolean,
    private readonly now: () => number = Date.now,
    /** Names the operator says are elections (`--elections`); others fall back to the heuristics. */
    private readonly isElection: (name: string) => boolean = () => false,
  ) {}

  /** The whole picture, for a page that just connected. */
  snapshot(): { entities: EntityView[]; timeline: TimelineEvent[]; leases: string[] } {
    const entities = [...this.entities.values()].map((e) => ({
      ...this.entityView(e),
      parts: [...e.parts.values()].map((p) => this.partView(p)),
    }));
    return { entities, timeline: [...this.timeline], leases: [...this.leaseKeys.keys()] };
  }

  /** Number of participant keys known. */
  get size(): number {
    return this.byKey.size;
  }

  /** Whether a lease still has keys here. */
  hasLease(hex: string): boolean {
    return this.leaseKeys.has(hex);
  }

  /** The leases of the current holders (their TimeToLive matters most). */
  holderLeases(): Set<string> {
    const out = new Set<string>();
    for (const e of this.entities.values()) for (const k of e.holders) out.add(e.parts.get(k)!.leaseHex);
    return out;
  }

  /**
   * Replaces the picture with a fresh range's keys. The first call marks every key as older than
   * the inspector; a later one (after an outage or a compaction) applies the difference as events
   * whose times are only known to be at most now.
   */
  resync(kvs: KeyValue[], initial: boolean, expiredLease: (hex: string) => boolean = () => false): Change {
    const ch = this.emptyChange();
    const seen = new Set<string>();
    const touched = new Set<Entity>();
    // Keys on a lease first: a stray key shows only under a name known from its participants.
    for (const kv of [...kvs.filter((kv) => kv.lease !== 0n), ...kvs.filter((kv) => kv.lease === 0n)]) {
      const key = kv.key.toString('utf8');
      seen.add(key);
      const old = this.byKey.get(key);
      if (old && old.token === kv.createRevision && old.lease === kv.lease) {
        // The same participant, with another value since the last read: a proclaim. (Its version
        // alone says nothing: a lock holder may re-put its key with the same value.)
        if (!old.value.equals(kv.value)) this.rewrite(old, kv.value, ch, touched);
        continue;
      }
      if (old) this.remove(old, ch, touched);
      this.add(kv, initial ? null : this.now(), ch, touched);
    }
    for (const [key, p] of [...this.byKey]) if (!seen.has(key)) this.remove(p, ch, touched);
    this.settle(touched, ch, { initial, approximate: !initial, expiredLease });
    return ch;
  }

  /** Applies one watch batch (all events of a revision or more). */
  apply(events: { type: 'put' | 'delete'; kv: KeyValue }[], expiredLease: (hex: string) => boolean = () => false): Change {
    const ch = this.emptyChange();
    const touched = new Set<Entity>();
    const now = this.now();
    for (const ev of events) {
      const key = ev.kv.key.toString('utf8');
      const old = this.byKey.get(key);
      if (ev.type === 'delete') {
        if (old) this.remove(old, ch, touched);
        continue;
      }
      if (old && old.token === ev.kv.createRevision && old.lease === ev.kv.lease) {
        // The same participant wrote its key again. With another value: an election's proclaim.
        // With the same value: a lock holder's mark (Put with ignore_value/ignore_lease), nothing
        // to show.
        if (!old.value.equals(ev.kv.value)) this.rewrite(old, ev.kv.value, ch, touched);
        continue;
      }
      if (old) this.remove(old, ch, touched);
      this.add(ev.kv, now, ch, touched);
    }
    this.settle(touched, ch, { initial: false, approximate: false, expiredLease });
    return ch;
  }

  /**
   * A key got a new value on the same incarnation and lease. A participant's: a proclaim, the name
   * is an election. A stray key's: only its value changed.
   */
  private rewrite(p: Part, value: Buffer, ch: Change, touched: Set<Entity>): void {
    p.value = value;
    const e = this.entities.get(p.name)!;
    if (!p.stray) e.proclaimed = true;
    touched.add(e);
    ch.parts.push({ op: 'put', ...this.partView(p) });
  }

  private emptyChange(): Change {
    return { parts: [], entities: [], dropped: [], timeline: [], leasesNew: [], leasesChanged: [], leasesGone: [] };
  }

  private add(kv: KeyValue, createdAt: number | null, ch: Change, touched: Set<Entity>): Part | undefined {
    const key = kv.key.toString('utf8');
    const c = classifyKey(this.prefix, key);
    if (!c) return undefined;
    const stray = kv.lease === 0n;
    let e = this.entities.get(c.name);
    // A name with only stray keys is not shown: a data key such as `users/42` looks like one.
    if (!e && stray) return undefined;
    if (!e) {
      e = {
        name: c.name,
        layout: 'plain',
        parts: new Map(),
        proclaimed: false,
        declared: this.isElection(c.name),
        kind: 'lock',
        holders: new Set(),
        vacantSince: null,
      };
      this.entities.set(c.name, e);
    }
    delete e.emptySince;
    const leaseHex = kv.lease.toString(16);
    const p: Part = {
      key,
      name: c.name,
      layout: c.layout,
      lease: kv.lease,
      leaseHex,
      stray,
      token: kv.createRevision,
      value: kv.value,
      createdAt,
    };
    e.parts.set(key, p);
    this.byKey.set(key, p);
    if (!stray) {
      const n = this.leaseKeys.get(leaseHex) ?? 0;
      this.leaseKeys.set(leaseHex, n + 1);
      if (n === 0) ch.leasesNew.push(leaseHex);
      else if (!ch.leasesChanged.includes(leaseHex)) ch.leasesChanged.push(leaseHex);
    }
    touched.add(e);
    ch.parts.push({ op: 'put', ...this.partView(p) });
    return p;
  }

  private remove(p: Part, ch: Change, touched: Set<Entity>): void {
    const e = this.entities.get(p.name)!;
    e.parts.delete(p.key);
    this.byKey.delete(p.key);
    if (!p.stray) {
      const n = (this.leaseKeys.get(p.leaseHex) ?? 1) - 1;
      if (n <= 0) {
        this.leaseKeys.delete(p.leaseHex);
        ch.leasesGone.push(p.leaseHex);
      } else {
        this.leaseKeys.set(p.leaseHex, n);
        if (!ch.leasesChanged.includes(p.leaseHex)) ch.leasesChanged.push(p.leaseHex);
      }
    }
    touched.add(e);
    ch.parts.push({ op: 'del', key: p.key, name: p.name });
    // Remembered until settle() compares holders: a holder that left ends its term there.
    this.departed.set(p.key, p);
  }

  private readonly departed = new Map<string, Part>();

  /** Recomputes kind and holders of the touched names; records terms that began and ended. */
  private settle(
    touched: Set<Entity>,
    ch: Change,
    how: { initial: boolean; approximate: boolean; expiredLease: (hex: string) => boolean },
  ): void {
    const now = this.now();
    for (const e of touched) {
      const before = e.holders;
      const wasVacant = before.size === 0;
      this.classify(e);
      const released: Part[] = [];
      for (const k of before) {
        if (e.holders.has(k)) continue;
        const p = this.departed.get(k) ?? e.parts.get(k);
        if (p) released.push(p);
      }
      for (const p of released) {
        // A key that left when its lease's known deadline had passed went with its lease; one
        // still there on no lease was written over without one.
        const detached = e.parts.get(p.key)?.stray === true;
        const expired = !detached && !e.parts.has(p.key) && how.expiredLease(p.leaseHex);
        this.record(ch, {
          at: now,
          name: e.name,
          kind: e.kind,
          type: detached ? 'detached' : expired ? 'expired' : 'released',
          key: p.key,
          lease: p.leaseHex,
          token: p.token.toString(),
          ...(p.heldSince != null ? { heldMs: now - p.heldSince } : {}),
          ...(how.approximate ? { approximate: true } : {}),
          ...this.valueOf(p),
        });
      }
      const acquired = [...e.holders].filter((k) => !before.has(k)).map((k) => e.parts.get(k)!);
      acquired.sort((a, b) => (a.token < b.token ? -1 : 1));
      const from =
        released.length > 0 && (e.kind === 'lock' || e.kind === 'election' || e.kind === 'lock-or-election')
          ? released[released.length - 1]
          : undefined;
      for (const p of acquired) {
        p.heldSince = how.initial ? null : now;
        const i = ch.parts.findIndex((op) => op.op === 'put' && op.key === p.key);
        if (i >= 0) ch.parts[i] = { op: 'put', ...this.partView(p) };
        else ch.parts.push({ op: 'put', ...this.partView(p) });
        if (how.initial) continue;
        this.record(ch, {
          at: now,
          name: e.name,
          kind: e.kind,
          type: 'acquired',
          key: p.key,
          lease: p.leaseHex,
          token: p.token.toString(),
          ...(from ? { from: { key: from.key, token: from.token.toString() } } : {}),
          ...(wasVacant && e.vacantSince !== null ? { gapMs: now - e.vacantSince } : from ? { gapMs: 0 } : {}),
          ...(how.approximate ? { approximate: true } : {}),
          ...this.valueOf(p),
        });
      }
      if (e.holders.size > 0) e.vacantSince = null;
      else if (!wasVacant) e.vacantSince = how.initial ? null : now;
      if (e.parts.size === 0) e.emptySince ??= now;
      ch.entities.push(this.entityView(e));
    }
    this.departed.clear();
    // Keep the newest MAX_EMPTY free names (shown as free, with their history); drop the rest.
    const empty = [...this.entities.values()].filter((e) => e.parts.size === 0).sort((a, b) => a.emptySince! - b.emptySince!);
    for (const e of empty.slice(0, Math.max(0, empty.length - MAX_EMPTY))) {
      this.entities.delete(e.name);
      ch.dropped.push(e.name);
    }
  }

  /**
   * Kind and holders of a name, as `inspect` decides them, plus elections: a name with the plain
   * layout is an election when `--elections` names it, once a participant proclaims (a new value on
   * the same key and lease), or when its name says so (`elect` or `leader` in it); otherwise a
   * semaphore when every value starts with the same permit count, a lock when every value is a
   * lock's (empty, or the CLI's `<host>:<pid>`), else `lock-or-election`: the keys cannot tell.
   */
  private classify(e: Entity): void {
    const all = [...e.parts.values()].filter((p) => !p.stray);
    const rw = all.filter((p) => p.layout === 'read' || p.layout === 'write');
    const members = all.filter((p) => p.layout === 'member');
    const plain = all.filter((p) => p.layout === 'plain');
    let queue: Part[];
    let kind: Kind;
    if (all.length > 0) delete e.permits; // emptied, a semaphore keeps its count
    if (plain.length > 0) {
      queue = plain;
      e.layout = 'plain';
      kind = e.declared || e.proclaimed || ELECTION_NAME.test(e.name) ? 'election' : 'lock';
    } else if (rw.length > 0) {
      queue = rw;
      kind = 'rwlock';
      e.layout = 'rw';
    } else if (members.length > 0) {
      queue = members;
      kind = 'barrier';
      e.layout = 'member';
    } else {
      // Nobody left: keep what it was.
      e.holders = new Set();
      return;
    }
    queue.sort((a, b) => (a.token < b.token ? -1 : a.token > b.token ? 1 : 0));
    let held = 1;
    if (kind === 'rwlock') {
      // The oldest writer holds alone; otherwise every reader older than the first writer holds.
      const firstWriter = queue.findIndex((p) => p.layout === 'write');
      held = firstWriter === 0 ? 1 : firstWriter < 0 ? queue.length : firstWriter;
    } else if (kind === 'barrier') {
      held = queue.length;
    } else if (!e.proclaimed && !e.declared) {
      // Only the name heuristic can be overruled: an election named for one whose candidates all
      // propose the same number looks like a semaphore.
      const first = countOf(queue[0]!.value.toString('utf8'));
      if (/^[1-9][0-9]*$/.test(first) && queue.every((p) => countOf(p.value.toString('utf8')) === first)) {
        // A semaphore's value is its permit count, then the holder's label if it has one.
        kind = 'semaphore';
        e.permits = Number(first);
        held = Math.min(e.permits, queue.length);
      }
    }
    // Neither named, proclaimed nor counted: a lock only if its values are a lock's, else say so.
    if (kind === 'lock' && !queue.every((p) => LOCK_VALUE.test(p.value.toString('utf8')))) kind = 'lock-or-election';
    e.kind = kind;
    e.holders = new Set(queue.slice(0, held).map((p) => p.key));
  }

  private record(ch: Change, ev: Omit<TimelineEvent, 'seq'>): void {
    const full = { seq: ++this.seq, ...ev } as TimelineEvent;
    this.timeline.push(full);
    if (this.timeline.length > MAX_TIMELINE) this.timeline.splice(0, this.timeline.length - MAX_TIMELINE);
    ch.timeline.push(full);
  }

  private valueOf(p: Part): { value?: string } {
    return this.showValues ? { value: p.value.toString('utf8') } : {};
  }

  private entityView(e: Entity): EntityView {
    return {
      name: e.name,
      kind: e.kind,
      ...(e.permits !== undefined ? { permits: e.permits } : {}),
      layout: e.layout,
      holders: [...e.holders],
      vacantSince: e.vacantSince,
    };
  }

  private partView(p: Part): PartView {
    return {
      key: p.key,
      name: p.name,
      layout: p.layout,
      ...(p.stray ? { stray: true } : { lease: p.leaseHex }),
      token: p.token.toString(),
      createdAt: p.createdAt,
      ...(p.heldSince !== undefined ? { heldSince: p.heldSince } : {}),
      ...this.valueOf(p),
    };
  }
}
