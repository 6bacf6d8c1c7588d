// The simulated etcd's state machine: MVCC key-value store with revisions and history, leases, and
// the Txn, Range and DeleteRange semantics of etcd's applier (server/etcdserver/txn in 3.7,
// etcdserver/apply.go in 3.4), including its errors. Keys are held as latin1 strings: one char per
// byte, so JavaScript's string order is etcd's byte order.
import * as pb from '../../proto/etcd.js';

/** A key's value at one revision. */
export interface Kv {
  readonly k: string;
  /** `k` as bytes, made once for every answer that carries this value (the wire copies it for the client). */
  readonly key: Buffer;
  readonly createRevision: bigint;
  readonly modRevision: bigint;
  readonly version: bigint;
  readonly value: Buffer;
  readonly lease: bigint;
}

/** One change: a put (kv set) or a delete (kv is the tombstone: key and revision only). */
export interface Change {
  readonly type: 'put' | 'delete';
  readonly k: string;
  readonly rev: bigint;
  /** The new value of a put. */
  readonly kv?: Kv;
  /** The value before, if the key existed. */
  readonly prev?: Kv;
  /** What made the change: a client's request, a lease expiry, a fault (for the oracle). */
  readonly cause: string;
}

/** The changes of one revision. */
export interface Revision {
  readonly rev: bigint;
  readonly changes: Change[];
}

/** An etcd error as gRPC carries it. */
export class EtcdFailure extends Error {
  constructor(
    readonly code: number,
    readonly details: string,
  ) {
    super(details);
  }
}

const INVALID_ARGUMENT = 3;
const NOT_FOUND = 5;
const FAILED_PRECONDITION = 9;
const OUT_OF_RANGE = 11;

export const ERR = {
  compacted: () => new EtcdFailure(OUT_OF_RANGE, 'etcdserver: mvcc: required revision has been compacted'),
  futureRev: () => new EtcdFailure(OUT_OF_RANGE, 'etcdserver: mvcc: required revision is a future revision'),
  leaseNotFound: () => new EtcdFailure(NOT_FOUND, 'etcdserver: requested lease not found'),
  leaseExists: () => new EtcdFailure(FAILED_PRECONDITION, 'etcdserver: lease already exists'),
  leaseTtlTooLarge: () => new EtcdFailure(OUT_OF_RANGE, 'etcdserver: too large lease TTL'),
  duplicateKey: () => new EtcdFailure(INVALID_ARGUMENT, 'etcdserver: duplicate key given in txn request'),
  tooManyOps: () => new EtcdFailure(INVALID_ARGUMENT, 'etcdserver: too many operations in txn request'),
  keyNotFound: () => new EtcdFailure(INVALID_ARGUMENT, 'etcdserver: key not found'),
  emptyKey: () => new EtcdFailure(INVALID_ARGUMENT, 'etcdserver: key is not provided'),
  valueProvided: () => new EtcdFailure(INVALID_ARGUMENT, 'etcdserver: value is provided'),
  leaseProvided: () => new EtcdFailure(INVALID_ARGUMENT, 'etcdserver: lease is provided'),
};

/** What differs between etcd versions, as the library meets it. */
export interface Profile {
  readonly name: '3.4' | '3.7';
  readonly version: string;
  /** 3.7: keys-only ranges (also inside a Txn) answer lease 0 unless sorting by value. */
  readonly fastKeysOnly: boolean;
  /** 3.4 before 3.4.36: compaction at R drops the delete recorded at R, which a watch starting at R then never sees. */
  readonly compactionLosesTombstone: boolean;
  /**
   * Which error a Txn with several problems reports. 3.4's applier checks every put on the path
   * (an ignore_* put's key, then its lease) before any range's revision; 3.7 checks each operation
   * in order, a put's lease before its key.
   */
  readonly txnChecksPutsFirst: boolean;
}

export const PROFILES: Readonly<Record<'3.4' | '3.7', Profile>> = {
  '3.4': { name: '3.4', version: '3.4.23', fastKeysOnly: false, compactionLosesTombstone: true, txnChecksPutsFirst: true },
  '3.7': { name: '3.7', version: '3.7.3', fastKeysOnly: true, compactionLosesTombstone: false, txnChecksPutsFirst: false },
};

