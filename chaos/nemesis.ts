// The nemesis: injects one fault at a time, at random moments drawn from the seeded PRNG, and
// records each on the common clock. Every fault is healed before the next one starts.
import { setTimeout as sleep } from 'node:timers/promises';
import { compare, op, prefixEnd, type Client } from '../src/index.js';
import type { FaultRecord, StaleHold } from './checker/index.js';
import { now, type Prng } from './common.js';
import type { WorkerPool } from './pool.js';
import type { WorkerProc } from './workers.js';

/** What the nemesis needs of a cluster: startEtcd's EtcdCluster, or the netns one (with partitions). */
export interface ChaosCluster {
  readonly endpoints: string[];
  kill(i: number, signal?: NodeJS.Signals): Promise<void>;
  restart(i: number): Promise<void>;
  pause(i: number): void;
  resume(i: number): void;
  leaderIndex(timeoutMs?: number): Promise<number>;
  waitHealthy(timeoutMs?: number): Promise<void>;
  partition?(i: number): Promise<void>;
  heal?(): Promise<void>;
}

export type FaultKind =
  | 'member-kill'
  | 'member-pause'
  | 'partition'
  | 'worker-pause'
  | 'ghost-pause'
  | 'worker-crash'
  | 'proxy-cut'
  | 'proxy-delay'
  | 'proxy-blackhole'
  | 'proxy-blackhole-member'
  | 'key-delete'
  | 'lease-revoke'
  | 'stale-write';

/** Time from a crash to recovery. */
export interface FailoverRecord {
  kind: 'etcd-leader-kill' | 'etcd-leader-pause' | 'etcd-leader-partition' | 'leader-worker-crash';
  at: number;
  /** etcd faults: until the surviving members agreed on a new Raft leader. */
  raftMs?: number;
}

export interface NemesisOptions {
  cluster: ChaosCluster;
  pool: WorkerPool;
  rng: Prng;
  ttl: number;
  weights: Partial<Record<FaultKind, number>>;
  /** Pause between faults, ms. */
  gapMs: [number, number];
  /** Inject each kind with a positive weight once (in a seeded order) before drawing at random. */
  everyKindFirst?: boolean;
  /**
   * These kinds first, in this order (then the rest of everyKindFirst's). Here a `member-pause`
   * pauses the Raft leader, and a trap-based fault (ghost-pause, key-delete, lease-revoke,
   * stale-write) that caught nobody, or a stale-write whose writes reached no fence ahead of them,
   * is tried again (twice at most): a quick run must see each of them happen.
   */
  mustHappen?: FaultKind[];
  /** Keep injecting past `until` (by at most `minFaultsGraceMs`) until this many faults ran: a short
   * phase whose first faults ran long must still judge a few. */
  minFaults?: number;
  minFaultsGraceMs?: number;
  log: (msg: string) => void;
  /** A client of the cluster's own (not through a worker's proxy), for the operator's faults. */
  admin?: Client;
  /** Operator faults done, for the observer's record (observer.ts): a delete's revision, a revoked lease. */
  onOperator?: (done: { how: 'operator-delete'; revision: bigint } | { how: 'operator-revoke'; lease: string }) => void;
  /**
   * For stale-write: `ahead` says whether every fence the fenced workers write through (the fenced
   * ledger, PostgreSQL's fence table) has seen a token newer than `token`; `stale` is told of each
   * hold made stale (its key gone and the fences ahead when it woke), which the checker judges.
   */
  fences?: { ahead(token: bigint): Promise<boolean>; stale(hold: StaleHold): void };
}

export class Nemesis {
  readonly faults: FaultRecord[] = [];
  readonly failovers: FailoverRecord[] = [];
  readonly problems: string[] = [];
  private readonly o: NemesisOptions;
  private readonly size: number;
  private ghosts: number;
  private operators = 0;
  /** The fault just injected did not do what it is for (a stale-write whose writes cannot be judged). */
  private missed = false;

  constructor(options: NemesisOptions) {
    this.o = options;
    this.size = options.cluster.endpoints.length;
    // Where the ghost-pauses start in their rotation (see ghost-pause), drawn so that a short run's
    // few ghosts do not always land on the same role.
    this.ghosts = options.rng.int(0, 5);
  }

