// The seeded generator of differential sequences: KV, Txn (nested too), Lease and Watch calls over
// a universe of eight keys, with the options and compares the library sends, and the edges where
// etcd refuses (duplicate keys in a Txn, --max-txn-ops, compacted and future revisions, unknown
// leases, ignore_value with a value). The sequence depends on the seed alone.
import { Rng } from '../../src/testing/sim/rng.js';
import type {
  CompareSpec,
  DeleteSpec,
  Key,
  LeaseRef,
  OpSpec,
  PutSpec,
  RangeSpec,
  RevRef,
  Step,
  StepKind,
  TxnSpec,
  WatchSpec,
} from './steps.js';

/**
 * The keys a sequence writes (under the run's root). Eight, so that every range holds at most
 * twelve keys: Go sorts that few by insertion, which keeps ties in key order (etcd's Range sorts by
 * a target other than the key with sort.Sort, not a stable sort).
 */
export const KEYS: readonly Key[] = ['a', 'b', 'b/1', 'b/2', 'b/3', 'c', 'c/1', 'd'];
/** Prefixes for ranges, deletes and watches: '' is every key of the sequence, 'e' none. */
const PREFIXES: readonly Key[] = ['', 'b', 'b/', 'c', 'e'];
const VALUES: readonly string[] = ['', 'v1', 'v2', 'xyz'];
/** Lease ids the client chooses, few so that some are asked for twice. */
const CHOSEN_IDS: readonly number[] = [0x51, 0x52, 0x53];
/** Longer than any sequence runs: no lease expires during one (expiry is not compared). */
const TTLS: readonly number[] = [30, 45, 60, 90, 600];
/** Above etcd's MaxLeaseTTL (9,000,000,000 s): refused. */
const TTL_TOO_LARGE = 9_000_000_001;

/** One of `weights`' keys, drawn in proportion to its weight. */
function weighted<T extends string>(rng: Rng, weights: Readonly<Record<T, number>>): T {
  const entries = Object.entries(weights) as [T, number][];
  let r = rng.next() * entries.reduce((n, [, w]) => n + w, 0);
  for (const [k, w] of entries) if ((r -= w) < 0) return k;
  return entries[entries.length - 1]![0];
}

/** How often each call comes, relative to the others. */
const WEIGHTS: Readonly<Record<StepKind, number>> = {
  put: 14,
  get: 5,
  getPrefix: 5,
  range: 12,
  delete: 6,
  txn: 16,
  bigTxn: 2,
  leaseGrant: 6,
  leaseRevoke: 3,
  keepAliveOnce: 3,
  keepAlive: 3,
  timeToLive: 4,
  leases: 2,
  compact: 2,
  watch: 7,
  cancel: 3,
  status: 1,
};

/** The sequence of `steps` calls for `seed`: the same on every run and every side. */
export function generate(seed: number, steps = 40): Step[] {
  return new Generator(new Rng(seed, 'diff')).sequence(steps);
}

class Generator {
  private grants = 0;
  private watches = 0;

  constructor(private readonly rng: Rng) {}

  sequence(n: number): Step[] {
    const out: Step[] = [];
    // A few keys first, so that the reads and compares that follow find something.
    for (let i = 0; i < 3 && i < n; i++) out.push({ kind: 'put', key: this.rng.pick(KEYS), value: this.rng.pick(VALUES), lease: 'none' });
    while (out.length < n) out.push(this.step(weighted(this.rng, WEIGHTS)));
    return out;
  }

