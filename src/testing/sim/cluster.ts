// The simulated etcd cluster: members with a Raft leader (elected, deposed, crashed, restarted),
// one store that the leader applies at once and followers apply after a lag, the gRPC services the
// library calls (answered as etcd's v3rpc layer answers them), Watch and LeaseKeepAlive streams,
// and lease expiry on the leader's clock. Raft itself is not modelled: a write is committed and
// applied at the instant it reaches a member with a leader.
import * as pb from '../../proto/etcd.js';
import type { Rng } from './rng.js';
import { type Change, ERR, EtcdFailure, type Profile, type Revision, Store, toPb } from './store.js';
import type { VirtualTime } from './time.js';
import type { Trace } from './trace.js';

const UNAVAILABLE = 14;
const UNIMPLEMENTED = 12;
export const NO_LEADER = () => new EtcdFailure(UNAVAILABLE, 'etcdserver: no leader');
const CLUSTER_ID = 0x5e7a_11c0_ffee_0001n;
/** etcd's watch catch-up loop period (watchResyncPeriod). */
const SYNC_MS = 100;
/** The leader's lessor looks for expired leases this often. */
const EXPIRY_CHECK_MS = 500;
/** A member cancels its `hasleader` streams after this long without a leader (3 election timeouts). */
const NO_LEADER_CANCEL_MS = 3000;
/** Lessor.Promote extends every lease by the election timeout. */
const PROMOTE_EXTEND_MS = 1000;

/** Where a server stream's answers go (the network delivers them to the client). */
export interface StreamSink<Res> {
  send(res: Res): void;
  fail(err: EtcdFailure): void;
}

/** A server side of a bidi stream. */
export interface ServerStream<Req> {
  receive(req: Req): void;
  /** The client cancelled it or the connection went. */
  close(): void;
  /** A Watch stream: the server cancels every watch on it, with `reason` (the stream stays open). */
  cancelAll?(reason: string): void;
}

export class Member {
  up = true;
  /** The highest revision this member has applied (the leader: the store's). */
  applied = 1n;
  /** Extra apply delay while a "follower behind" fault lasts, until `lagUntil`. */
  lagMs = 0;
  lagUntil = 0;
  readonly watchStreams = new Set<WatchStream>();
  readonly keepAliveStreams = new Set<KeepAliveStream>();
  /** When this member lost its leader (undefined: it has one). */
  noLeaderSince: number | undefined;
  /** Revisions waiting to be applied here, in order. */
  readonly backlog: Revision[] = [];
  applyTimer = false;
  syncPhase = 1;
  syncArmed = false;

  constructor(
    readonly index: number,
    readonly id: bigint,
    readonly name: string,
    readonly endpoint: string,
  ) {}
}

export interface ClusterOptions {
  members: number;
  profile: Profile;
  rng: Rng;
  time: VirtualTime;
  trace: Trace;
}

export class Cluster {
  readonly store: Store;
  readonly members: Member[];
  leader = 0;
  term = 2n;
  private readonly rng: Rng;
  private readonly time: VirtualTime;
  private readonly trace: Trace;
  /** Called with each change of each revision (the oracle watches the store through this). */
  onChange?: (c: Change) => void;
  /** Told when the cluster loses its leader (false) and when it elects one (true), for the oracle. */
  onLeader?: (elected: boolean) => void;
  private stopped = false;
  private expiryPhase = 1;
  /** When the armed expiry turn is (0: none). */
  private expiryAt = 0;

  constructor(readonly options: ClusterOptions) {
    this.rng = options.rng;
    this.time = options.time;
    this.trace = options.trace;
    this.store = new Store(options.profile);
    this.members = Array.from(
      { length: options.members },
      (_, i) => new Member(i, 0x8e9e_05c5_2164_6940n + BigInt(i) * 0x1111n, `sim-${i + 1}`, `sim-${i + 1}:2379`),
    );
    this.store.onRevision = (r) => this.committed(r);
  }

  get profile(): Profile {
    return this.store.profile;
  }

  /**
   * Starts the server's own loops (lease expiry every 500 ms, each member's watch catch-up every
   * 100 ms), each on a grid with a seeded phase. A loop's timer is armed only when it has work at
   * its next turn, which changes nothing but the number of idle steps.
   */
  start(): void {
    this.expiryPhase = 1 + this.rng.int(EXPIRY_CHECK_MS);
    for (const m of this.members) m.syncPhase = 1 + this.rng.int(SYNC_MS);
  }