  /** Injects faults until `until` (common clock), then heals everything. */
  async run(until: number): Promise<void> {
    const { rng } = this.o;
    const w = this.o.weights;
    // Every kind once, in a seeded order, but the phase's main fault (the heaviest weight) first.
    const must = [...(this.o.mustHappen ?? [])];
    const first = this.o.everyKindFirst
      ? shuffle(
          rng,
          (Object.keys(w) as FaultKind[]).filter((k) => (w[k] ?? 0) > 0 && !must.includes(k)),
        ).sort((a, b) => (w[b] ?? 0) - (w[a] ?? 0) || 0)
      : [];
    const retries = new Map<FaultKind, number>();
    const min = this.o.minFaults ?? 0;
    const hardEnd = until + (this.o.minFaultsGraceMs ?? 0);
    const more = (): boolean => now() < until || (this.faults.length < min && now() < hardEnd);
    while (more()) {
      await sleep(rng.between(...this.o.gapMs));
      if (!more()) break;
      const required = must.shift();
      const kind = required ?? first.shift() ?? rng.weighted(this.o.weights);
      const rec: FaultRecord = { kind, target: '', start: now(), end: 0 };
      try {
        await this.inject(kind, rec, Math.max(until, Math.min(hardEnd, now() + 3000)), required !== undefined);
      } catch (err) {
        this.problems.push(`${kind} ${rec.target}: ${(err as Error).message}`);
        await this.healAll();
      }
      if (rec.end === 0) rec.end = now();
      this.faults.push(rec);
      this.o.log(`fault ${kind} ${rec.target} ${Math.round(rec.end - rec.start)} ms${rec.note ? ` (${rec.note})` : ''}`);
      // A required trap that caught nobody (or a stale write that reached no fence): again, before anything else.
      const missed = rec.end === rec.start || this.missed;
      this.missed = false;
      if (required !== undefined && missed && (retries.get(kind) ?? 0) < 2) {
        retries.set(kind, (retries.get(kind) ?? 0) + 1);
        must.unshift(kind);
      }
      if (kind.startsWith('member') || kind === 'partition') await this.recover();
    }
    await this.healAll();
  }

  private async recover(): Promise<void> {
    try {
      await this.o.cluster.waitHealthy(30_000);
    } catch (err) {
      this.problems.push(`cluster did not recover: ${(err as Error).message}`);
    }
  }

  /** Undo whatever could still be in force. */
  async healAll(): Promise<void> {
    const { cluster, pool } = this.o;
    for (let i = 0; i < this.size; i++) cluster.resume(i);
    await cluster.heal?.();
    pool.healProxies();
    for (const w of pool.workers) w.resume();
  }

  private async pickMember(rec: FaultRecord, leaderOnly = false): Promise<{ i: number; leader: boolean }> {
    const { rng, cluster } = this.o;
    let leader = -1;
    try {
      leader = await cluster.leaderIndex(leaderOnly ? 15_000 : 3000);
    } catch {
      // no agreed leader right now: pick any
    }
    if (leader >= 0 && (leaderOnly || rng.chance(0.5))) {
      rec.target = `m${leader} (leader)`;
      return { i: leader, leader: true };
    }
    const i = rng.int(0, this.size - 1);
    rec.target = `m${i}${i === leader ? ' (leader)' : ''}`;
    return { i, leader: i === leader };
  }

  /** A worker: often one that holds a lock or leads right now (the interesting victim). */
  private pickWorker(rec: FaultRecord, preferHolder: number): WorkerProc {
    const { rng, pool } = this.o;
    const holders = pool.holders();
    const alive = pool.workers.filter((w) => w.alive);
    const w = holders.length > 0 && rng.chance(preferHolder) ? rng.pick(holders) : rng.pick(alive.length > 0 ? alive : pool.workers);
    rec.target = `${w.label}${w.holding ? ` (holding ${w.holding.token})` : ''}`;
    rec.worker = w.label;
    return w;
  }

  /** Time until the remaining members agree on a leader other than `old`. */
  private async raftFailover(old: number, since: number): Promise<number | undefined> {
    const deadline = now() + 15_000;
    while (now() < deadline) {
      try {
        const l = await this.o.cluster.leaderIndex(2000);
        if (l !== old) return Math.round(now() - since);
      } catch {
        // none yet
      }
      await sleep(25);
    }
    return undefined;
  }

