// Runs one differential sequence (steps.ts) against a Client, through the library's own calls, and
// records a transcript that two sides can be compared by: every answer normalised (revisions kept
// exactly; cluster and member ids, raft terms, sizes dropped; lease ids named by their order of
// grant; a remaining TTL judged against the time since the lease was granted or renewed; errors as
// class, code, gRPC status and etcd's own words), and every watch's batches in order, each batch as
// etcd sent it.
//
// Watch batches are made deterministic by a fence: a key outside the sequence's keys that the
// runner writes after every step that moved the revision while a watch is open, and that a watch of
// its own follows. etcd sends all of one gRPC stream's watch responses through one channel in
// revision order, so once the fence's event is in, every watch on the stream has received its
// events up to it, and nothing else was written meanwhile. A watch that starts in the past is caught
// up by etcd's 100 ms loop in one batch (with the revision of the moment it catches up): after
// creating one, the runner writes nothing until a second, throwaway watch from the past on the
// fence has been caught up too (the loop catches up every watch waiting when it runs).
import {
  type Client,
  CompactedError,
  EtcdError,
  type RangeResult,
  type TxnResult,
  type Watch,
  type WatchBatch,
  prefixEnd,
} from '../../src/index.js';
import type * as pb from '../../src/proto/etcd.js';
import { TransportError } from '../../src/client/transport/transport.js';
import type { CompareSpec, DeleteSpec, Key, LeaseRef, OpSpec, PutSpec, RangeSpec, RevRef, Step, TxnSpec, WatchSpec } from './steps.js';

/** Where a sequence's keys live. */
export const ROOT = 'k/';
/** The runner's own key (outside ROOT): see the top of this file. */
export const FENCE = 'z/fence';
/** A lease id the sequences never grant. */
export const UNKNOWN_LEASE = 0x7e57n;
/** A watch that has not delivered what the fence proves it was sent: the stream stalled. */
const FENCE_WAIT_MS = 10_000;

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** One line of a transcript: a call (refs resolved) and what came back, or a watch's new batches. */
export interface Entry {
  step: number;
  call: Json;
  answer: Json;
}

const enc = (s: string): Buffer => Buffer.from(s, 'utf8');
const num = (v: bigint | undefined): number => Number(v ?? 0n);

/** Runs `steps` against `client` (fresh etcd, or a fresh simulator) and returns its transcript. */
export async function runSequence(client: Client, steps: readonly Step[]): Promise<Entry[]> {
  const run = new Runner(client);
  try {
    await run.start();
    for (let i = 0; i < steps.length; i++) await run.step(i, steps[i]!);
    await run.finish(steps.length);
    return run.entries;
  } finally {
    run.close();
  }
}

/** A watch of the sequence: what it delivered, and how much of that entries have shown. */
interface Recorded {
  n: number;
  watch: Watch;
  batches: Json[];
  reported: number;
  readonly end: Json | undefined;
  endReported: boolean;
}

/** Waits for the fence's event at `rev`. */
interface Waiter {
  rev: bigint;
  resolve: () => void;
}

class Runner {
  readonly entries: Entry[] = [];
  /** The store's revision as last seen in an answer. */
  private current = 0n;
  private compacted = 0n;
  /** The fence's last revision: always above the compaction (see compact). */
  private fenceRev = 0n;
  private fenceWrites = 0;
  private fence?: Watch;
  /** The newest revision of the fence its watch delivered. */
  private fenceSeen = 0n;
  private fenceWaiters: Waiter[] = [];
  private readonly grants: bigint[] = [];
  private readonly labels = new Map<bigint, string>();
  /** When each lease was last granted or renewed (performance.now()). */
  private readonly renewedAt = new Map<bigint, number>();
  /** The create and mod revisions last seen for each key of the sequence. */
  private readonly seen = new Map<Key, { create: bigint; mod: bigint }>();
  private readonly watches: Recorded[] = [];
  /** The revision up to which every open watch is known to have received its events. */
  private flushedTo = 0n;

  constructor(private readonly client: Client) {}

  async start(): Promise<void> {
    this.fenceRev = (await this.client.put(FENCE, '0')).revision;
    this.current = this.fenceRev;
    this.fence = this.client.watchInto(
      FENCE,
      {},
      {
        push: (b) => this.onFence(b),
        end: () => {},
      },
    );
    await this.fence.created;
    this.flushedTo = this.current;
  }