  private step(kind: StepKind): Step {
    const r = this.rng;
    switch (kind) {
      case 'put':
        return { kind, key: r.pick(KEYS), value: r.pick(VALUES), lease: this.lease() };
      case 'get':
        return { kind, key: r.pick(KEYS), ...(r.chance(0.3) ? { revision: this.readRevision() } : {}) };
      case 'getPrefix':
        return {
          kind,
          prefix: r.pick(PREFIXES),
          ...(r.chance(0.3) ? { revision: this.readRevision() } : {}),
          ...(r.chance(0.3) ? { limit: r.between(1, 3) } : {}),
        };
      case 'range':
        return { kind, range: this.range() };
      case 'delete':
        return r.chance(0.5) ? { kind, key: r.pick(PREFIXES), prefix: true } : { kind, key: r.pick([...KEYS, 'e']), prefix: false };
      case 'txn':
        return { kind, txn: this.txn(0, r.chance(0.75) ? new Set() : undefined) };
      case 'bigTxn':
        return { kind, compares: r.pick([0, 1, 2, 127, 128, 129]), ops: r.pick([1, 126, 127, 128, 129]), nested: r.chance(0.4) };
      case 'leaseGrant': {
        this.grants++;
        const ttl = r.chance(0.05) ? TTL_TOO_LARGE : r.pick(TTLS);
        return { kind, ttl, ...(r.chance(0.5) ? { id: r.pick(CHOSEN_IDS) } : {}) };
      }
      case 'leaseRevoke':
      case 'keepAliveOnce':
      case 'keepAlive':
        return { kind, lease: this.grantedLease() };
      case 'timeToLive':
        return { kind, lease: this.grantedLease(), keys: r.chance(0.6) };
      case 'leases':
      case 'status':
        return { kind };
      case 'compact':
        return {
          kind,
          revision: r.chance(0.8)
            ? { at: 'current', minus: r.between(0, 4) }
            : r.chance(0.5)
              ? { at: 'compacted', minus: 1 }
              : { at: 'future', plus: 1 },
          physical: r.chance(0.5),
        };
      case 'watch':
        this.watches++;
        return { kind, watch: this.watch() };
      case 'cancel':
        return { kind, watch: r.int(Math.max(1, this.watches)) };
    }
  }

  /** Mostly none or a granted one; now and then one never granted. */
  private lease(): LeaseRef {
    const r = this.rng;
    if (r.chance(0.05)) return 'unknown';
    return r.chance(0.55) ? 'none' : { grant: r.int(Math.max(1, this.grants)) };
  }

  private grantedLease(): LeaseRef {
    return this.rng.chance(0.1) ? 'unknown' : { grant: this.rng.int(Math.max(1, this.grants)) };
  }

  /** A revision to read at: recent, at or below the compaction, or not yet written. */
  private readRevision(): RevRef {
    const r = this.rng;
    const p = r.next();
    if (p < 0.6) return { at: 'current', minus: r.between(0, 6) };
    if (p < 0.8) return { at: 'compacted', minus: r.between(0, 1) };
    return { at: 'future', plus: r.between(1, 2) };
  }

  /** A create or mod revision to compare or filter with: one of the key's own most of the time. */
  private compareRevision(key: Key, field: 'create' | 'mod'): RevRef {
    const r = this.rng;
    const p = r.next();
    if (p < 0.5) return { at: 'seen', key, field };
    if (p < 0.7) return 0;
    return { at: 'current', minus: r.between(0, 4) };
  }

  private range(): RangeSpec {
    const r = this.rng;
    const spec: RangeSpec = r.chance(0.5)
      ? { key: r.pick(PREFIXES), end: 'prefix' }
      : r.chance(0.7)
        ? { key: r.pick(KEYS) }
        : { key: r.pick(KEYS), end: r.pick([...KEYS, 'e']) };
    if (r.chance(0.3)) spec.limit = r.between(1, 4);
    if (r.chance(0.4)) {
      spec.sortOrder = r.pick([0, 1, 2] as const);
      spec.sortTarget = r.pick([0, 1, 2, 3, 4] as const);
    }
    if (r.chance(0.1)) spec.countOnly = true;
    if (r.chance(0.25)) spec.keysOnly = true;
    const key = spec.key === '' ? r.pick(KEYS) : spec.key;
    if (r.chance(0.1)) spec.minCreate = this.compareRevision(key, 'create');
    if (r.chance(0.15)) spec.maxCreate = this.compareRevision(key, 'create');
    if (r.chance(0.1)) spec.minMod = this.compareRevision(key, 'mod');
    if (r.chance(0.1)) spec.maxMod = this.compareRevision(key, 'mod');
    if (r.chance(0.15)) spec.revision = this.readRevision();
    if (r.chance(0.2)) spec.serializable = true;
    return spec;
  }