  /** The first turn of a loop with `period` and `phase` at or after `t`. */
  private static turn(t: number, period: number, phase: number): number {
    return phase + Math.ceil(Math.max(0, t - phase) / period) * period;
  }

  /** Arms the expiry loop's turn for the earliest lease expiry (if no earlier turn is armed). */
  armExpiry(): void {
    if (this.stopped || this.store.leases.size === 0) return;
    let first = Number.POSITIVE_INFINITY;
    for (const l of this.store.leases.values()) first = Math.min(first, l.expiry);
    const at = Cluster.turn(Math.max(first, this.now() + 1), EXPIRY_CHECK_MS, this.expiryPhase);
    if (this.expiryAt <= at && this.expiryAt > this.now()) return;
    this.expiryAt = at;
    this.server(() =>
      setTimeout(() => {
        if (this.expiryAt !== at) return;
        this.expiryAt = 0;
        this.expireLeases();
        this.armExpiry();
      }, at - this.now()),
    );
  }

  /** Arms `m`'s catch-up loop for its next turn. */
  armSync(m: Member): void {
    if (this.stopped || m.syncArmed) return;
    m.syncArmed = true;
    const at = Cluster.turn(this.now() + 1, SYNC_MS, m.syncPhase);
    this.server(() =>
      setTimeout(() => {
        m.syncArmed = false;
        if (!m.up) return;
        let more = false;
        for (const s of m.watchStreams) more = s.sync() || more;
        if (more) this.armSync(m);
      }, at - this.now()),
    );
  }

  /** Stops the server's loops so that the clock can run dry. */
  stop(): void {
    this.stopped = true;
  }

  /** Runs `fn` outside every client process. */
  server<T>(fn: () => T): T {
    return this.time.as(undefined, fn);
  }

  now(): number {
    return performance.now();
  }

  hasLeader(): boolean {
    return this.leader >= 0;
  }

  header(m: Member, revision?: bigint): pb.ResponseHeader {
    return { clusterId: CLUSTER_ID, memberId: m.id, revision: revision ?? this.store.rev, raftTerm: this.term };
  }

  // ---- replication -------------------------------------------------------------------------------

  private committed(r: Revision): void {
    for (const c of r.changes) {
      this.trace.add(`rev ${r.rev} ${c.type} ${c.k}${c.type === 'put' ? ` lease ${c.kv!.lease.toString(16)}` : ''}`);
      this.onChange?.(c);
    }
    for (const m of this.members) {
      if (m.index === this.leader) {
        this.apply(m, r);
        continue;
      }
      m.backlog.push(r);
      this.scheduleApply(m);
    }
  }

  private scheduleApply(m: Member): void {
    if (m.applyTimer || m.backlog.length === 0 || !m.up) return;
    m.applyTimer = true;
    const lag = this.now() < m.lagUntil ? m.lagMs : 0;
    this.time.after(undefined, 1 + this.rng.int(3) + lag, () => {
      m.applyTimer = false;
      if (!m.up) return;
      const r = m.backlog.shift();
      if (r) this.apply(m, r);
      this.scheduleApply(m);
    });
  }

  private apply(m: Member, r: Revision): void {
    if (r.rev <= m.applied) return;
    m.applied = r.rev;
    for (const s of m.watchStreams) s.notify(r);
  }

  /** A follower catches up at once (restart, or becoming leader). */
  private catchUp(m: Member): void {
    const backlog = m.backlog.splice(0);
    for (const r of backlog) this.apply(m, r);
    m.applied = this.store.rev;
  }

  // ---- unary calls ---------------------------------------------------------------------------------