  close(): void {
    this.fence?.cancel();
    for (const w of this.watches) w.watch.cancel();
  }

  async step(i: number, step: Step): Promise<void> {
    const entry: Entry = { step: i, call: null, answer: null };
    let header: bigint | undefined;
    try {
      const done = await this.call(step, (call) => (entry.call = call));
      entry.answer = done.answer;
      header = done.revision;
    } catch (err) {
      if (!(err instanceof EtcdError)) throw err;
      entry.answer = errorJson(err);
    }
    if (header !== undefined) this.current = max(this.current, header);
    else if (step.kind !== 'cancel') {
      // The answer has no header (or was refused): learn the revision with a read of the fence.
      const r = await this.client.range({ key: enc(FENCE) });
      this.current = r.header.revision;
      if (typeof entry.answer === 'object' && entry.answer !== null && !Array.isArray(entry.answer))
        entry.answer.revisionAfter = num(this.current);
    }
    this.entries.push(entry);
    if (step.kind === 'compact') await this.writeFence();
    if (this.watches.some((w) => w.end === undefined) && this.current > this.flushedTo) await this.flush();
    this.report(i);
  }

  async finish(n: number): Promise<void> {
    for (const w of this.watches) w.watch.cancel();
    this.report(n);
  }

  // ---- the calls ------------------------------------------------------------------------------

  private async call(step: Step, said: (call: Json) => void): Promise<{ answer: Json; revision?: bigint }> {
    const c = this.client;
    switch (step.kind) {
      case 'put': {
        const lease = this.leaseId(step.lease);
        said({ put: ROOT + step.key, value: step.value, lease: this.leaseName(lease) });
        const h = await c.put(ROOT + step.key, step.value, { lease });
        return { answer: { rev: num(h.revision) }, revision: h.revision };
      }
      case 'get': {
        const revision = step.revision === undefined ? 0n : this.rev(step.revision);
        said({ get: ROOT + step.key, revision: num(revision) });
        const kv = await c.get(ROOT + step.key, { revision });
        if (kv) this.saw(kv);
        return { answer: { kv: kv ? this.kv(kv) : null } };
      }
      case 'getPrefix': {
        const revision = step.revision === undefined ? 0n : this.rev(step.revision);
        said({ getPrefix: ROOT + step.prefix, revision: num(revision), limit: step.limit ?? 0 });
        const r = await c.getPrefix(ROOT + step.prefix, { revision, ...(step.limit ? { limit: step.limit } : {}) });
        return { answer: this.rangeJson(r), revision: r.header.revision };
      }
      case 'range': {
        const request = this.rangeRequest(step.range);
        said({ range: this.requestJson(request) });
        const r = await c.range(request);
        return { answer: this.rangeJson(r), revision: r.header.revision };
      }
      case 'delete': {
        said({ delete: ROOT + step.key, prefix: step.prefix });
        const n = await c.delete(ROOT + step.key, { prefix: step.prefix });
        return { answer: { deleted: num(n) } };
      }
      case 'txn': {
        const request = this.txnRequest(step.txn);
        said({ txn: this.requestJson(request) });
        const r = await c.txn(request);
        return { answer: this.txnJson(r), revision: r.header.revision };
      }
      case 'bigTxn': {
        const request = bigTxn(step.compares, step.ops, step.nested);
        said({ txn: { compares: step.compares, reads: step.ops, nested: step.nested } });
        const r = await c.txn(request);
        return { answer: this.txnJson(r), revision: r.header.revision };
      }
      case 'leaseGrant': {
        const id = step.id === undefined ? undefined : BigInt(step.id);
        said({ leaseGrant: step.ttl, id: id === undefined ? null : `0x${id.toString(16)}` });
        const g = await c.leaseGrant(step.ttl, id === undefined ? {} : { id });
        if (!this.grants.includes(g.id)) this.grants.push(g.id);
        // A lease granted before and not revoked since (a chosen id asked for again) keeps its clock.
        if (!this.renewedAt.has(g.id)) this.renewedAt.set(g.id, performance.now());
        return { answer: { lease: this.leaseName(g.id), ttl: g.ttl } };
      }
      case 'leaseRevoke': {
        const id = this.leaseId(step.lease);
        said({ leaseRevoke: this.leaseName(id) });
        await c.leaseRevoke(id);
        this.renewedAt.delete(id);
        return { answer: { revoked: true } };
      }
      case 'keepAliveOnce': {
        const id = this.leaseId(step.lease);
        said({ keepAliveOnce: this.leaseName(id) });
        const { ttl } = await c.leaseKeepAliveOnce(id);
        this.renewedAt.set(id, performance.now());
        return { answer: { ttl } };
      }
      case 'keepAlive': {
        const id = this.leaseId(step.lease);
        said({ keepAlive: this.leaseName(id) });
        const ttl = await this.renewOnSharedStream(id);
        if (ttl > 0n) this.renewedAt.set(id, performance.now());
        return { answer: { ttl: num(ttl) } };
      }
      case 'timeToLive': {
        const id = this.leaseId(step.lease);
        said({ timeToLive: this.leaseName(id), keys: step.keys });
        const asked = performance.now();
        const t = await c.leaseTimeToLive(id, { keys: step.keys });
        return {
          answer: {
            ttl: this.remaining(id, t.ttl, t.grantedTtl, asked),
            grantedTtl: t.grantedTtl,
            keys: t.keys.map((k) => k.toString()).sort(),
          },
        };
      }
      case 'leases': {
        said('leases');
        const ids = await c.leaseLeases();
        return { answer: { leases: ids.map((id) => this.leaseName(id)).sort(byText) } };
      }
      case 'compact': {
        const revision = this.rev(step.revision);
        said({ compact: num(revision), physical: step.physical });
        await c.compact(revision, { physical: step.physical });
        this.compacted = revision;
        return { answer: { compacted: num(revision) } };
      }
      case 'watch':
        return this.watch(step.watch, said);
      case 'cancel': {
        const w = this.watches.length === 0 ? undefined : this.watches[step.watch % this.watches.length]!;
        said({ cancel: w ? `watch #${w.n}` : null });
        if (!w) return { answer: 'no watch' };
        const open = w.end === undefined;
        w.watch.cancel();
        return { answer: { wasOpen: open } };
      }
      case 'status': {
        said('status');
        const s = await c.status();
        return {
          answer: { rev: num(s.header.revision), version: s.version, isLearner: s.isLearner, alarms: s.alarms },
          revision: s.header.revision,
        };
      }
    }
  }