export interface Lease {
  readonly id: bigint;
  readonly ttl: bigint;
  /** When it expires on the leader's clock (ms of virtual time). */
  expiry: number;
  readonly keys: Set<string>;
}

const EMPTY = Buffer.alloc(0);
/** The smallest lease TTL etcd grants with its default election timeout (1 s): ceil(1.5 s). */
export const MIN_TTL = 2n;
export const MAX_TTL = 9_000_000_000n;
export const MAX_TXN_OPS = 128;

function str(b: Buffer | Uint8Array | undefined): string {
  if (!b) return '';
  if (Buffer.isBuffer(b)) return b.toString('latin1');
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('latin1');
}

/** A key range as etcd reads it: end '' is the key alone, end '\0' every key from `k` on. */
export interface Interval {
  readonly k: string;
  readonly end: string;
}

function interval(key: Buffer | undefined, end: Buffer | undefined): Interval {
  return { k: str(key), end: str(end) };
}

function inside(r: Interval, k: string): boolean {
  if (r.end === '') return k === r.k;
  if (r.end === '\0') return k >= r.k;
  return k >= r.k && k < r.end;
}

function overlaps(a: Interval, b: Interval): boolean {
  const aEnd = a.end === '' ? `${a.k}\0` : a.end;
  const bEnd = b.end === '' ? `${b.k}\0` : b.end;
  const aInf = a.end === '\0';
  const bInf = b.end === '\0';
  return (aInf || b.k < aEnd) && (bInf || a.k < bEnd);
}

/** The leaf of a KeyValue for an answer. */
export function toPb(kv: Kv, keysOnly = false, fast = false): pb.KeyValue {
  return {
    key: kv.key,
    createRevision: kv.createRevision,
    modRevision: kv.modRevision,
    version: kv.version,
    value: keysOnly ? EMPTY : kv.value,
    lease: fast ? 0n : kv.lease,
  };
}

/**
 * The store: the current state, the history since the compacted revision, and the leases. One
 * store per cluster: members differ only in how far they have applied it (see cluster.ts).
 */
export class Store {
  rev = 1n;
  compacted = 0n;
  private readonly kvs = new Map<string, Kv>();
  /** Current keys in byte order. */
  private sorted: string[] = [];
  /** Revisions after the compacted one, in order (each with its changes). */
  readonly history: Revision[] = [];
  readonly leases = new Map<bigint, Lease>();
  /** Called once per new revision, after it is applied. */
  onRevision?: (r: Revision) => void;

  constructor(readonly profile: Profile) {}

  /** The current value of `k`. */
  get(k: string): Kv | undefined {
    return this.kvs.get(k);
  }

  /** Current keys in byte order. */
  keys(): readonly string[] {
    return this.sorted;
  }

  /** The current keys in `r`, in byte order. */
  keysIn(r: Interval): string[] {
    if (r.end === '') return this.kvs.has(r.k) ? [r.k] : [];
    const out: string[] = [];
    const sorted = this.sorted;
    for (let i = lowerBound(sorted, r.k); i < sorted.length; i++) {
      const k = sorted[i]!;
      if (r.end !== '\0' && k >= r.end) break;
      out.push(k);
    }
    return out;
  }

  // ---- reads -----------------------------------------------------------------------------------

  /**
   * The keys in `r` at revision `at`, in byte order. `pending`: the changes of a write transaction
   * under way (already in the current state, at revision rev+1), which a read at an earlier
   * revision must not see.
   */
  private rangeAt(r: Interval, at: bigint, pending: readonly Change[] = []): Kv[] {
    const out: Kv[] = [];
    if (at >= (pending.length > 0 ? this.rev + 1n : this.rev)) {
      if (r.end === '') {
        const kv = this.kvs.get(r.k);
        if (kv) out.push(kv);
        return out;
      }
      for (const k of this.keysIn(r)) out.push(this.kvs.get(k)!);
      return out;
    }
    // Undo the revisions after `at`, newest first.
    const state = new Map<string, Kv | undefined>();
    for (let j = pending.length - 1; j >= 0; j--) {
      const c = pending[j]!;
      if (inside(r, c.k)) state.set(c.k, c.prev);
    }
    for (let i = this.history.length - 1; i >= 0 && this.history[i]!.rev > at; i--) {
      const h = this.history[i]!;
      for (let j = h.changes.length - 1; j >= 0; j--) {
        const c = h.changes[j]!;
        if (inside(r, c.k)) state.set(c.k, c.prev);
      }
    }
    const keys = new Set<string>(this.keysIn(r));
    for (const k of state.keys()) keys.add(k);
    for (const k of [...keys].sort()) {
      const kv = state.has(k) ? state.get(k) : this.kvs.get(k);
      if (kv) out.push(kv);
    }
    return out;
  }