  /** Answers one unary call that reached member `m`; throws an EtcdFailure for a gRPC error. */
  unary(m: Member, path: string, req: unknown, hasLeader: boolean, cause: string): unknown {
    if (hasLeader && !this.hasLeader()) throw NO_LEADER();
    const name = path.slice(path.lastIndexOf('/') + 1);
    const s = this.store;
    switch (name) {
      case 'Range': {
        const r = req as pb.RangeRequest;
        const res = r.serializable ? this.serializableRange(m, r) : s.range(r);
        res.header = this.header(m, res.header?.revision);
        return res;
      }
      case 'Put': {
        const res = s.put(req as pb.PutRequest, cause);
        res.header = this.header(m, res.header?.revision);
        return res;
      }
      case 'DeleteRange': {
        const res = s.deleteRange(req as pb.DeleteRangeRequest, cause);
        res.header = this.header(m, res.header?.revision);
        return res;
      }
      case 'Txn': {
        const res = s.txn(req as pb.TxnRequest, cause);
        res.header = this.header(m, res.header?.revision);
        return res;
      }
      case 'Compact': {
        s.compact((req as pb.CompactionRequest).revision ?? 0n);
        this.trace.add(`compact ${s.compacted}`);
        return { header: this.header(m) };
      }
      case 'LeaseGrant': {
        const r = req as pb.LeaseGrantRequest;
        let id = r.ID ?? 0n;
        if (id === 0n) id = this.rng.int63();
        const l = s.grant(id, r.TTL ?? 0n, this.now());
        this.armExpiry();
        return { header: this.header(m), ID: l.id, TTL: l.ttl, error: '' };
      }
      case 'LeaseRevoke': {
        s.revoke((req as pb.LeaseRevokeRequest).ID ?? 0n, cause);
        return { header: this.header(m) };
      }
      case 'LeaseTimeToLive': {
        const r = req as pb.LeaseTimeToLiveRequest;
        const l = s.leases.get(r.ID ?? 0n);
        if (!l) return { header: this.header(m), ID: r.ID ?? 0n, TTL: -1n, grantedTTL: 0n, keys: [] };
        const left = Math.max(0, l.expiry - this.now());
        return {
          header: this.header(m),
          ID: l.id,
          TTL: BigInt(Math.floor(left / 1000)),
          grantedTTL: l.ttl,
          keys: r.keys ? [...l.keys].sort().map((k) => Buffer.from(k, 'latin1')) : [],
        };
      }
      case 'LeaseLeases':
        return { header: this.header(m), leases: [...s.leases.keys()].map((ID) => ({ ID })) };
      case 'Status':
        return {
          header: this.header(m),
          version: s.profile.version,
          dbSize: 24576n,
          leader: this.hasLeader() ? this.members[this.leader]!.id : 0n,
          raftIndex: s.rev + 100n,
          raftTerm: this.term,
          raftAppliedIndex: s.rev + 100n,
          errors: [],
          dbSizeInUse: 24576n,
          isLearner: false,
        };
      case 'MemberList':
        return {
          header: this.header(m),
          members: this.members.map((x) => ({
            ID: x.id,
            name: x.name,
            peerURLs: [`http://${x.name}:2380`],
            clientURLs: [`http://${x.endpoint}`],
            isLearner: false,
          })),
        };
      case 'AuthStatus':
        if (s.profile.name === '3.4') throw new EtcdFailure(UNIMPLEMENTED, 'unknown method AuthStatus for service etcdserverpb.Auth');
        return { header: this.header(m), enabled: false, authRevision: 1n };
      default:
        throw new EtcdFailure(UNIMPLEMENTED, `unknown method ${name}`);
    }
  }

  private serializableRange(m: Member, r: pb.RangeRequest): pb.RangeResponse {
    const asked = r.revision ?? 0n;
    if (asked > m.applied) throw ERR.futureRev();
    return this.store.range({ ...r, revision: asked === 0n ? m.applied : asked }, m.applied);
  }

  // ---- streams ---------------------------------------------------------------------------------------

  openWatch(m: Member, hasLeader: boolean, sink: StreamSink<pb.WatchResponse>): ServerStream<pb.WatchRequest> {
    const s = new WatchStream(this, m, hasLeader, sink);
    if (hasLeader && !this.hasLeader()) this.server(() => setTimeout(() => sink.fail(NO_LEADER()), 0));
    else m.watchStreams.add(s);
    return s;
  }

  openKeepAlive(m: Member, hasLeader: boolean, sink: StreamSink<pb.LeaseKeepAliveResponse>): ServerStream<pb.LeaseKeepAliveRequest> {
    const s = new KeepAliveStream(this, m, hasLeader, sink);
    if (hasLeader && !this.hasLeader()) this.server(() => setTimeout(() => sink.fail(NO_LEADER()), 0));
    else m.keepAliveStreams.add(s);
    return s;
  }

  /** A renewal reached the leader: the lease's TTL, or 0 when it is gone (an expired one is revoked first). */
  renew(id: bigint): bigint {
    const l = this.store.leases.get(id);
    if (!l) return 0n;
    if (l.expiry <= this.now()) {
      this.revoke(id, 'expiry');
      return 0n;
    }
    l.expiry = this.now() + Number(l.ttl) * 1000;
    return l.ttl;
  }

  // ---- leases ----------------------------------------------------------------------------------------

  revoke(id: bigint, cause: string): void {
    if (!this.store.leases.has(id)) return;
    this.trace.add(`revoke ${id.toString(16)} (${cause})`);
    this.store.revoke(id, cause);
  }