  private async inject(kind: FaultKind, rec: FaultRecord, until: number, required = false): Promise<void> {
    const { rng, cluster, pool, ttl } = this.o;
    const ttlMs = ttl * 1000;
    const bounded = (ms: number): number => Math.max(200, Math.min(ms, until - now() + 2000));
    switch (kind) {
      case 'member-kill': {
        const { i, leader } = await this.pickMember(rec);
        const down = bounded(rng.between(300, 3500));
        rec.start = now();
        await cluster.kill(i, 'SIGKILL');
        let raftMs: number | undefined;
        if (leader) {
          raftMs = await this.raftFailover(i, rec.start);
          this.failovers.push({ kind: 'etcd-leader-kill', at: rec.start, raftMs });
        }
        const left = down - (now() - rec.start);
        if (left > 0) await sleep(left);
        await cluster.restart(i);
        rec.end = now();
        rec.note = `down ${Math.round(down)} ms${raftMs !== undefined ? `, new raft leader after ${raftMs} ms` : ''}`;
        return;
      }
      case 'member-pause': {
        const { i, leader } = await this.pickMember(rec, required);
        // A required one (a quick run's leader pause) lasts past the TTL: the case of etcd 15247.
        const ms = bounded(required ? rng.between(ttlMs, ttlMs + 1500) : rng.between(300, ttlMs + 1500));
        rec.start = now();
        cluster.pause(i);
        let raftMs: number | undefined;
        if (leader) {
          raftMs = await this.raftFailover(i, rec.start);
          this.failovers.push({ kind: 'etcd-leader-pause', at: rec.start, raftMs });
        }
        const left = ms - (now() - rec.start);
        if (left > 0) await sleep(left);
        cluster.resume(i);
        rec.end = now();
        rec.note = `stopped ${Math.round(ms)} ms`;
        return;
      }
      case 'partition': {
        if (!cluster.partition || !cluster.heal) throw new Error('this cluster cannot partition');
        const { i, leader } = await this.pickMember(rec);
        const ms = bounded(rng.between(1000, ttlMs + 3000));
        rec.start = now();
        await cluster.partition(i);
        let raftMs: number | undefined;
        if (leader) {
          raftMs = await this.raftFailover(i, rec.start);
          this.failovers.push({ kind: 'etcd-leader-partition', at: rec.start, raftMs });
        }
        const left = ms - (now() - rec.start);
        if (left > 0) await sleep(left);
        await cluster.heal();
        rec.end = now();
        rec.note = `minority {m${i}} cut off ${Math.round(ms)} ms`;
        return;
      }
      case 'worker-pause': {
        // Longer than the TTL: the lease expires on the server while the holder is frozen.
        const w = this.pickWorker(rec, 0.7);
        const ms = rng.between(ttlMs + 300, ttlMs + 2500);
        rec.start = now();
        w.pause();
        await sleep(ms);
        w.resume();
        rec.end = now();
        rec.note = `SIGSTOP ${Math.round(ms)} ms`;
        return;
      }
      case 'ghost-pause': {
        // A holder frozen inside its critical section, between its first request to the protected
        // resource and its write, for longer than the TTL: when it wakes, someone else holds the
        // lock (or its permit) and has reached the resource; its write must be refused. The roles
        // rotate (fenced ledger, semaphore's permits, RW lock), and so does the kind of holder: a
        // plain one (its write must be refused by the fence) and a careful one (assertHeld() must
        // stop it before it writes). Six ghosts cover every pair.
        const k = this.ghosts++;
        const roles = (['fenced', 'semaphore', 'rwlock'] as const).filter((r) => pool.byRole(r).some((x) => x.alive));
        const candidates = pool.byRole(roles[k % roles.length] ?? 'fenced').filter((x) => x.alive);
        const w = rng.pick(candidates);
        rec.target = w.label;
        rec.worker = w.label;
        const careful = k % 2 === 1;
        if (!(await w.trapNextRead(3000, careful))) {
          // Nothing was frozen: an empty interval, so that it explains no overlap.
          rec.start = rec.end = now();
          rec.note = 'no read to trap within 3 s';
          return;
        }
        rec.start = now();
        const ms = rng.between(ttlMs + 300, ttlMs + 2000);
        await sleep(ms);
        w.resume();
        rec.end = now();
        rec.note = `${careful ? 'careful' : 'plain'} holder SIGSTOPped inside the critical section for ${Math.round(ms)} ms`;
        return;
      }
      case 'key-delete':
      case 'lease-revoke': {
        // An operator (a cleanup script, `etcdctl del`, `etcdctl lease revoke`) takes a live holder's
        // key away while it waits for an answer of the protected resource, and the answer comes only
        // OPERATOR_HOLD_MS later: a holder that ignored the loss would act on it well after
        // another holder was let in. The victims rotate (OPERATOR_VICTIMS): a fenced holder whose
        // worker takes the lock again meanwhile from a second call, a permit holder, a leader, a
        // fenced holder alone, an RW lock holder.
        const victims = OPERATOR_VICTIMS.filter((v) => pool.byRole(v.role).some((x) => x.alive));
        const victim = victims[this.operators++ % victims.length] ?? OPERATOR_VICTIMS[0]!;
        const w = rng.pick(pool.byRole(victim.role).filter((x) => x.alive));
        rec.target = w.label;
        rec.worker = w.label;
        const admin = this.o.admin;
        if (!admin) throw new Error('no admin client for the operator faults');
        const caught = await w.trapNextHold(3000, async (token) => {
          rec.start = now();
          rec.token = token;
          rec.target = `${w.label} (holding ${token})`;
          const prefix = Buffer.from(`${w.spec.name}/`);
          const r = await admin.range({ key: prefix, rangeEnd: prefixEnd(prefix), minCreateRevision: token, maxCreateRevision: token });
          const kv = r.kvs[0];
          if (!kv) {
            rec.note = 'its key was already gone';
            rec.end = rec.start;
            return;
          }
          rec.key = kv.key.toString();
          if (kind === 'key-delete') {
            const t = await admin.txn({
              compare: [compare.createRevision(rec.key, '=', token)],
              success: [op.delete(rec.key)],
              failure: [],
            });
            if (t.succeeded) {
              rec.revision = t.header.revision;
              this.o.onOperator?.({ how: 'operator-delete', revision: t.header.revision });
            }
          } else {
            rec.lease = kv.lease.toString(16);
            await admin.leaseRevoke(kv.lease);
            this.o.onOperator?.({ how: 'operator-revoke', lease: rec.lease });
            // LeaseRevoke's answer carries no revision here: a read right after it bounds it.
            rec.revision = (await admin.range({ key: kv.key })).header.revision;
          }
          rec.end = now();
          rec.note = rec.revision !== undefined ? `${rec.key} at revision ${rec.revision}` : 'its key was already gone';
          // A fenced worker takes the same lock again from a second call meanwhile: the lost hold's
          // release, after the answer, must leave that new incarnation alone.
          if (kind === 'key-delete' && victim.sibling) w.send({ t: 'sibling', holdMs: OPERATOR_HOLD_MS + 1000 });
          await sleep(OPERATOR_HOLD_MS);
        });
        if (!caught) {
          rec.start = rec.end = now();
          rec.note = 'no request while holding within 3 s';
        }
        return;
      }
      case 'stale-write': {
        // A fenced holder whose assertHeld() just passed freezes before its writes (a GC pause)
        // until its lease expired, its key is gone and a newer holder has passed the fences; then
        // it writes with its stale token: to the fenced ledger, to etcd (ownerCompare) and to
        // PostgreSQL (PostgresFence handed the token alone, so that the database's own compare
        // decides). Every write must be refused (checker/stale.ts): made every run, whatever else
        // the faults happened to catch.
        const { admin, fences } = this.o;
        if (!admin || !fences) throw new Error('no admin client or fences for stale-write');
        const w = rng.pick(pool.byRole('fenced').filter((x) => x.alive));
        rec.target = w.label;
        rec.worker = w.label;
        let stale = false;
        const caught = await w.trapStale(5000, async (token) => {
          w.pause();
          rec.start = now();
          rec.token = token;
          rec.target = `${w.label} (holding ${token})`;
          const prefix = Buffer.from(`${w.spec.name}/`);
          const gone = async (): Promise<boolean> =>
            // No countOnly (nor limit): etcd counts (and limits) before it filters by CreateRevision.
            (
              await admin.range({
                key: prefix,
                rangeEnd: prefixEnd(prefix),
                minCreateRevision: token,
                maxCreateRevision: token,
                keysOnly: true,
              })
            ).kvs.length === 0;
          // Past the TTL at least (as a ghost-pause: a freeze that explains the overlap it causes).
          const least = rec.start + ttlMs + 300;
          // Not far past the phase's end (as bounded() faults): a stale write not made in time is missed.
          const limit = Math.max(least, Math.min(rec.start + ttlMs + STALE_WAIT_MS, until + 2000));
          while (now() < limit && !stale) {
            await sleep(100);
            stale = now() >= least && (await gone().catch(() => false)) && (await fences.ahead(token).catch(() => false));
          }
          w.resume();
          rec.end = now();
          rec.note = stale
            ? `frozen ${Math.round(rec.end - rec.start)} ms after assertHeld(), until its key was gone and a newer token had passed every fence`
            : `frozen ${Math.round(rec.end - rec.start)} ms, but no newer holder passed every fence: its writes are not judged`;
          if (stale) fences.stale({ worker: w.label, token });
        });
        if (!caught) {
          rec.start = rec.end = now();
          rec.note = 'no stale-pause within 5 s';
        }
        if (!stale) this.missed = true;
        return;
      }
      case 'worker-crash': {
        const leaders = pool.byRole('election').filter((w) => w.alive && w.holding);
        const w = leaders.length > 0 && rng.chance(0.6) ? rng.pick(leaders) : this.pickWorker(rec, 0.5);
        rec.target = `${w.label}${w.holding ? ` (holding ${w.holding.token})` : ''}`;
        rec.worker = w.label;
        const wasLeader = w.spec.role === 'election' && w.holding !== undefined;
        rec.start = now();
        await w.kill();
        if (wasLeader) this.failovers.push({ kind: 'leader-worker-crash', at: rec.start });
        await sleep(rng.between(200, 1500));
        await w.spawn();
        await w.ready;
        rec.end = now();
        rec.note = 'SIGKILL, respawned';
        return;
      }
      case 'proxy-cut': {
        const w = this.pickWorker(rec, 0.5);
        const times = rng.int(1, 3);
        for (let k = 0; k < times; k++) {
          for (const p of w.proxies) p.cut();
          if (k < times - 1) await sleep(rng.between(50, 400));
        }
        rec.end = now();
        rec.note = `${times} cut(s) of every connection`;
        return;
      }
      case 'proxy-delay': {
        const w = this.pickWorker(rec, 0.5);
        const d = Math.round(rng.between(50, 600));
        const ms = bounded(rng.between(1000, 4000));
        for (const p of w.proxies) p.delay(d);
        await sleep(ms);
        for (const p of w.proxies) p.delay(0);
        rec.end = now();
        rec.note = `+${d} ms each way for ${Math.round(ms)} ms`;
        return;
      }
      case 'proxy-blackhole': {
        // The worker is cut off from every member (a client-side partition): sometimes past its TTL.
        const w = this.pickWorker(rec, 0.6);
        const ms = bounded(rng.between(500, ttlMs + 2500));
        for (const p of w.proxies) p.blackhole(true);
        await sleep(ms);
        for (const p of w.proxies) p.blackhole(false);
        rec.end = now();
        rec.note = `black-holed ${Math.round(ms)} ms`;
        return;
      }
      case 'proxy-blackhole-member': {
        // One member unreachable from every client (the client-to-member links): clients must fail over.
        const { i } = await this.pickMember(rec);
        const ms = bounded(rng.between(1000, ttlMs + 2000));
        rec.start = now();
        for (const w of pool.workers) w.proxies[i]?.blackhole(true);
        await sleep(ms);
        for (const w of pool.workers) w.proxies[i]?.blackhole(false);
        rec.end = now();
        rec.note = `clients cut from m${i} for ${Math.round(ms)} ms`;
        return;
      }
    }
  }
}

/** How long past the TTL a stale-write freeze waits for a newer holder to pass every fence. */
export const STALE_WAIT_MS = 8000;

/** How long a holder whose key an operator took waits for the answer it asked for meanwhile. */
export const OPERATOR_HOLD_MS = 1500;

/**
 * Whom the operator's faults hit, in turn. `sibling`: the fenced worker takes the same lock again
 * from a second call on the same session while its lost hold waits (worker.ts siblingOnce()), so a
 * release not guarded on its CreateRevision deletes the new incarnation. Without it, a holder that
 * ignores its key's deletion goes on past the next holder's start.
 */
export const OPERATOR_VICTIMS: { role: 'fenced' | 'semaphore' | 'rwlock' | 'election'; sibling?: true }[] = [
  { role: 'fenced', sibling: true },
  { role: 'semaphore' },
  { role: 'election' },
  { role: 'fenced' },
  { role: 'rwlock' },
];

function shuffle<T>(rng: Prng, items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = rng.int(0, i);
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}
