// The chaos parent's side of one worker: spawning (`node --import tsx chaos/worker.ts`), one
// startProxy per etcd member (so its network can be cut, delayed or black-holed), the fenced store's
// requests, and its reports recorded in the History (run-history.ts) on the parent's clock.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LeaseNotFoundError } from '../src/index.js';
import { startProxy, type TcpProxy } from '../src/testing/index.js';
import type { HeldInterval } from './checker/index.js';
import { isOurError, type History } from './run-history.js';
import { CounterRecorder } from './counter-ops.js';
import {
  clockOffsetSample,
  hash,
  lineSplitter,
  now,
  type LockRole,
  type ParentMessage,
  type Role,
  type RWMode,
  type WorkerConfig,
  type WorkerEvent,
} from './common.js';
import type { FencedStore } from './fenced-store.js';
import { StoreDesk } from './store-desk.js';
import { stuckLine } from './stuck-line.js';

const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));
const PARENT_CLOCK = clockOffsetSample();

export interface WorkerSpec {
  id: string;
  role: Role;
  name: string;
}

export interface PoolOptions {
  endpoints: string[];
  ttl: number;
  dataPrefix: string;
  /** The PostgreSQL ledger's connection string and this phase's rows (chaos/pg-ledger.ts), if there is one. */
  pg?: { url: string; phase: string };
  seed: number;
  logDir: string;
  thinkMs: [number, number];
  holdMs: [number, number];
  electionHoldMs: [number, number];
  /** The semaphore's permit count. */
  permits: number;
  /** The DoubleBarrier's member count: the number of dbarrier workers. */
  dbarrierCount: number;
  /** The share of rwlock cycles that take the write lock. */
  rwWriteShare: number;
  store: FencedStore;
  history: History;
  log: (msg: string) => void;
  /** Formats a common-clock time for logs (seconds since the run started). */
  stamp: (at: number) => string;
}

/** One worker process (one incarnation at a time) and the proxies in front of it. */
export class WorkerProc {
  incarnation = 0;
  child?: ChildProcess;
  proxies: TcpProxy[] = [];
  alive = false;
  paused = false;
  /**
   * What it holds (lock roles) or leads (election) right now, per its reports, with when the session
   * it holds on was reported granted (see sessionAt).
   */
  holding?: { token: bigint; from: number; mode?: RWMode; sessionFrom?: number; lease?: string };
  /**
   * When each of this incarnation's sessions was reported granted ('session' events), by lease id
   * (hex), until a term names it; and the latest one, which is a lock role's current session: its
   * worker has one session at a time and reports a new one (currentSession()) before the cycle
   * that uses it acquires anything.
   */
  private sessionAt = new Map<string, number>();
  private lastSessionAt?: number;
  /** The lease (hex) of that latest session: a lock role's current one. */
  private lastLease?: string;
  private correction = 0;
  /** A bound on the error of `correction` (the parent's and this incarnation's samples), ms. */
  private clockErrMs = 0;
  /** This incarnation's reads and increments of the etcd counter, for Porcupine. */
  private counter?: CounterRecorder;
  private stdin?: NodeJS.WritableStream;
  exited: Promise<void> = Promise.resolve();
  private readyResolve?: () => void;
  ready: Promise<void> = Promise.resolve();
  byeSeen = false;
  killedByUs = false;
  /** Answers its store requests and holds the nemesis's traps (store-desk.ts). */
  private readonly desk: StoreDesk;
  private logStream?: WriteStream;
  private leases = new Set<string>();

  constructor(
    readonly spec: WorkerSpec,
    private readonly pool: { readonly options: PoolOptions; readonly workers: readonly WorkerProc[] },
  ) {
    this.desk = new StoreDesk({
      store: pool.options.store,
      pause: () => this.pause(),
      send: (m) => this.send(m),
      answered: (e, entry, label) => this.ledgerOp(e, entry, label),
    });
  }