  private expireLeases(): void {
    if (!this.hasLeader()) return;
    const now = this.now();
    const expired = [...this.store.leases.values()].filter((l) => l.expiry <= now).map((l) => l.id);
    for (const id of expired) this.revoke(id, 'expiry');
  }

  // ---- faults -----------------------------------------------------------------------------------------

  /** The leader steps down (or crashed): no leader until the election ends. */
  loseLeader(): void {
    if (!this.hasLeader()) return;
    this.trace.add(`leader ${this.members[this.leader]!.name} lost`);
    this.onLeader?.(false);
    this.leader = -1;
    const since = this.now();
    for (const m of this.members) m.noLeaderSince = since;
    this.server(() => {
      setTimeout(() => this.cancelLeaderless(), NO_LEADER_CANCEL_MS);
      setTimeout(() => this.elect(), 1000 + this.rng.int(1000));
    });
  }

  private elect(): void {
    if (this.hasLeader()) return;
    const up = this.members.filter((m) => m.up);
    if (up.length * 2 <= this.members.length) {
      // No quorum: try again later (a member may restart).
      this.server(() => setTimeout(() => this.elect(), 1000));
      return;
    }
    const m = this.rng.pick(up);
    this.catchUp(m);
    this.leader = m.index;
    this.term++;
    for (const x of this.members) x.noLeaderSince = undefined;
    // Lessor.Promote: every lease gets its full TTL again, plus the election timeout.
    const now = this.now();
    for (const l of this.store.leases.values()) l.expiry = now + PROMOTE_EXTEND_MS + Number(l.ttl) * 1000;
    this.expiryAt = 0;
    this.armExpiry();
    this.trace.add(`leader ${m.name} elected (term ${this.term})`);
    this.onLeader?.(true);
  }

  private cancelLeaderless(): void {
    if (this.hasLeader()) return;
    for (const m of this.members) {
      for (const s of [...m.watchStreams]) if (s.hasLeader) s.fail(NO_LEADER());
      for (const s of [...m.keepAliveStreams]) if (s.hasLeader) s.fail(NO_LEADER());
    }
  }

  crash(m: Member): void {
    if (!m.up) return;
    this.trace.add(`member ${m.name} crashed`);
    m.up = false;
    for (const s of [...m.watchStreams]) s.close();
    for (const s of [...m.keepAliveStreams]) s.close();
    if (m.index === this.leader) this.loseLeader();
  }

  restart(m: Member): void {
    if (m.up) return;
    this.trace.add(`member ${m.name} restarted`);
    m.up = true;
    this.catchUp(m);
    if (!this.hasLeader()) this.server(() => setTimeout(() => this.elect(), 1000 + this.rng.int(500)));
  }

  /** A follower applies late for `ms` (its watches and serializable reads fall behind). */
  lag(m: Member, ms: number, forMs: number): void {
    if (m.index === this.leader) return;
    m.lagMs = ms;
    m.lagUntil = this.now() + forMs;
    this.trace.add(`member ${m.name} lags ${ms} ms for ${forMs} ms`);
  }
}

/** A Watch stream's server side on one member: etcd's watchStream and watchableStore, simplified. */
class WatchStream implements ServerStream<pb.WatchRequest> {
  private readonly watchers = new Map<bigint, Watcher>();
  private nextId = 0n;
  private closed = false;

  constructor(
    private readonly cluster: Cluster,
    private readonly m: Member,
    readonly hasLeader: boolean,
    private readonly sink: StreamSink<pb.WatchResponse>,
  ) {}

  receive(req: pb.WatchRequest): void {
    if (this.closed) return;
    const m = this.m;
    if (req.createRequest) {
      const c = req.createRequest;
      const id = this.nextId++;
      const start = c.startRevision ?? 0n;
      const filters = c.filters ?? [];
      const w: Watcher = {
        id,
        k: (c.key ?? Buffer.alloc(0)).toString('latin1'),
        end: (c.rangeEnd ?? Buffer.alloc(0)).toString('latin1'),
        noPut: filters.includes(pb.WatchCreateRequest_FilterType.NOPUT),
        noDelete: filters.includes(pb.WatchCreateRequest_FilterType.NODELETE),
        prevKv: c.prevKv ?? false,
        next: start === 0n ? m.applied + 1n : start,
        synced: start === 0n || start > m.applied,
      };
      this.watchers.set(id, w);
      this.sink.send({ header: this.cluster.header(m, m.applied), watchId: id, created: true });
      if (!w.synced) this.cluster.armSync(m);
    } else if (req.cancelRequest) {
      const id = req.cancelRequest.watchId ?? 0n;
      if (this.watchers.delete(id)) this.sink.send({ header: this.cluster.header(m, m.applied), watchId: id, canceled: true });
    } else if (req.progressRequest) {
      this.sink.send({ header: this.cluster.header(m, m.applied), watchId: -1n });
    }
  }