  private compare(): CompareSpec {
    const r = this.rng;
    const key = r.chance(0.9) ? r.pick(KEYS) : 'e';
    const result = r.pick(['=', '!=', '<', '>'] as const);
    switch (r.pick(['create', 'create', 'mod', 'version', 'value', 'lease'] as const)) {
      case 'create':
        return { key, target: 'create', result, rev: this.compareRevision(key, 'create') };
      case 'mod':
        return { key, target: 'mod', result, rev: this.compareRevision(key, 'mod') };
      case 'version':
        return { key, target: 'version', result, version: r.between(0, 3) };
      case 'value':
        return { key, target: 'value', result, value: r.pick(VALUES) };
      case 'lease': {
        // Lease ids differ between the sides (each picks its own), so only whether a key has a
        // lease can be ordered: `<` and `>` compare with no lease (0).
        const lease = this.lease();
        return { key, target: 'lease', result, lease: result === '=' || result === '!=' ? lease : 'none' };
      }
    }
  }

  /**
   * A Txn of up to three compares and three operations per branch, nested to depth 2. With
   * `written` (most Txns), no two writes of the tree meet, so etcd applies it; without, writes may
   * meet and etcd refuses those that do ("duplicate key given in txn request").
   */
  private txn(depth: number, written: Set<Key> | undefined): TxnSpec {
    const r = this.rng;
    const compares = Array.from({ length: r.int(4) }, () => this.compare());
    const ops = (): OpSpec[] => Array.from({ length: r.between(depth === 0 ? 1 : 0, 3) }, () => this.op(depth, written));
    return { compares, success: ops(), failure: r.chance(0.6) ? ops() : [] };
  }

  private op(depth: number, written: Set<Key> | undefined): OpSpec {
    const r = this.rng;
    const p = r.next();
    if (p < 0.2 && depth < 2) return { txn: this.txn(depth + 1, written) };
    if (p < 0.5) return { range: this.range() };
    if (p < 0.65) {
      const del = this.delete(written);
      if (del) return { delete: del };
    }
    const put = this.put(written);
    return put ? { put } : { range: this.range() };
  }

  /** A put on a key no other write of the Txn touches (when `written` is kept); none if all are taken. */
  private put(written: Set<Key> | undefined): PutSpec | undefined {
    const r = this.rng;
    const free = written ? KEYS.filter((k) => !written.has(k)) : KEYS;
    if (free.length === 0) return undefined;
    const key = r.pick(free);
    written?.add(key);
    const put: PutSpec = { key, value: r.pick(VALUES), lease: this.lease() };
    if (r.chance(0.3)) put.prevKv = true;
    if (r.chance(0.1)) {
      put.ignoreValue = true;
      if (r.chance(0.8)) put.value = '';
    }
    if (r.chance(0.1)) {
      put.ignoreLease = true;
      if (r.chance(0.8)) put.lease = 'none';
    }
    return put;
  }

  private delete(written: Set<Key> | undefined): DeleteSpec | undefined {
    const r = this.rng;
    const spec: DeleteSpec = r.chance(0.4) ? { key: r.pick(PREFIXES), end: 'prefix' } : { key: r.pick([...KEYS, 'e']) };
    if (r.chance(0.4)) spec.prevKv = true;
    if (!written) return spec;
    const covered = KEYS.filter((k) => (spec.end === 'prefix' ? k.startsWith(spec.key) : k === spec.key));
    if (covered.some((k) => written.has(k))) return undefined;
    for (const k of covered) written.add(k);
    return spec;
  }

  private watch(): WatchSpec {
    const r = this.rng;
    const prefix = r.chance(0.6);
    const spec: WatchSpec = {
      key: prefix ? r.pick(PREFIXES) : r.pick(KEYS),
      prefix,
      prevKv: r.chance(0.4),
      noPut: r.chance(0.15),
      noDelete: r.chance(0.15),
    };
    const p = r.next();
    if (p < 0.4) spec.start = { at: 'current', minus: r.between(0, 8) };
    else if (p < 0.55) spec.start = { at: 'future', plus: r.between(1, 3) };
    else if (p < 0.65) spec.start = { at: 'compacted', minus: r.between(0, 1) };
    return spec;
  }
}