  get label(): string {
    return `${this.spec.id}#${this.incarnation}`;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  async spawn(): Promise<void> {
    const o = this.pool.options;
    this.incarnation++;
    await Promise.all(this.proxies.map((p) => p.close()));
    this.proxies = await Promise.all(o.endpoints.map((e) => startProxy(e)));
    const cfg: WorkerConfig = {
      id: this.spec.id,
      incarnation: this.incarnation,
      role: this.spec.role,
      endpoints: this.proxies.map((p) => p.endpoint),
      ttl: o.ttl,
      name: this.spec.name,
      dataPrefix: o.dataPrefix,
      ...(o.pg && this.spec.role === 'fenced' ? { pg: o.pg } : {}),
      seed: (o.seed + hash(this.label)) >>> 0,
      thinkMs: o.thinkMs,
      holdMs: this.spec.role === 'election' ? o.electionHoldMs : o.holdMs,
      permits: o.permits,
      ...(this.spec.role === 'dbarrier' ? { count: o.dbarrierCount } : {}),
      writeShare: o.rwWriteShare,
      dialTimeoutMs: 1000,
      callTimeoutMs: 3000,
    };
    this.logStream = createWriteStream(join(o.logDir, `${this.spec.id}.log`), { flags: 'a' });
    this.logStream.write(`--- ${this.label} ${new Date().toISOString()}\n`);
    const child = spawn(process.execPath, ['--import', 'tsx', WORKER], {
      env: { ...process.env, CHAOS_WORKER: JSON.stringify(cfg) },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.child = child;
    this.stdin = child.stdin!;
    child.stdin!.on('error', () => {});
    this.alive = true;
    this.paused = false;
    this.byeSeen = false;
    this.killedByUs = false;
    this.holding = undefined;
    this.leases = new Set();
    this.counter = undefined;
    this.sessionAt = new Map();
    this.lastSessionAt = undefined;
    this.lastLease = undefined;
    this.ready = new Promise((resolve) => (this.readyResolve = resolve));
    const label = this.label;
    child.stdout!.setEncoding('utf8').on(
      'data',
      lineSplitter((line) => {
        let e: WorkerEvent;
        try {
          e = JSON.parse(line) as WorkerEvent;
        } catch {
          this.logStream?.write(`stdout: ${line}\n`);
          return;
        }
        this.onEvent(e, label);
      }),
    );
    child.stderr!.setEncoding('utf8').on('data', (d: string) => this.logStream?.write(d));
    // 'close', not 'exit': it comes after the last stdout line was read, so a report the worker sent
    // just before it died is never mistaken for something it did not say.
    this.exited = new Promise((resolve) => {
      child.once('close', (code, signal) => {
        this.onExit(label, code, signal);
        resolve();
      });
    });
  }

  send(m: ParentMessage): void {
    if (this.alive) this.stdin?.write(`${JSON.stringify(m)}\n`);
  }

  private t(at: number): number {
    return at + this.correction;
  }

  /** The last thing this worker reported, for stall diagnosis. */
  lastEvent?: string;

  private onEvent(e: WorkerEvent, label: string): void {
    const h = this.pool.options.history;
    if (e.t !== 'store' && e.t !== 'stuck') {
      const mode = 'mode' in e && e.mode ? ` ${e.mode}` : '';
      this.lastEvent = `${e.t}${'token' in e ? ` ${e.token}` : ''}${mode}@${this.pool.options.stamp(this.t('at' in e ? e.at : 'to' in e ? e.to : now()))}`;
      // The timeline of every worker, kept with the logs (--keep) for diagnosis.
      if (e.t !== 'error') this.logStream?.write(`${this.lastEvent}${'lease' in e ? ` lease ${e.lease}` : ''}\n`);
    }
    switch (e.t) {
      case 'ready':
        this.correction = PARENT_CLOCK.offset - e.offset;
        this.clockErrMs = PARENT_CLOCK.errMs + e.offsetErrMs;
        h.clockErrMs = Math.max(h.clockErrMs, this.clockErrMs);
        this.logStream?.write(`clock mapped to the parent's within ${e.offsetErrMs.toFixed(4)} ms\n`);
        this.readyResolve?.();
        break;
      case 'session':
        this.leases.add(e.lease);
        h.leaseOwner.set(e.lease, label);
        this.lastSessionAt = this.t(e.at);
        this.lastLease = e.lease;
        if (this.spec.role === 'election') this.sessionAt.set(e.lease, this.t(e.at));
        break;
      case 'session-lost':
        h.sessionsLost.set(e.reason, (h.sessionsLost.get(e.reason) ?? 0) + 1);
        h.abandonedLeases.add(e.lease);
        if (e.leftMs !== undefined) h.leaseGone.push({ worker: label, lease: e.lease, leftMs: e.leftMs, at: this.t(e.at) });
        break;
      case 'acquired':
        if (e.sibling) {
          h.acquisitions[this.spec.role].push(this.t(e.at));
          break;
        }
        this.holding = {
          token: BigInt(e.token),
          from: this.t(e.at),
          ...(e.mode ? { mode: e.mode } : {}),
          ...this.sessionFrom(this.lastSessionAt),
          ...this.leaseOf(this.lastLease),
        };
        h.acquisitions[this.spec.role].push(this.t(e.at));
        break;
      case 'releasing': {
        if (e.sibling) {
          const lostReason = e.lostReason !== undefined ? { lostReason: e.lostReason } : {};
          h.held[this.lockRole()].push({
            worker: label,
            token: BigInt(e.token),
            from: this.t(e.from),
            to: this.t(e.to),
            lost: e.lost,
            ttl: this.pool.options.ttl,
            ...lostReason,
          });
          h.cycles++;
          break;
        }
        const iv: HeldInterval = {
          worker: label,
          token: BigInt(e.token),
          from: this.t(e.from),
          to: this.t(e.to),
          lost: e.lost,
          ...this.holdFacts(e.lostReason),
        };
        if (e.mode) iv.mode = e.mode;
        h.held[this.lockRole()].push(iv);
        this.holding = undefined;
        h.cycles++;
        break;
      }
      case 'released':
        break;
      case 'witness':
        h.witnesses[this.spec.role].push({
          worker: label,
          queue: `${this.spec.name}/`,
          token: BigInt(e.token),
          rev: BigInt(e.rev),
          ...(e.mode ? { mode: e.mode } : {}),
          seen: e.seen.map((k) => ({ key: k.key, create: BigInt(k.create), lease: k.lease })),
        });
        break;
      case 'store':
        this.desk.answer(e, label);
        break;
      case 'etcd-inc-call':
        this.counterOf(label).called(e);
        break;
      case 'etcd-inc':
        h.etcdIncrements.push({ worker: label, token: BigInt(e.token), opKey: e.opKey, value: e.value, outcome: e.outcome });
        this.counterOf(label).done(e);
        if (e.error) this.countError('etcd-inc', e.error.split(':')[0]!);
        break;
      case 'pg-inc':
        h.pgIncrements.push({ worker: label, opId: e.opId, token: BigInt(e.token), outcome: e.outcome, shadowWritten: e.shadowWritten });
        if (e.error) this.countError('pg-inc', e.error.split(':')[0]!);
        break;
      case 'careful-skip':
        h.carefulSkips.push(this.t(e.at));
        break;
      case 'stale-pause':
        this.desk.stalePaused(BigInt(e.token));
        break;
      case 'term-start':
        this.holding = { token: BigInt(e.token), from: this.t(e.at), ...this.sessionFrom(this.sessionAt.get(e.lease)), lease: e.lease };
        this.sessionAt.delete(e.lease);
        h.termStarts.push({ worker: label, token: BigInt(e.token), at: this.t(e.at) });
        h.acquisitions.election.push(this.t(e.at));
        this.leases.add(e.lease);
        h.leaseOwner.set(e.lease, label);
        break;
      case 'term-end':
        h.terms.push({
          worker: label,
          token: BigInt(e.token),
          from: this.t(e.from),
          to: this.t(e.to),
          lost: e.lost,
          ...this.holdFacts(e.lostReason),
        });
        this.holding = undefined;
        h.cycles++;
        break;
      case 'error':
        this.countError(e.op, e.name);
        if (e.code === LeaseNotFoundError.code && e.leftMs !== undefined) {
          h.leaseGone.push({ worker: label, lease: `(${e.op})`, leftMs: e.leftMs, at: this.t(e.at) });
        } else if (e.code === undefined || !isOurError(e.code)) h.unexpectedErrors.push(`${label} ${e.op}: ${e.name}: ${e.message}`);
        this.logStream?.write(`${this.pool.options.stamp(this.t(e.at))} error ${e.op}: ${e.name}: ${e.message}\n`);
        break;
      case 'stuck': {
        const line = stuckLine(e, label, h.leaseOwner, this.pool.workers);
        h.stuck.push(line);
        this.pool.options.log(`STUCK ${line}`);
        this.logStream?.write(`${this.pool.options.stamp(this.t(e.at))} STUCK ${line}\n`);
        break;
      }
      case 'bye':
        this.byeSeen = true;
        break;
      case 'recipe':
        h.recipes.push({ ...e, at: this.t(e.at), worker: label });
        h.acquisitions[this.spec.role].push(this.t(e.at));
        if (e.kind !== 'barrier-held') h.cycles++;
        break;
    }
  }

  private counterOf(label: string): CounterRecorder {
    this.counter ??= new CounterRecorder(this.clientId(label), (at) => this.t(at), this.clockErrMs, this.pool.options.history.linear);
    return this.counter;
  }

  private clientId(label: string): number {
    const ids = this.pool.options.history.clientIds;
    let id = ids.get(label);
    if (id === undefined) ids.set(label, (id = ids.size));
    return id;
  }

  /**
   * A fenced ledger request, for Porcupine: invoked when the worker sent it (on its clock, so widened
   * by the mapping's error bound), returned now (the answer is on its way: the store applied it in between).
   */
  private ledgerOp(e: Extract<WorkerEvent, { t: 'store' }>, entry: { ok: boolean; value: number }, label: string): void {
    if (e.register !== 'ledger' || (e.op !== 'read' && e.op !== 'write')) return;
    this.pool.options.history.linear.ledger.push({
      client: this.clientId(label),
      call: this.t(e.sentAt) - this.clockErrMs,
      ret: now(),
      op: e.op,
      token: e.token,
      value: entry.value,
      ok: entry.ok,
    });
  }

  private sessionFrom(at: number | undefined): { sessionFrom?: number } {
    return at !== undefined ? { sessionFrom: at } : {};
  }

  private leaseOf(lease: string | undefined): { lease?: string } {
    return lease !== undefined ? { lease } : {};
  }

  /**
   * What the checker needs of the hold now ending (this.holding) besides its interval, to judge
   * etcd 15247 (see explain() in checker/excuses.ts): why the worker saw it lost, when its session was
   * reported granted and its lease (to match etcd's lease_gone reports), and the TTL its sessions ask for.
   */
  private holdFacts(lostReason: string | undefined): Pick<HeldInterval, 'lostReason' | 'sessionFrom' | 'lease' | 'ttl'> {
    return {
      ...(lostReason !== undefined ? { lostReason } : {}),
      ...this.sessionFrom(this.holding?.sessionFrom),
      ...this.leaseOf(this.holding?.lease),
      ttl: this.pool.options.ttl,
    };
  }

  private countError(op: string, name: string): void {
    const h = this.pool.options.history;
    const k = `${op}:${name}`;
    h.errors.set(k, (h.errors.get(k) ?? 0) + 1);
  }

  private onExit(label: string, code: number | null, signal: NodeJS.Signals | null): void {
    const h = this.pool.options.history;
    const at = now();
    this.alive = false;
    this.paused = false;
    // Died holding: its belief ends with it (its lease lives on until the TTL runs out).
    if (this.holding) {
      const iv: HeldInterval = {
        worker: label,
        token: this.holding.token,
        from: this.holding.from,
        to: at,
        lost: false,
        died: true,
        ...this.holdFacts(undefined),
      };
      if (this.holding.mode) iv.mode = this.holding.mode;
      if (this.spec.role === 'election') h.terms.push(iv);
      else h.held[this.lockRole()].push(iv);
      this.holding = undefined;
    }
    // Killed with an increment in flight: its outcome is unknown (etcd's ledger settles it).
    const inFlight = this.counter?.died(label);
    if (inFlight) h.etcdIncrements.push(inFlight);
    if (!this.byeSeen) for (const l of this.leases) h.abandonedLeases.add(l);
    if (!this.killedByUs && !this.byeSeen) {
      h.unexpectedErrors.push(`${label} exited unexpectedly (code ${code}, signal ${signal}); see ${this.spec.id}.log`);
    }
    this.logStream?.end(`--- ${label} exited code=${code} signal=${signal}\n`);
  }

  /** The history list its holds go to (never called for election workers, whose terms go to `terms`). */
  private lockRole(): LockRole {
    const r = this.spec.role;
    if (r === 'election' || r === 'barrier' || r === 'dbarrier' || r === 'multilock')
      throw new Error(`${this.label}: a ${r} worker reported a lock hold`);
    return r;
  }

  /** Resolves true once the worker was frozen right after the first request of a hold, false after `limitMs`. */
  trapNextRead(limitMs: number, careful: boolean): Promise<boolean> {
    return this.desk.trapNextRead(limitMs, careful);
  }

  /** Arms a stale-write trap (StoreDesk.trapStale()). */
  trapStale(limitMs: number, take: (token: bigint) => Promise<void>): Promise<boolean> {
    return this.desk.trapStale(limitMs, take);
  }

  /** Arms an operator trap (StoreDesk.trapNextHold()). */
  trapNextHold(limitMs: number, take: (token: bigint) => Promise<void>): Promise<boolean> {
    return this.desk.trapNextHold(limitMs, take);
  }

  pause(): void {
    if (!this.alive || this.paused) return;
    this.child!.kill('SIGSTOP');
    this.paused = true;
  }

  resume(): void {
    if (!this.alive || !this.paused) return;
    this.child!.kill('SIGCONT');
    this.paused = false;
  }

  async kill(): Promise<void> {
    if (!this.alive) return;
    this.killedByUs = true;
    this.child!.kill('SIGKILL');
    await this.exited;
  }

  /** Asks the worker to stop and waits for it to exit on its own; true if it did within `limitMs`. */
  async stop(limitMs: number): Promise<boolean> {
    if (!this.alive) return true;
    this.resume();
    this.send({ t: 'stop' });
    const timer = new Promise<'late'>((resolve) => setTimeout(() => resolve('late'), limitMs).unref());
    const r = await Promise.race([this.exited.then(() => 'ok' as const), timer]);
    if (r === 'ok') return true;
    this.pool.options.log(`worker ${this.label} did not exit within ${limitMs} ms of stop; killing it`);
    await this.kill();
    return false;
  }

  async closeProxies(): Promise<void> {
    await Promise.all(this.proxies.map((p) => p.close()));
    this.proxies = [];
  }
}