  /** Revision `r` was applied on this member: synced watchers get its events, in one response each. */
  notify(r: Revision): void {
    for (const w of this.watchers.values()) {
      if (!w.synced || w.next > r.rev) continue;
      const events = eventsFor(w, r.changes);
      w.next = r.rev + 1n;
      if (events.length > 0) this.sink.send({ header: this.cluster.header(this.m, r.rev), watchId: w.id, events });
    }
  }

  /** The catch-up loop: unsynced watchers get everything since their start, or are cancelled as compacted. */
  sync(): boolean {
    const store = this.cluster.store;
    const applied = this.m.applied;
    for (const w of [...this.watchers.values()]) {
      if (w.synced) continue;
      if (w.next < store.compacted) {
        this.watchers.delete(w.id);
        this.sink.send({ header: this.cluster.header(this.m, applied), watchId: w.id, canceled: true, compactRevision: store.compacted });
        continue;
      }
      const changes: Change[] = [];
      for (const h of store.history) if (h.rev >= w.next && h.rev <= applied) changes.push(...h.changes);
      const events = eventsFor(w, changes);
      w.next = applied + 1n;
      w.synced = true;
      if (events.length > 0) this.sink.send({ header: this.cluster.header(this.m, applied), watchId: w.id, events });
    }
    return false;
  }

  /** Cancels every watcher of this stream with `reason` (no compact revision): the stream stays open. */
  cancelAll(reason: string): void {
    for (const id of [...this.watchers.keys()]) {
      this.watchers.delete(id);
      this.sink.send({ header: this.cluster.header(this.m, this.m.applied), watchId: id, canceled: true, cancelReason: reason });
    }
  }

  fail(err: EtcdFailure): void {
    if (this.closed) return;
    this.close();
    this.sink.fail(err);
  }

  close(): void {
    this.closed = true;
    this.watchers.clear();
    this.m.watchStreams.delete(this);
  }

  get size(): number {
    return this.watchers.size;
  }
}

interface Watcher {
  id: bigint;
  k: string;
  end: string;
  noPut: boolean;
  noDelete: boolean;
  prevKv: boolean;
  /** The next revision it is owed. */
  next: bigint;
  synced: boolean;
}

function watches(w: Watcher, k: string): boolean {
  if (w.end === '') return k === w.k;
  if (w.end === '\0') return k >= w.k;
  return k >= w.k && k < w.end;
}

function eventsFor(w: Watcher, changes: readonly Change[]): pb.Event[] {
  const out: pb.Event[] = [];
  for (const c of changes) {
    if (!watches(w, c.k)) continue;
    if (c.type === 'put' ? w.noPut : w.noDelete) continue;
    const kv: pb.KeyValue =
      c.type === 'put' ? toPb(c.kv!) : { key: c.prev!.key, createRevision: 0n, modRevision: c.rev, version: 0n, lease: 0n };
    out.push({
      type: c.type === 'put' ? pb.Event_EventType.PUT : pb.Event_EventType.DELETE,
      kv,
      ...(w.prevKv && c.prev ? { prevKv: toPb(c.prev) } : {}),
    });
  }
  return out;
}

/** A LeaseKeepAlive stream's server side: each renewal is answered by the leader (forwarded from a follower). */
class KeepAliveStream implements ServerStream<pb.LeaseKeepAliveRequest> {
  private closed = false;

  constructor(
    private readonly cluster: Cluster,
    private readonly m: Member,
    readonly hasLeader: boolean,
    private readonly sink: StreamSink<pb.LeaseKeepAliveResponse>,
  ) {}

  receive(req: pb.LeaseKeepAliveRequest): void {
    if (this.closed) return;
    const c = this.cluster;
    if (!c.hasLeader()) return this.fail(NO_LEADER());
    const id = req.ID ?? 0n;
    const ttl = c.renew(id);
    this.sink.send({ header: c.header(this.m), ID: id, TTL: ttl });
  }

  fail(err: EtcdFailure): void {
    if (this.closed) return;
    this.close();
    this.sink.fail(err);
  }

  close(): void {
    this.closed = true;
    this.m.keepAliveStreams.delete(this);
  }
}