  /** etcd's mvcc rangeKeys: the revision check, then the keys. `cur`: the reading transaction's revision. */
  private checkRev(asked: bigint, cur: bigint): bigint {
    if (asked > cur) throw ERR.futureRev();
    const at = asked <= 0n ? cur : asked;
    if (at < this.compacted) throw ERR.compacted();
    return at;
  }

  /** A Range as etcd's gRPC layer and applier answer it (header revision `cur`). */
  range(r: pb.RangeRequest, cur = this.rev): pb.RangeResponse {
    if (!r.key?.length) throw ERR.emptyKey();
    return this.read(r, cur);
  }

  /**
   * etcd's Range on a read view at `cur` (the applier's, also inside a Txn): `pending` are the
   * changes the Txn made so far.
   */
  read(r: pb.RangeRequest, cur: bigint, pending: readonly Change[] = []): pb.RangeResponse {
    const at = this.checkRev(r.revision ?? 0n, cur);
    let kvs = this.rangeAt(interval(r.key, r.rangeEnd), at, pending);
    const count = BigInt(kvs.length);
    if (r.countOnly) return { header: { revision: cur }, kvs: [], more: false, count };
    const maxMod = r.maxModRevision ?? 0n;
    const minMod = r.minModRevision ?? 0n;
    const maxCreate = r.maxCreateRevision ?? 0n;
    const minCreate = r.minCreateRevision ?? 0n;
    const target = r.sortTarget ?? pb.RangeRequest_SortTarget.KEY;
    const asked = r.sortOrder ?? pb.RangeRequest_SortOrder.NONE;
    const limit = r.limit ?? 0n;
    // In key order with no filter, mvcc reads only limit+1 keys (one more for `more`); what is
    // sorted afterwards is those (a NONE order with another target sorts ascending).
    if (limit > 0n && isKeyOrder(target, asked) && maxMod === 0n && minMod === 0n && maxCreate === 0n && minCreate === 0n)
      kvs = kvs.slice(0, Number(limit) + 1);
    if (maxMod !== 0n) kvs = kvs.filter((kv) => kv.modRevision <= maxMod);
    if (minMod !== 0n) kvs = kvs.filter((kv) => kv.modRevision >= minMod);
    if (maxCreate !== 0n) kvs = kvs.filter((kv) => kv.createRevision <= maxCreate);
    if (minCreate !== 0n) kvs = kvs.filter((kv) => kv.createRevision >= minCreate);
    const order =
      target !== pb.RangeRequest_SortTarget.KEY && asked === pb.RangeRequest_SortOrder.NONE ? pb.RangeRequest_SortOrder.ASCEND : asked;
    if (!isKeyOrder(target, order)) {
      // Go's sort.Sort is not stable; ties (keys written by one Txn share a CreateRevision) are
      // broken here by key order, which etcd does not promise.
      const by = sortKey(target);
      const sign = order === pb.RangeRequest_SortOrder.DESCEND ? -1 : 1;
      kvs = [...kvs].sort((a, b) => sign * by(a, b) || (a.k < b.k ? -1 : a.k > b.k ? 1 : 0));
    }
    let more = false;
    if (limit > 0n && BigInt(kvs.length) > limit) {
      kvs = kvs.slice(0, Number(limit));
      more = true;
    }
    const keysOnly = r.keysOnly ?? false;
    const fast = this.profile.fastKeysOnly && keysOnly && target !== pb.RangeRequest_SortTarget.VALUE;
    return { header: { revision: cur }, kvs: kvs.map((kv) => toPb(kv, keysOnly, fast)), more, count };
  }