  /** One renewal on the client's shared keep-alive stream, as a Session sends it. */
  private renewOnSharedStream(id: bigint): Promise<bigint> {
    const hub = this.client.keepAlives;
    const answered = new Promise<bigint>((resolve) => {
      hub.register(id, { onRenewed: (ttl) => resolve(ttl), onClosed: () => resolve(-1n) });
      hub.renew(id);
    });
    return this.within(answered, 'the answer on the shared keep-alive stream').finally(() => hub.unregister(id));
  }

  private async watch(spec: WatchSpec, said: (call: Json) => void): Promise<{ answer: Json; revision?: bigint }> {
    const start = spec.start === undefined ? undefined : this.rev(spec.start);
    const call: Json = {
      watch: ROOT + spec.key,
      prefix: spec.prefix,
      start: start === undefined ? 'now' : num(start),
      prevKv: spec.prevKv,
      noPut: spec.noPut,
      noDelete: spec.noDelete,
    };
    said(call);
    const batches: Json[] = [];
    let end: Json | undefined;
    const watch = this.client.watchInto(
      ROOT + spec.key,
      { prefix: spec.prefix, startRevision: start, prevKv: spec.prevKv, noPut: spec.noPut, noDelete: spec.noDelete },
      {
        push: (b) => batches.push(this.batchJson(b)),
        end: (err) => (end = err === undefined ? 'cancelled' : errorJson(err)),
      },
    );
    const rec: Recorded = {
      n: this.watches.length,
      watch,
      batches,
      reported: 0,
      get end() {
        return end;
      },
      endReported: false,
    };
    this.watches.push(rec);
    const created = await rec.watch.created;
    // From the past: etcd's catch-up loop sends it what it missed, with nothing written meanwhile;
    // then the fence, so that the catch-up is in before the step's entry.
    if (start !== undefined && start <= created) {
      await this.caughtUp();
      await this.flush();
    }
    return { answer: { watch: `#${rec.n}`, created: num(created) }, revision: created };
  }

  /** Returns once etcd's catch-up loop has run for every watch created so far (see the top of the file). */
  private async caughtUp(): Promise<void> {
    let seen!: () => void;
    const got = new Promise<void>((resolve) => (seen = resolve));
    const probe = this.client.watchInto(FENCE, { startRevision: this.fenceRev }, { push: () => seen(), end: () => seen() });
    try {
      await this.within(got, 'the catch-up of a watch from the past');
    } finally {
      probe.cancel();
    }
  }

  /** Writes the fence and waits for its event: every open watch then has its events up to it. */
  private async flush(): Promise<void> {
    const rev = await this.writeFence();
    // The event may come before the put's answer.
    if (this.fenceSeen < rev) {
      const seen = new Promise<void>((resolve) => this.fenceWaiters.push({ rev, resolve }));
      await this.within(seen, `the fence's event at revision ${rev}`);
    }
    this.flushedTo = rev;
  }

  private async writeFence(): Promise<bigint> {
    const h = await this.client.put(FENCE, String(++this.fenceWrites));
    this.fenceRev = this.current = h.revision;
    return h.revision;
  }

  private onFence(b: WatchBatch): void {
    for (const e of b.events) this.fenceSeen = max(this.fenceSeen, e.kv.modRevision);
    this.fenceWaiters = this.fenceWaiters.filter((w) => !(w.rev <= this.fenceSeen && (w.resolve(), true)));
  }