  // ---- writes ----------------------------------------------------------------------------------

  /** Applies `fn`'s writes as one revision (none if nothing changed); returns its revision header value. */
  write<T>(cause: string, fn: (w: Writer) => T): { result: T; rev: bigint; changes: Change[] } {
    const w = new Writer(this, cause);
    const result = fn(w);
    if (w.changes.length === 0) return { result, rev: this.rev, changes: [] };
    this.rev = w.rev;
    const r: Revision = { rev: w.rev, changes: w.changes };
    this.history.push(r);
    this.onRevision?.(r);
    return { result, rev: w.rev, changes: w.changes };
  }

  /** @internal used by Writer */
  setKv(k: string, kv: Kv | undefined): void {
    const had = this.kvs.has(k);
    if (kv) {
      this.kvs.set(k, kv);
      if (!had) this.sorted.splice(lowerBound(this.sorted, k), 0, k);
    } else if (had) {
      this.kvs.delete(k);
      this.sorted.splice(lowerBound(this.sorted, k), 1);
    }
  }

  put(p: pb.PutRequest, cause: string): pb.PutResponse {
    checkPutRequest(p);
    const lease = p.lease ?? 0n;
    if (lease !== 0n && !this.leases.has(lease)) throw ERR.leaseNotFound();
    const { result, rev } = this.write(cause, (w) => w.put(p));
    return { header: { revision: rev }, ...(result ? { prevKv: result } : {}) };
  }

  deleteRange(d: pb.DeleteRangeRequest, cause: string): pb.DeleteRangeResponse {
    if (!d.key?.length) throw ERR.emptyKey();
    const { result } = this.write(cause, (w) => w.deleteRange(d));
    return result;
  }

  txn(t: pb.TxnRequest, cause: string): pb.TxnResponse {
    checkTxnRequest(t, MAX_TXN_OPS);
    checkIntervals(t.success ?? []);
    checkIntervals(t.failure ?? []);
    const path = this.compareToPath(t);
    // Every put on the path must name a live lease, every range a readable revision: else the whole Txn fails.
    this.checkPath(t, path);
    if (!isWrite(t)) {
      const w = new Writer(this, cause);
      const resp = w.txn(t, path.slice());
      resp.header = { revision: this.rev };
      return resp;
    }
    const { result, rev } = this.write(cause, (w) => w.txn(t, path.slice()));
    result.header = { revision: rev };
    return result;
  }

  /** Which branch each Txn of the tree takes, compares read before any write (etcd's compareToPath). */
  private compareToPath(t: pb.TxnRequest): boolean[] {
    const ok = (t.compare ?? []).every((c) => this.compare(c));
    const path = [ok];
    for (const op of (ok ? t.success : t.failure) ?? []) if (op.requestTxn) path.push(...this.compareToPath(op.requestTxn));
    return path;
  }

  /** The applier's checks of the operations on the path, in the profile's order (see Profile.txnChecksPutsFirst). */
  private checkPath(t: pb.TxnRequest, path: readonly boolean[]): void {
    if (this.profile.txnChecksPutsFirst) {
      onPath(t, path, (op) => {
        if (!op.requestPut) return;
        this.checkPutKey(op.requestPut);
        this.checkPutLease(op.requestPut);
      });
      onPath(t, path, (op) => op.requestRange && this.checkRangeRev(op.requestRange));
    } else {
      onPath(t, path, (op) => {
        if (op.requestRange) this.checkRangeRev(op.requestRange);
        else if (op.requestPut) {
          this.checkPutLease(op.requestPut);
          this.checkPutKey(op.requestPut);
        }
      });
    }
  }

  private checkPutKey(p: pb.PutRequest): void {
    if ((p.ignoreValue || p.ignoreLease) && !this.kvs.has(str(p.key))) throw ERR.keyNotFound();
  }

  private checkPutLease(p: pb.PutRequest): void {
    const lease = p.lease ?? 0n;
    if (lease !== 0n && !this.leases.has(lease)) throw ERR.leaseNotFound();
  }

  private checkRangeRev(r: pb.RangeRequest): void {
    const rev = r.revision ?? 0n;
    if (rev > this.rev) throw ERR.futureRev();
    if (rev !== 0n && rev < this.compacted) throw ERR.compacted();
  }