  /** `p`, or an error once FENCE_WAIT_MS pass: a stalled stream ends the run rather than hanging it. */
  private async within<T>(p: Promise<T>, what: string): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        p,
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`differential run: ${what} did not come within ${FENCE_WAIT_MS} ms (a stalled stream?)`)),
            FENCE_WAIT_MS,
          );
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** An entry for each watch's batches and end that no entry has shown yet. */
  private report(step: number): void {
    for (const w of this.watches) {
      const batches = w.batches.slice(w.reported);
      w.reported = w.batches.length;
      const ended = w.end !== undefined && !w.endReported;
      if (ended) w.endReported = true;
      if (batches.length === 0 && !ended) continue;
      this.entries.push({ step, call: `watch #${w.n}`, answer: { batches, ...(ended ? { end: w.end! } : {}) } });
    }
  }

  // ---- requests from specs --------------------------------------------------------------------

  /** A revision reference as this side's answers resolve it. */
  private rev(ref: RevRef): bigint {
    if (ref === 0) return 0n;
    switch (ref.at) {
      case 'current':
        return max(1n, this.current - BigInt(ref.minus));
      case 'future':
        return this.current + BigInt(ref.plus);
      case 'compacted':
        return max(1n, this.compacted - BigInt(ref.minus));
      case 'seen':
        return this.seen.get(ref.key)?.[ref.field] ?? 0n;
    }
  }

  private leaseId(ref: LeaseRef): bigint {
    if (ref === 'none') return 0n;
    if (ref === 'unknown' || this.grants.length === 0) return UNKNOWN_LEASE;
    return this.grants[ref.grant % this.grants.length]!;
  }

  /** A lease by its order of grant (L1, L2, ...): etcd picks ids at random. */
  private leaseName(id: bigint): Json {
    if (id === 0n) return 0;
    if (id === UNKNOWN_LEASE) return 'unknown';
    const known = this.labels.get(id);
    if (known) return known;
    if (!this.grants.includes(id)) return `never granted: ${id.toString(16)}`;
    const name = `L${this.labels.size + 1}`;
    this.labels.set(id, name);
    return name;
  }

  private rangeRequest(spec: RangeSpec): pb.RangeRequest {
    const key = ROOT + spec.key;
    return {
      key: enc(key),
      rangeEnd: spec.end === undefined ? Buffer.alloc(0) : spec.end === 'prefix' ? prefixEnd(key) : enc(ROOT + spec.end),
      limit: BigInt(spec.limit ?? 0),
      sortOrder: spec.sortOrder ?? 0,
      sortTarget: spec.sortTarget ?? 0,
      countOnly: spec.countOnly ?? false,
      keysOnly: spec.keysOnly ?? false,
      minCreateRevision: spec.minCreate === undefined ? 0n : this.rev(spec.minCreate),
      maxCreateRevision: spec.maxCreate === undefined ? 0n : this.rev(spec.maxCreate),
      minModRevision: spec.minMod === undefined ? 0n : this.rev(spec.minMod),
      maxModRevision: spec.maxMod === undefined ? 0n : this.rev(spec.maxMod),
      revision: spec.revision === undefined ? 0n : this.rev(spec.revision),
      serializable: spec.serializable ?? false,
    };
  }

  private txnRequest(spec: TxnSpec): pb.TxnRequest {
    return {
      compare: spec.compares.map((c) => this.compare(c)),
      success: spec.success.map((o) => this.op(o)),
      failure: spec.failure.map((o) => this.op(o)),
    };
  }

  private compare(c: CompareSpec): pb.Compare {
    const result = { '=': 0, '>': 1, '<': 2, '!=': 3 }[c.result];
    const key = enc(ROOT + c.key);
    switch (c.target) {
      case 'version':
        return { key, result, target: 0, version: BigInt(c.version ?? 0) };
      case 'create':
        return { key, result, target: 1, createRevision: this.rev(c.rev ?? 0) };
      case 'mod':
        return { key, result, target: 2, modRevision: this.rev(c.rev ?? 0) };
      case 'value':
        return { key, result, target: 3, value: enc(c.value ?? '') };
      case 'lease':
        return { key, result, target: 4, lease: this.leaseId(c.lease ?? 'none') };
    }
  }

  private op(o: OpSpec): pb.RequestOp {
    if ('put' in o) return { requestPut: this.put(o.put) };
    if ('range' in o) return { requestRange: this.rangeRequest(o.range) };
    if ('delete' in o) return { requestDeleteRange: deleteRequest(o.delete) };
    return { requestTxn: this.txnRequest(o.txn) };
  }

  private put(p: PutSpec): pb.PutRequest {
    return {
      key: enc(ROOT + p.key),
      value: enc(p.value),
      lease: this.leaseId(p.lease),
      prevKv: p.prevKv ?? false,
      ignoreValue: p.ignoreValue ?? false,
      ignoreLease: p.ignoreLease ?? false,
    };
  }

  // ---- answers, normalised --------------------------------------------------------------------

  private saw(kv: pb.KeyValue): void {
    const key = (kv.key ?? Buffer.alloc(0)).toString();
    if (key.startsWith(ROOT)) this.seen.set(key.slice(ROOT.length), { create: kv.createRevision ?? 0n, mod: kv.modRevision ?? 0n });
  }

  private kv(kv: pb.KeyValue): Json {
    return {
      key: (kv.key ?? Buffer.alloc(0)).toString(),
      value: (kv.value ?? Buffer.alloc(0)).toString(),
      create: num(kv.createRevision),
      mod: num(kv.modRevision),
      version: num(kv.version),
      lease: this.leaseName(kv.lease ?? 0n),
    };
  }

  private rangeJson(r: RangeResult | pb.RangeResponse, inner = false): Json {
    for (const kv of r.kvs ?? []) this.saw(kv);
    return {
      ...headerJson(r.header, inner),
      kvs: (r.kvs ?? []).map((kv) => this.kv(kv)),
      more: r.more ?? false,
      count: num(r.count),
    };
  }

  private txnJson(r: TxnResult | pb.TxnResponse, inner = false): Json {
    const responses = (r.responses ?? []).map((op) => this.responseJson(op));
    return { ...headerJson(r.header, inner), succeeded: r.succeeded ?? false, responses: runs(responses) };
  }

  private responseJson(op: pb.ResponseOp): Json {
    if (op.responseRange) return { range: this.rangeJson(op.responseRange, true) };
    if (op.responsePut) {
      const p = op.responsePut;
      return { put: { ...headerJson(p.header, true), ...(p.prevKv ? { prevKv: this.kv(p.prevKv) } : {}) } };
    }
    if (op.responseDeleteRange) {
      const d = op.responseDeleteRange;
      return { delete: { ...headerJson(d.header, true), deleted: num(d.deleted), prevKvs: (d.prevKvs ?? []).map((kv) => this.kv(kv)) } };
    }
    if (op.responseTxn) return { txn: this.txnJson(op.responseTxn, true) };
    return 'empty response';
  }

  /** A request as the transcript shows it: keys and values as text, int64s as numbers, leases by name, defaults left out. */
  private requestJson(v: unknown): Json {
    if (Buffer.isBuffer(v)) return v.toString();
    if (typeof v === 'bigint') return Number(v);
    if (Array.isArray(v)) return v.map((x) => this.requestJson(x));
    if (v !== null && typeof v === 'object') {
      const out: { [key: string]: Json } = {};
      for (const [k, x] of Object.entries(v)) {
        if (x === undefined || x === false || x === 0n || x === 0 || (Buffer.isBuffer(x) && x.length === 0)) continue;
        out[k] = k === 'lease' && typeof x === 'bigint' ? this.leaseName(x) : this.requestJson(x);
      }
      return out;
    }
    return v as Json;
  }

  private batchJson(b: WatchBatch): Json {
    return {
      rev: num(b.revision),
      events: b.events.map((e) => ({ type: e.type, kv: this.kv(e.kv), ...(e.prevKv ? { prevKv: this.kv(e.prevKv) } : {}) })),
    };
  }

  /**
   * A remaining TTL: 'fresh' when it is what the time since the lease was granted or renewed
   * explains (etcd rounds down, so one second less right after), else the number.
   */
  private remaining(id: bigint, ttl: number, granted: number, asked: number): Json {
    if (ttl < 0) return ttl;
    const since = this.renewedAt.get(id);
    if (since === undefined) return ttl;
    const slack = 1 + Math.ceil((asked - since) / 1000);
    return ttl <= granted && ttl >= granted - slack ? 'fresh' : ttl;
  }
}

function deleteRequest(d: DeleteSpec): pb.DeleteRangeRequest {
  const key = ROOT + d.key;
  return {
    key: enc(key),
    rangeEnd: d.end === undefined ? Buffer.alloc(0) : d.end === 'prefix' ? prefixEnd(key) : enc(ROOT + d.end),
    prevKv: d.prevKv ?? false,
  };
}

/**
 * A Txn around --max-txn-ops (128 by default): `compares` compares that hold, and `ops` reads of
 * one key, either in the Txn itself or in one Txn nested in it.
 */
function bigTxn(compares: number, ops: number, nested: boolean): pb.TxnRequest {
  const key = enc(`${ROOT}a`);
  const compare: pb.Compare[] = Array.from({ length: compares }, () => ({ key, target: 0, result: 2, version: 1000n }));
  const reads: pb.RequestOp[] = Array.from({ length: ops }, () => ({ requestRange: { key } }));
  return { compare, success: nested ? [{ requestTxn: { compare: [], success: reads, failure: [] } }] : reads, failure: [] };
}

/** A header as the transcript keeps it: the revision (inside a Txn, only when etcd filled it in). */
function headerJson(h: pb.ResponseHeader | undefined, inner: boolean): { rev?: number } {
  const rev = num(h?.revision);
  return inner && rev === 0 ? {} : { rev };
}

/** An error as class, code, gRPC status and etcd's words (the gRPC message), never the time it took. */
export function errorJson(err: unknown): Json {
  if (!(err instanceof EtcdError)) return { thrown: err instanceof Error ? `${err.name}: ${err.message}` : String(err) };
  const cause = err.cause instanceof TransportError ? err.cause : undefined;
  return {
    error: err.name,
    code: err.code,
    grpc: err.grpcCode ?? null,
    etcd: cause?.fromServer ? cause.details : null,
    ...(err instanceof CompactedError && err.compactRevision > 0n ? { compactRevision: num(err.compactRevision) } : {}),
  };
}

/** Repeated answers (a Txn of 128 reads) as one with a count. */
function runs(items: Json[]): Json[] {
  const out: Json[] = [];
  let last = '';
  let count = 0;
  const push = (): void => {
    if (count > 0) out.push(count === 1 ? JSON.parse(last) : { times: count, each: JSON.parse(last) });
  };
  for (const item of items) {
    const s = JSON.stringify(item);
    if (s === last) count++;
    else {
      push();
      last = s;
      count = 1;
    }
  }
  push();
  return out;
}

const max = (a: bigint, b: bigint): bigint => (a > b ? a : b);
const byText = (a: Json, b: Json): number => String(a).localeCompare(String(b));