  private compare(c: pb.Compare): boolean {
    const kvs = this.rangeAt(interval(c.key, c.rangeEnd), this.rev);
    const target = c.target ?? pb.Compare_CompareTarget.VERSION;
    if (kvs.length === 0) {
      if (target === pb.Compare_CompareTarget.VALUE) return false;
      return compareKv(c, undefined);
    }
    return kvs.every((kv) => compareKv(c, kv));
  }

  // ---- compaction ------------------------------------------------------------------------------

  compact(rev: bigint): void {
    if (rev <= this.compacted) throw ERR.compacted();
    if (rev > this.rev) throw ERR.futureRev();
    this.compacted = rev;
    while (this.history.length > 0 && this.history[0]!.rev < rev) this.history.shift();
    // The history at `rev` itself is kept for watches starting there, but 3.4.23 drops its tombstones.
    const first = this.history[0];
    if (first && first.rev === rev && this.profile.compactionLosesTombstone) {
      const kept = first.changes.filter((c) => c.type !== 'delete');
      if (kept.length !== first.changes.length) this.history[0] = { rev: first.rev, changes: kept };
    }
  }

  // ---- leases ----------------------------------------------------------------------------------

  grant(id: bigint, ttl: bigint, now: number): Lease {
    if (ttl > MAX_TTL) throw ERR.leaseTtlTooLarge();
    if (this.leases.has(id)) throw ERR.leaseExists();
    const t = ttl < MIN_TTL ? MIN_TTL : ttl;
    const l: Lease = { id, ttl: t, expiry: now + Number(t) * 1000, keys: new Set() };
    this.leases.set(id, l);
    return l;
  }

  /** Revokes `id`, deleting its keys in one revision. */
  revoke(id: bigint, cause: string): Change[] {
    const l = this.leases.get(id);
    if (!l) throw ERR.leaseNotFound();
    const keys = [...l.keys].sort();
    const { changes } = this.write(cause, (w) => {
      for (const k of keys) w.deleteRange({ key: Buffer.from(k, 'latin1') });
    });
    this.leases.delete(id);
    return changes;
  }
}

/** The keys of `sorted` (in byte order, as Store.keys gives them) that start with `prefix`. */
export function keysUnder(sorted: readonly string[], prefix: string): string[] {
  const out: string[] = [];
  for (let i = lowerBound(sorted, prefix); i < sorted.length && sorted[i]!.startsWith(prefix); i++) out.push(sorted[i]!);
  return out;
}

function lowerBound(a: readonly string[], k: string): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! < k) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function cmp(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function sortKey(target: pb.RangeRequest_SortTarget): (a: Kv, b: Kv) => number {
  switch (target) {
    case pb.RangeRequest_SortTarget.VERSION:
      return (a, b) => cmp(a.version, b.version);
    case pb.RangeRequest_SortTarget.CREATE:
      return (a, b) => cmp(a.createRevision, b.createRevision);
    case pb.RangeRequest_SortTarget.MOD:
      return (a, b) => cmp(a.modRevision, b.modRevision);
    case pb.RangeRequest_SortTarget.VALUE:
      return (a, b) => Buffer.compare(a.value, b.value);
    default:
      return (a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : 0);
  }
}

function compareKv(c: pb.Compare, kv: Kv | undefined): boolean {
  let result: number;
  switch (c.target ?? pb.Compare_CompareTarget.VERSION) {
    case pb.Compare_CompareTarget.VALUE:
      result = Buffer.compare(kv?.value ?? EMPTY, c.value ? Buffer.from(c.value) : EMPTY);
      break;
    case pb.Compare_CompareTarget.CREATE:
      result = cmp(kv?.createRevision ?? 0n, c.createRevision ?? 0n);
      break;
    case pb.Compare_CompareTarget.MOD:
      result = cmp(kv?.modRevision ?? 0n, c.modRevision ?? 0n);
      break;
    case pb.Compare_CompareTarget.LEASE:
      result = cmp(kv?.lease ?? 0n, c.lease ?? 0n);
      break;
    default:
      result = cmp(kv?.version ?? 0n, c.version ?? 0n);
  }
  switch (c.result ?? pb.Compare_CompareResult.EQUAL) {
    case pb.Compare_CompareResult.EQUAL:
      return result === 0;
    case pb.Compare_CompareResult.NOT_EQUAL:
      return result !== 0;
    case pb.Compare_CompareResult.GREATER:
      return result > 0;
    case pb.Compare_CompareResult.LESS:
      return result < 0;
    default:
      return true;
  }
}

function isWrite(t: pb.TxnRequest): boolean {
  return writes(t.success) || writes(t.failure);
}

function writes(ops: readonly pb.RequestOp[] | undefined): boolean {
  for (const op of ops ?? [])
    if (op.requestPut !== undefined || op.requestDeleteRange !== undefined || (op.requestTxn !== undefined && isWrite(op.requestTxn)))
      return true;
  return false;
}

function isKeyOrder(target: pb.RangeRequest_SortTarget, order: pb.RangeRequest_SortOrder): boolean {
  return (
    order === pb.RangeRequest_SortOrder.NONE || (target === pb.RangeRequest_SortTarget.KEY && order === pb.RangeRequest_SortOrder.ASCEND)
  );
}

/** Calls `fn` with each operation but a nested Txn on the branches `path` takes, depth first, in order. */
function onPath(t: pb.TxnRequest, path: readonly boolean[], fn: (op: pb.RequestOp) => void): void {
  walkPath(t, path, 0, fn);
}

/** onPath from `path[at]`; returns the index after the last Txn walked. */
function walkPath(t: pb.TxnRequest, path: readonly boolean[], at: number, fn: (op: pb.RequestOp) => void): number {
  let next = at + 1;
  for (const op of (path[at] ? t.success : t.failure) ?? []) {
    if (op.requestTxn) next = walkPath(op.requestTxn, path, next, fn);
    else fn(op);
  }
  return next;
}

/** etcd's gRPC checkPutRequest. */
function checkPutRequest(p: pb.PutRequest): void {
  if (!p.key?.length) throw ERR.emptyKey();
  if (p.ignoreValue && (p.value?.length ?? 0) !== 0) throw ERR.valueProvided();
  if (p.ignoreLease && (p.lease ?? 0n) !== 0n) throw ERR.leaseProvided();
}

/**
 * etcd's gRPC checkTxnRequest: the longest of a Txn's three lists within `--max-txn-ops`, a nested
 * Txn within what its parent leaves; then each operation in order (keys given, ignore_* without a
 * value or lease; an empty operation is `key not found`).
 */
function checkTxnRequest(t: pb.TxnRequest, maxOps: number): void {
  const compare = t.compare ?? [];
  const success = t.success ?? [];
  const failure = t.failure ?? [];
  const ops = Math.max(compare.length, success.length, failure.length);
  if (ops > maxOps) throw ERR.tooManyOps();
  for (const c of compare) if (!c.key?.length) throw ERR.emptyKey();
  for (const op of success) checkRequestOp(op, maxOps - ops);
  for (const op of failure) checkRequestOp(op, maxOps - ops);
}

function checkRequestOp(op: pb.RequestOp, maxOps: number): void {
  if (op.requestRange) {
    if (!op.requestRange.key?.length) throw ERR.emptyKey();
  } else if (op.requestPut) checkPutRequest(op.requestPut);
  else if (op.requestDeleteRange) {
    if (!op.requestDeleteRange.key?.length) throw ERR.emptyKey();
  } else if (op.requestTxn) checkTxnRequest(op.requestTxn, maxOps);
  else throw ERR.keyNotFound();
}

/** etcd's checkIntervals: no key written twice in one list of a Txn (nested Txns included). */

function checkIntervals(reqs: readonly pb.RequestOp[]): { puts: Set<string>; dels: Interval[] } {
  const dels: Interval[] = [];
  for (const r of reqs) if (r.requestDeleteRange) dels.push(interval(r.requestDeleteRange.key, r.requestDeleteRange.rangeEnd));
  const puts = new Set<string>();
  for (const r of reqs) {
    if (!r.requestTxn) continue;
    const then = checkIntervals(r.requestTxn.success ?? []);
    const otherwise = checkIntervals(r.requestTxn.failure ?? []);
    for (const k of then.puts) {
      if (puts.has(k) || deletes(dels, k)) throw ERR.duplicateKey();
      puts.add(k);
    }
    for (const k of otherwise.puts) {
      if ((puts.has(k) && !then.puts.has(k)) || deletes(dels, k)) throw ERR.duplicateKey();
      puts.add(k);
    }
    dels.push(...then.dels, ...otherwise.dels);
  }
  for (const r of reqs) {
    if (!r.requestPut) continue;
    const k = str(r.requestPut.key);
    if (puts.has(k) || deletes(dels, k)) throw ERR.duplicateKey();
    puts.add(k);
  }
  return { puts, dels };
}

/** Whether one of `dels` deletes `k`. */
function deletes(dels: readonly Interval[], k: string): boolean {
  if (dels.length === 0) return false;
  const one: Interval = { k, end: '' };
  for (const d of dels) if (overlaps(d, one)) return true;
  return false;
}

/** One write transaction: every change gets revision rev+1; reads inside it see the changes so far. */
export class Writer {
  readonly changes: Change[] = [];
  readonly rev: bigint;

  constructor(
    private readonly store: Store,
    private readonly cause: string,
  ) {
    this.rev = store.rev + 1n;
  }

  /** The revision a read inside this transaction answers with. */
  private get cur(): bigint {
    return this.changes.length > 0 ? this.rev : this.store.rev;
  }

  put(p: pb.PutRequest): pb.KeyValue | undefined {
    const s = this.store;
    const k = str(p.key);
    const prev = s.get(k);
    if ((p.ignoreValue || p.ignoreLease) && !prev) throw ERR.keyNotFound();
    const lease = p.ignoreLease ? prev!.lease : (p.lease ?? 0n);
    const kv: Kv = {
      k,
      key: prev ? prev.key : Buffer.from(k, 'latin1'),
      createRevision: prev ? prev.createRevision : this.rev,
      modRevision: this.rev,
      version: prev ? prev.version + 1n : 1n,
      value: p.ignoreValue ? prev!.value : p.value ? Buffer.from(p.value) : EMPTY,
      lease,
    };
    if (prev && prev.lease !== 0n) s.leases.get(prev.lease)?.keys.delete(k);
    if (lease !== 0n) s.leases.get(lease)?.keys.add(k);
    s.setKv(k, kv);
    this.changes.push({ type: 'put', k, rev: this.rev, kv, ...(prev ? { prev } : {}), cause: this.cause });
    return p.prevKv && prev ? toPb(prev) : undefined;
  }

  deleteRange(d: pb.DeleteRangeRequest): pb.DeleteRangeResponse {
    const s = this.store;
    const r = interval(d.key, d.rangeEnd);
    const keys = s.keysIn(r);
    const prevKvs: pb.KeyValue[] = [];
    for (const k of keys) {
      const prev = s.get(k)!;
      if (d.prevKv) prevKvs.push(toPb(prev));
      if (prev.lease !== 0n) s.leases.get(prev.lease)?.keys.delete(k);
      s.setKv(k, undefined);
      this.changes.push({ type: 'delete', k, rev: this.rev, prev, cause: this.cause });
    }
    const rev = keys.length > 0 || this.changes.length > 0 ? this.rev : s.rev;
    return { header: { revision: rev }, deleted: BigInt(keys.length), prevKvs };
  }

  txn(t: pb.TxnRequest, path: boolean[]): pb.TxnResponse {
    const ok = path.shift()!;
    const responses: pb.ResponseOp[] = [];
    for (const op of (ok ? t.success : t.failure) ?? []) {
      if (op.requestRange) responses.push({ responseRange: this.store.read(op.requestRange, this.cur, this.changes) });
      else if (op.requestPut) {
        const prevKv = this.put(op.requestPut);
        responses.push({ responsePut: { header: { revision: this.rev }, ...(prevKv ? { prevKv } : {}) } });
      } else if (op.requestDeleteRange) responses.push({ responseDeleteRange: this.deleteRange(op.requestDeleteRange) });
      else if (op.requestTxn) {
        const inner = this.txn(op.requestTxn, path);
        responses.push({ responseTxn: inner });
      } else responses.push({});
    }
    return { header: {}, succeeded: ok, responses };
  }
}
