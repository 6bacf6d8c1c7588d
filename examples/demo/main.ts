// `npm run demo`: the story of the two seed articles, told live on a real local 3-member etcd
// cluster by real worker processes that are killed and frozen on cue.
//
//   1. Five workers contend for /locks/card-8801: FIFO by CreateRevision, fencing tokens, a ledger.
//   2. Leader election: SIGKILL the leader (a successor takes over within the TTL), then a graceful resign.
//   3. The ghost: a holder frozen (SIGSTOP) past its TTL is told on waking that the lock is gone, and
//      its late write is rejected by the ledger's fencing check anyway: by PostgreSQL itself, through
//      etcd-concurrency/fencing, when PostgreSQL is installed (else by an in-memory ledger).
//   4. SIGKILL etcd's Raft leader while the lock is held and waited for: work goes on.
//
// Usage: node --import tsx examples/demo/main.ts [--fast] [--quiet] [--web]
// --web: the web inspector (`etcd-concurrency inspect --web`) runs beside the story on the whole
// keyspace; the demo prints its URL and waits (20 s at most) for a browser to open it.
// Exits 0 when every invariant held, 1 otherwise, 2 on a bad command line, 130 on Ctrl-C.
// DEMO_DEBUG=1 also prints every worker event on stderr.
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, observeLeader, type Watch } from '../../src/index.js';
import { startEtcd, type EtcdCluster } from '../../src/testing/index.js';
import { Inspector } from '../../src/cli/web/server.js';
import { FencedLedger, type WriteResult } from './ledger.js';
import { PostgresLedger } from './pg-ledger.js';
import { Narrator, ms, money, short } from './narrate.js';
import { Conditions, WorkerProc } from './procs.js';
import type { Job, LedgerRequest, WorkerEvent } from './protocol.js';

const LOCK = '/locks/card-8801';
const ELECTION = '/election/scheduler';

interface Settings {
  mode: string;
  /** Lease TTL of the ordinary workers: long enough to ride out an etcd leader election. */
  workerTtl: number;
  /** The ghost's lease TTL: short, so that the pause which outlives it is short too. */
  ghostTtl: number;
  schedulerTtl: number;
  /** Work inside the critical section, scene 1. */
  holdMs: number;
  /** The ghost's slow part, during which it is frozen. */
  ghostHoldMs: number;
  /** Work inside the critical section, scene 4: long enough to kill etcd's leader meanwhile. */
  raftHoldMs: number;
  tickMs: number;
  /** A pause between scenes, so a human can read along. */
  beatMs: number;
}

const FAST: Settings = {
  mode: 'fast',
  workerTtl: 10,
  ghostTtl: 3,
  schedulerTtl: 3,
  holdMs: 250,
  ghostHoldMs: 1000,
  raftHoldMs: 1200,
  tickMs: 500,
  beatMs: 150,
};

const NORMAL: Settings = {
  mode: 'normal',
  workerTtl: 15,
  ghostTtl: 5,
  schedulerTtl: 5,
  holdMs: 1500,
  ghostHoldMs: 2000,
  raftHoldMs: 4000,
  tickMs: 1500,
  beatMs: 3000,
};

const JOBS: Job[] = [1250, 4999, 1800, 23000, 675, 4000, 1525, 9900, 330].map((cents, i) => ({
  id: `charge-${i + 1}`,
  label: `charge #${i + 1}`,
  cents,
}));
const job = (n: number): Job => JOBS[n - 1]!;

interface Check {
  label: string;
  ok: boolean;
  /** Printed after the label instead of yes/NO. */
  value?: string;
  detail?: string;
}

interface QueueEntry {
  key: string;
  lease: string;
  rev: bigint;
  at: number;
  scene: number;
  deletedAt?: number;
}

interface Acquisition {
  who: string;
  token: bigint;
  key: string;
  at: number;
  scene: number;
}

class Demo {
  readonly n: Narrator;
  readonly s: Settings;
  readonly cond = new Conditions();
  readonly ledger = new FencedLedger();
  /** The ledger in PostgreSQL, when it is installed: it decides the writes, `ledger` records them. */
  pgLedger?: PostgresLedger;
  readonly checks: Check[] = [];
  readonly procs = new Map<string, WorkerProc>();
  /** Lease id (hex) to the worker that owns it. */
  readonly leases = new Map<string, string>();
  /** Every key that joined the lock's queue, as the parent's watch saw it. */
  readonly queue: QueueEntry[] = [];
  readonly electionQueue: { value: string; rev: bigint; at: number }[] = [];
  readonly acquisitions: Acquisition[] = [];
  /** Unexpected trouble reported by workers: lost sessions or locks, errors. */
  readonly troubles: string[] = [];
  readonly observed: { who: string; term: bigint; at: number }[] = [];
  cluster?: EtcdCluster;
  client?: Client;
  inspector?: { server: Inspector; client: Client };
  private readonly stopWatching = new AbortController();
  private readonly background: Promise<void>[] = [];
  private scene = 0;
  /** "holds the lock" lines waiting for the parent's watch to report that key joining the queue. */
  private readonly pendingLocked = new Map<string, string>();
  /** Workers allowed to lose their lock in the current scene (the ghost). */
  private expectedLoss = new Set<string>();

  constructor(settings: Settings, quiet: boolean) {
    this.s = settings;
    this.n = new Narrator({ quiet, color: process.stdout.isTTY === true && !process.env.NO_COLOR });
  }

  proc(name: string): WorkerProc {
    return this.procs.get(name)!;
  }

  who(name: string): string {
    return this.n.name(name);
  }

  check(label: string, ok: boolean, detail?: string, value?: string): void {
    this.checks.push({ label, ok, ...(detail === undefined ? {} : { detail }), ...(value === undefined ? {} : { value }) });
  }

  // ── setup ────────────────────────────────────────────────────────────────────────────────────

  async setup(): Promise<void> {
    const { n, s } = this;
    n.title('etcd-concurrency demo: locks, leaders and a ghost, on a real 3-member etcd cluster', [
      `${s.mode} mode · timestamps are seconds since start · every worker is its own OS process`,
    ]);
    n.step('starting a local 3-member etcd cluster (m0, m1, m2) and six worker processes (w1 to w6)');
    const workers = ['w1', 'w2', 'w3', 'w4', 'w5', 'w6'];
    this.spawn(workers);
    const [cluster, pgLedger] = await Promise.all([startEtcd({ members: 3 }), PostgresLedger.start(), this.ready(workers)]);
    this.cluster = cluster;
    this.pgLedger = pgLedger;
    n.step(
      pgLedger
        ? `card 8801's ledger: a table in PostgreSQL ${pgLedger.server.version} (127.0.0.1:${pgLedger.server.port}), written through PostgresFence: the database checks the tokens`
        : "card 8801's ledger: in memory, checking the tokens itself (PostgreSQL is not installed here)",
    );
    const leader = await cluster.leaderIndex();
    n.step(
      `cluster up: ${cluster.members.map((m, i) => `${m.name} ${m.endpoint}${i === leader ? ' (Raft leader)' : ''}`).join(', ')}`,
    );
    n.detail(`workers up: ${workers.map((x) => `${this.who(x)} pid ${this.proc(x).pid}`).join(', ')}`);
    this.init(workers);
    // The schedulers of scene 2 start while scene 1 runs: nine processes at once crowd a small machine.
    this.spawn(['s1', 's2', 's3']);
    this.init(['s1', 's2', 's3']);
    this.client = new Client({ endpoints: cluster.endpoints, dialTimeoutMs: 1000 });
    await Promise.all([this.watchQueue(`${LOCK}/`), this.watchQueue(`${ELECTION}/`)]);
  }

  private spawn(names: string[]): void {
    for (const name of names) {
      this.procs.set(name, new WorkerProc(name, () => this.n.now(), (p, e) => this.onEvent(p, e), (p) => this.onExit(p)));
    }
  }

  private ready(names: string[]): Promise<void> {
    return this.cond.until(`${names.join(', ')} to start`, () => names.every((x) => this.proc(x).events('ready').length > 0), 60_000);
  }

  /** Tells workers where etcd is (they read it once they are up). */
  private init(names: string[]): void {
    const endpoints = this.cluster!.endpoints;
    for (const name of names) {
      // All endpoints, starting at a different one per worker, as a fleet of services would be configured.
      const i = [...this.procs.keys()].indexOf(name);
      const mine = endpoints.map((_, j) => endpoints[(i + j) % endpoints.length]!);
      this.proc(name).send({ cmd: 'init', name, endpoints: mine, ttl: this.s.workerTtl });
    }
  }

  /** The parent's own view of a queue, straight from etcd: who joined (and when left) the prefix. */
  private async watchQueue(prefix: string): Promise<void> {
    const w: Watch = this.client!.watch(prefix, { prefix: true, signal: this.stopWatching.signal });
    await w.created;
    this.background.push(
      (async () => {
        try {
          for await (const batch of w) {
            for (const e of batch.events) {
              const key = e.kv.key.toString();
              if (prefix.startsWith(ELECTION)) {
                if (e.type === 'put' && e.kv.version === 1n) {
                  this.electionQueue.push({ value: e.kv.value.toString(), rev: e.kv.createRevision, at: this.n.now() });
                }
              } else if (e.type === 'put' && e.kv.version === 1n) {
                this.onQueued({ key, lease: key.slice(prefix.length), rev: e.kv.createRevision, at: this.n.now(), scene: this.scene });
              } else if (e.type === 'delete') {
                const q = this.queue.find((x) => x.key === key && x.deletedAt === undefined);
                if (q) q.deletedAt = this.n.now();
              }
            }
            this.cond.notify();
          }
        } catch (err) {
          if (!this.stopWatching.signal.aborted) this.cond.fail(new Error(`the demo's own watch on ${prefix} failed: ${String(err)}`));
        }
      })(),
    );
  }

  private onQueued(q: QueueEntry): void {
    this.queue.push(q);
    const before = this.queue.filter((x) => x.deletedAt === undefined && x.rev < q.rev).sort((a, b) => (a.rev < b.rev ? 1 : -1))[0];
    const name = this.leases.get(q.lease) ?? `lease ${short(q.lease)}`;
    this.n.step(
      `${this.who(name)} joins the queue: key ${LOCK}/${short(q.lease)}, CreateRevision ${this.n.bold(String(q.rev))}` +
        (before ? this.n.dim(` · watches only ${this.leases.get(before.lease) ?? short(before.lease)}'s key`) : this.n.dim(' · first in line')),
    );
    this.flushLocked(q.key);
  }

  private flushLocked(key?: string): void {
    for (const [k, text] of [...this.pendingLocked]) {
      if (key !== undefined && k !== key) continue;
      this.pendingLocked.delete(k);
      this.n.step(text);
    }
  }

  // ── events from the workers ─────────────────────────────────────────────────────────────────

  private onEvent(p: WorkerProc, e: WorkerEvent): void {
    const { n } = this;
    if (process.env.DEMO_DEBUG) process.stderr.write(`${(n.now() / 1000).toFixed(3)} ${p.name} ${JSON.stringify(e)}\n`);
    const w = this.who(p.name);
    switch (e.ev) {
      case 'session':
        this.leases.set(e.lease, p.name);
        // Sessions with the ordinary TTL go without saying; the ghost's short one is worth a line.
        if (e.ttl !== this.s.workerTtl) n.detail(`${w} opened a session: lease ${short(e.lease)}, TTL ${e.ttl} s, renewed every ${ms((e.ttl * 1000) / 3)}`);
        break;
      case 'locked': {
        this.acquisitions.push({ who: p.name, token: BigInt(e.token), key: e.key, at: n.now(), scene: this.scene });
        const text = `${w} holds the lock · fencing token ${n.bold(e.token)}${e.waitedMs > 20 ? n.dim(` (waited ${ms(e.waitedMs)})`) : ''}`;
        // Tell it after the key's arrival in the queue, which the parent learns on another channel.
        if (this.queue.some((q) => q.key === e.key && q.scene === this.scene)) n.step(text);
        else this.pendingLocked.set(e.key, text);
        break;
      }
      case 'unlocked': {
        const took = n.now() - (p.last('releasing')?.at ?? n.now());
        if (took > 250) {
          n.detail(`${w}'s unlock took ${ms(took)}: sent while etcd had no Raft leader, it was retried until a member accepted it`);
        }
        break;
      }
      case 'signal':
        // The ghost's loss is told with its wake-up ('woke'); anyone else losing a lock is news.
        if (!this.expectedLoss.has(p.name)) this.trouble(`${p.name} lost its lock: ${e.reason}`);
        break;
      case 'woke':
        if (e.lost !== undefined || e.signalAborted) {
          n.step(`${w} wakes up: its ${ms(e.plannedMs)} of work took ${n.bold(ms(e.sleptMs))}. Before writing, it asks its lock handle:`);
          if (e.signalAborted) n.detail(`handle.signal had already fired: ${n.yellow(tidy(e.signalReason ?? ''))}`);
          else n.detail("handle.signal has not fired yet: the library's timers have not had their turn since the process woke");
          if (e.lost !== undefined) {
            n.detail(`handle.assertHeld() checks the lease deadline against the clock itself, and throws:`);
            n.detail(`  ${n.yellow(tidy(e.lost))}`);
          } else {
            n.detail('handle.assertHeld() did not throw');
          }
          if (!this.expectedLoss.has(p.name)) this.trouble(`${p.name} found its lock lost after its work: ${e.lost ?? 'signal aborted'}`);
        }
        break;
      case 'session-lost':
        if (!this.expectedLoss.has(p.name)) this.trouble(`${p.name} lost its session ${e.lease}: ${e.reason}`);
        break;
      case 'leading':
        this.leases.set(e.lease, p.name);
        n.step(`${w} leads the scheduler election · term ${n.bold(e.term)} ${n.dim(`(lease ${short(e.lease)}, TTL ${e.ttl} s)`)}`);
        break;
      case 'tick':
        n.detail(`${w} (term ${e.term}) dispatches batch #${e.n}`);
        break;
      case 'not-leading':
        if (e.why === 'shutdown') n.detail(`${w} stops leading (term ${e.term}): shutdown`);
        else this.trouble(`${p.name} lost leadership (term ${e.term}): ${e.why}`);
        break;
      case 'resigned':
        n.detail(`${w} resigned and closed its session`);
        break;
      case 'ledger':
        this.onLedger(p, e.id, e.req);
        break;
      case 'error':
        this.cond.fail(new Error(`${p.name} failed: ${e.message}`));
        break;
      default:
        break;
    }
    this.cond.notify();
  }

  private onExit(p: WorkerProc): void {
    if (!p.expectExit) {
      this.cond.fail(new Error(`${p.name} exited unexpectedly (${p.exitedWith})${p.stderr ? `:\n${p.stderr.trim()}` : ''}`));
    }
    this.cond.notify();
  }

  private trouble(what: string): void {
    this.troubles.push(what);
    this.n.step(this.n.red(`unexpected: ${what}`));
  }

  /** The fenced ledger, served to the workers over their pipes. */
  private onLedger(p: WorkerProc, id: number, req: LedgerRequest): void {
    const { n } = this;
    const w = this.who(p.name);
    if (req.op === 'read') {
      p.send({ cmd: 'ledger-reply', id, reply: { ok: true, applied: this.ledger.has(req.job.id), highest: this.ledger.highest.toString() } });
      return;
    }
    const token = BigInt(req.token);
    const reply = (r: WriteResult): void => {
      p.send({ cmd: 'ledger-reply', id, reply: { ok: r.ok, highest: r.highest.toString(), ...(r.ok ? {} : { reason: r.reason }) } });
      const what = `${req.job.label} ${money(req.job.cents)} with token ${token}`;
      if (r.ok) n.detail(`${w} → ledger: ${what}: ${n.green('accepted')}`);
      else n.step(`${w} → ledger: ${what}: ${n.red(n.bold('REJECTED'))} (${r.reason})`);
      this.cond.notify();
    };
    if (!this.pgLedger) return reply(this.ledger.write(req.job, token, p.name, n.now()));
    this.pgLedger.write(req.job, token, p.name).then(
      (v) =>
        reply(
          v.ok
            ? this.ledger.accepted(req.job, token, p.name, n.now())
            : this.ledger.refused(req.job, token, p.name, v.highest, `PostgreSQL refused it: StaleTokenError, token ${token} < ${v.highest} in its fence table`),
        ),
      (err: unknown) => this.cond.fail(new Error(`the ledger's PostgreSQL write failed: ${String(err)}`)),
    );
  }

  // ── scenes ──────────────────────────────────────────────────────────────────────────────────

  private begin(title: string, intro: string[]): void {
    this.flushLocked();
    this.scene++;
    this.n.scene(title, intro);
  }

  private async beat(): Promise<void> {
    await sleep(this.s.beatMs);
  }

  /** Send a lock command; resolves once that worker has unlocked again. */
  private lockJob(name: string, j: Job, extra: { holdMs: number; ttl?: number; ghost?: boolean }): Promise<void> {
    const p = this.proc(name);
    const mark = p.mark();
    p.send({ cmd: 'lock', lock: LOCK, job: j, ...extra });
    return this.cond.until(`${name} to lock, write and unlock`, () => p.events('unlocked', mark).length > 0);
  }

  /** FIFO: in `scene`, the lock went to the queued keys in CreateRevision order, each with its own revision as token. */
  private fifo(scene: number): { ok: boolean; order: string } {
    const acq = this.acquisitions.filter((a) => a.scene === scene);
    const queued = this.queue.filter((q) => q.scene === scene).sort((a, b) => (a.rev < b.rev ? -1 : 1));
    const ok = acq.length === queued.length && acq.every((a, i) => a.key === queued[i]!.key && a.token === queued[i]!.rev);
    return { ok, order: acq.map((a) => `${this.who(a.who)}(${a.token})`).join(' → ') };
  }

  async sceneLocks(): Promise<void> {
    const { n, s } = this;
    this.begin('Five workers, one card: a fair queue and fencing tokens', [
      `Lock ${LOCK}: each worker puts the key <lock>/<its lease id> on its own lease.`,
      "The key's CreateRevision, assigned by Raft, is its ticket in the queue and, once it holds",
      "the lock, its fencing token. Card 8801's ledger accepts a write only if its token is at",
      'least the highest token it has seen.',
    ]);
    n.step(`${['w1', 'w2', 'w3', 'w4', 'w5'].map((x) => this.who(x)).join(', ')} ask for the lock at the same moment (sessions: TTL ${s.workerTtl} s)`);
    await Promise.all(['w1', 'w2', 'w3', 'w4', 'w5'].map((name, i) => this.lockJob(name, job(i + 1), { holdMs: s.holdMs })));
    const { ok, order } = this.fifo(this.scene);
    n.step(`served strictly in ticket order: ${order}`);
    n.detail(`ledger: ${this.ledger.entries.length} charges, ${money(this.ledger.totalCents())} in total, highest token ${this.ledger.highest}`);
    if (!ok) this.trouble('scene 1: the lock was not granted in CreateRevision order');
  }

  async sceneElection(): Promise<void> {
    const { n, s } = this;
    const ttl = s.schedulerTtl;
    this.begin('Leader election: SIGKILL the leader, then a graceful resign', [
      `Three scheduler processes run runAsLeader('${ELECTION}') on ${ttl} s leases;`,
      'only the leader dispatches batches. A dashboard in the parent follows the election with',
      'observeLeader().',
    ]);
    const observer = new AbortController();
    this.stopWatching.signal.addEventListener('abort', () => observer.abort(), { once: true });
    this.background.push(
      (async () => {
        try {
          for await (const e of observeLeader(this.client!, ELECTION, { signal: observer.signal })) {
            if (e.type === 'none') {
              if (this.observed.length > 0) n.detail(`dashboard: ${n.dim('no leader')}`);
              continue;
            }
            this.observed.push({ who: e.leader.value, term: e.leader.fencingToken, at: n.now() });
            n.detail(`dashboard: leader is ${this.who(e.leader.value)} (term ${e.leader.fencingToken})`);
            this.cond.notify();
          }
        } catch (err) {
          if (!observer.signal.aborted) this.cond.fail(new Error(`observeLeader failed: ${String(err)}`));
        }
      })(),
    );
    const [s1, s2, s3] = ['s1', 's2', 's3'].map((x) => this.proc(x)) as [WorkerProc, WorkerProc, WorkerProc];
    await this.ready(['s1', 's2', 's3']);
    n.step(`scheduler processes up: ${[s1, s2, s3].map((p) => `${this.who(p.name)} pid ${p.pid}`).join(', ')}`);
    const campaign = (p: WorkerProc): void => p.send({ cmd: 'campaign', election: ELECTION, ttl, tickMs: s.tickMs });

    campaign(s1);
    await this.cond.until('s1 to lead', () => s1.events('leading').length > 0);
    for (const p of [s2, s3]) {
      campaign(p);
      await this.cond.until(`${p.name} to campaign`, () => this.electionQueue.some((q) => q.value === p.name));
      const q = this.electionQueue.find((x) => x.value === p.name)!;
      const before = this.electionQueue.filter((x) => x.rev < q.rev).pop();
      n.step(`${this.who(p.name)} campaigns too: its key has CreateRevision ${q.rev}; it waits, watching only ${before ? `${before.value}'s key` : '?'}`);
    }
    await this.cond.until('s1 to dispatch twice', () => s1.events('tick').length >= 2);

    const lease1 = s1.last('leading')!.lease;
    n.step(`${n.red('SIGKILL')} ${this.who('s1')} (pid ${s1.pid}): no resign, no revoke, the process is simply gone`);
    const killedAt = n.now();
    s1.signal('SIGKILL');
    await s1.exited;
    const left = await this.client!.leaseTimeToLive(BigInt(`0x${lease1}`)).catch(() => undefined);
    if (left && left.ttl > 0) {
      n.detail(`etcd still counts down s1's lease (${left.ttl} s left of ${left.grantedTtl}): it cannot tell dead from slow`);
    }
    await this.cond.until('s2 to take over', () => s2.events('leading').length > 0, ttl * 1000 + 15_000);
    const takeover = s2.events('leading')[0]!.at - killedAt;
    n.step(
      `${this.who('s2')} took over ${n.bold(ms(takeover))} after the kill (TTL ${ttl} s): the lease expired, etcd deleted s1's key, ` +
        'and s2 was watching exactly that key',
    );
    const bound = ttl * 1000 + 1000;
    this.check(
      `new leader after SIGKILL in ${Math.round(takeover)} ms (TTL ${ttl} s)`,
      takeover <= bound,
      `bound: TTL + 1 s for etcd's 500 ms expiry sweep`,
    );

    await this.cond.until('s2 to dispatch twice', () => s2.events('tick').length >= 2);
    n.step(`${this.who('s2')} is shut down gracefully: runAsLeader stops its task, then resigns (deletes its key)`);
    const resignAt = n.now();
    s2.send({ cmd: 'resign' });
    await this.cond.until('s3 to take over', () => s3.events('leading').length > 0, 10_000);
    const handover = s3.events('leading')[0]!.at - resignAt;
    n.step(`${this.who('s3')} leads ${n.bold(ms(handover))} after s2 was asked to step down: no TTL to wait out`);
    this.check(`graceful resign handed over in ${Math.round(handover)} ms`, handover < 1000);

    await this.cond.until('s3 to dispatch', () => s3.events('tick').length >= 2);
    s3.send({ cmd: 'resign' });
    await this.cond.until('s3 to resign', () => s3.events('resigned').length > 0 && s2.events('resigned').length > 0);
    await this.cond.until('the dashboard to see s3', () => this.observed.some((o) => o.who === 's3'), 5000);
    observer.abort();

    // One leader at a time, each term larger than the last, seen alike by the leaders and the dashboard.
    const terms = ['s1', 's2', 's3'].map((x) => BigInt(this.proc(x).events('leading')[0]!.term));
    const seen = this.observed.map((o) => `${o.who}:${o.term}`).join(',');
    const expected = ['s1', 's2', 's3'].map((x, i) => `${x}:${terms[i]}`).join(',');
    const ok = terms[0]! < terms[1]! && terms[1]! < terms[2]! && seen === expected;
    this.check('one leader at a time, terms increasing', ok, ok ? undefined : `dashboard saw ${seen}, expected ${expected}`);
    n.detail(`terms: ${terms.join(' < ')}; the dashboard saw exactly s1 → s2 → s3`);
  }

  async sceneGhost(): Promise<void> {
    const { n, s } = this;
    const ttl = s.ghostTtl;
    this.begin('The ghost: frozen past its TTL, told on waking, fenced anyway', [
      `w6 takes the lock on a ${ttl} s lease and is frozen with SIGSTOP in the middle of its work,`,
      'like a stop-the-world GC pause or a stalled VM. The job queue (at-least-once delivery) also',
      'hands charge #6 to w2.',
    ]);
    const w6 = this.proc('w6');
    this.expectedLoss.add('w6');
    const ghostDone = this.lockJob('w6', job(6), { holdMs: s.ghostHoldMs, ttl, ghost: true });
    await this.cond.until('w6 to start working', () => w6.events('working').length > 0);
    w6.pause();
    const frozenAt = n.now();
    const working = w6.last('working')!;
    n.step(
      `${this.who('w6')} read the ledger (charge #6 ${working.alreadyApplied ? 'already applied' : 'not applied yet'}) and began its slow part: ` +
        `${n.red('SIGSTOP')} ${this.who('w6')} (pid ${w6.pid})`,
    );
    const ghostKey = this.acquisitions.find((a) => a.who === 'w6')!.key;
    const w6Lease = ghostKey.slice(LOCK.length + 1);
    const left = await this.client!.leaseTimeToLive(BigInt(`0x${w6Lease}`)).catch(() => undefined);
    if (left && left.ttl > 0) n.detail(`w6's lease has ${left.ttl} s left, and a frozen process renews nothing`);

    const w2Done = this.lockJob('w2', job(6), { holdMs: s.holdMs });
    await this.cond.until(
      "etcd to expire w6's lease",
      () => this.queue.some((q) => q.key === ghostKey && q.deletedAt !== undefined),
      ttl * 1000 + 15_000,
    );
    const expiredAt = this.queue.find((q) => q.key === ghostKey)!.deletedAt!;
    n.step(`w6's lease expired on the server ${ms(expiredAt - frozenAt)} into the freeze: etcd deleted its key, the lock moves on`);
    await w2Done;
    await this.beat();

    n.step(`${n.green('SIGCONT')} ${this.who('w6')} after ${n.bold(ms(n.now() - frozenAt))} frozen (TTL ${ttl} s). It resumes mid-work, as if nothing happened`);
    w6.resume();
    await ghostDone;
    const woke = w6.last('woke');
    const told = woke !== undefined && (woke.signalAborted || woke.lost !== undefined);
    this.check('ghost told by its lock handle before writing', told, told ? undefined : 'handle.signal had not fired and assertHeld() did not throw');
    const rejected = this.ledger.rejections.find((r) => r.by === 'w6');
    this.check(
      'late write rejected by fencing',
      rejected !== undefined,
      rejected ? `token ${rejected.token} < ${rejected.highest}` : 'the ledger accepted the ghost',
    );
    if (rejected) {
      n.detail(
        `without the fence, ${rejected.job.label} would have been charged twice; the ledger holds it once, written by ${this.ledger.entries.find((e) => e.job.id === rejected.job.id)?.by ?? '?'}`,
      );
    }
    n.detail(
      `belt and braces: the library told w6 its lock was gone, and ${this.pgLedger ? 'PostgreSQL itself (PostgresFence)' : "the ledger's fencing check"} stopped it anyway`,
    );
    const { ok } = this.fifo(this.scene);
    if (!ok) this.trouble('scene 3: the lock was not granted in CreateRevision order');
    this.expectedLoss.delete('w6');
  }

  async sceneRaft(): Promise<void> {
    const { n, s } = this;
    const cluster = this.cluster!;
    this.begin("Kill etcd's Raft leader while the lock is held and waited for", [
      'w3 holds the lock while w4 and w5 wait in line. We SIGKILL whichever etcd member is the',
      `Raft leader. The others elect a new one; clients fail over; leases (TTL ${s.workerTtl} s) and`,
      'watches survive.',
    ]);
    const troublesBefore = this.troubles.length;
    const since = this.acquisitions.length;
    const w3 = this.proc('w3');
    const mark = w3.mark();
    const done = [this.lockJob('w3', job(7), { holdMs: s.raftHoldMs })];
    await this.cond.until('w3 to hold the lock', () => w3.events('working', mark).length > 0);
    done.push(this.lockJob('w4', job(8), { holdMs: s.raftHoldMs }));
    await this.cond.until('w4 to queue', () => this.queue.some((q) => q.scene === this.scene && this.leases.get(q.lease) === 'w4'));
    done.push(this.lockJob('w5', job(9), { holdMs: s.raftHoldMs }));
    await this.cond.until('w5 to queue', () => this.queue.some((q) => q.scene === this.scene && this.leases.get(q.lease) === 'w5'));

    const leader = await cluster.leaderIndex();
    const m = cluster.members[leader]!;
    n.step(`${n.red('SIGKILL')} etcd member ${n.bold(m.name)} (${m.endpoint}, pid ${m.pid}), the Raft leader`);
    const killedAt = n.now();
    await cluster.kill(leader, 'SIGKILL');
    const next = await cluster.leaderIndex(30_000);
    n.step(`the two survivors elected ${n.bold(cluster.members[next]!.name)} as Raft leader ${ms(n.now() - killedAt)} after the kill`);
    await Promise.all(done);
    const acq = this.acquisitions.slice(since);
    const { ok: fifo } = this.fifo(this.scene);
    const writes = this.ledger.entries.filter((e) => ['charge-7', 'charge-8', 'charge-9'].includes(e.job.id));
    const kept = fifo && acq.length === 3 && writes.length === 3 && this.troubles.length === troublesBefore;
    n.step(
      `work went on: ${acq.map((a) => `${this.who(a.who)}(${a.token})`).join(' → ')} held the lock in turn, ` +
        `${writes.length} charges written, ${this.troubles.length - troublesBefore} locks or sessions lost`,
    );
    this.check(
      'locks kept across Raft leader kill',
      kept,
      kept ? undefined : `fifo ${fifo}, acquisitions ${acq.length}, writes ${writes.length}, troubles ${this.troubles.length - troublesBefore}`,
    );
    const restartAt = n.now();
    await cluster.restart(leader);
    n.step(`${m.name} restarted from its data dir and rejoined in ${ms(n.now() - restartAt)}: 3 of 3 members healthy`);
  }

  // ── the end ─────────────────────────────────────────────────────────────────────────────────

  /** Invariants over the whole run. */
  finalChecks(): void {
    const fifoScenes = [...new Set(this.acquisitions.map((a) => a.scene))];
    const fifoBad = fifoScenes.filter((sc) => !this.fifo(sc).ok);
    this.checks.unshift(
      {
        label: 'FIFO order held',
        ok: fifoBad.length === 0 && this.acquisitions.length > 0,
        detail: `${this.acquisitions.length} acquisitions, each in CreateRevision order${fifoBad.length ? `; not in scene ${fifoBad.join(', ')}` : ''}`,
      },
      (() => {
        const tokens = this.acquisitions.map((a) => a.token);
        const ok = tokens.length > 0 && tokens.every((t, i) => i === 0 || t > tokens[i - 1]!) && this.ledger.tokensStrictlyIncreasing();
        return { label: 'tokens strictly increasing', ok, detail: `${tokens[0]} … ${tokens[tokens.length - 1]} over ${tokens.length} holders and the ledger` };
      })(),
      (() => {
        const d = this.ledger.doubleApplied();
        return { label: 'double-applied writes', ok: d === 0, value: String(d), detail: `${this.ledger.entries.length} charges applied once each` };
      })(),
    );
    this.check('no lock or session lost unexpectedly', this.troubles.length === 0, this.troubles.join('; ') || undefined);
  }

  /** With PostgreSQL: the database holds exactly the charges the story accepted, in token order. */
  async databaseCheck(): Promise<void> {
    if (!this.pgLedger) return;
    const rows = await this.pgLedger.charges();
    const want = this.ledger.entries.map((e) => `${e.job.id}@${e.token}`).join(',');
    const ok = rows.map((r) => `${r.job}@${r.token}`).join(',') === want && rows.every((r, i) => i === 0 || r.token > rows[i - 1]!.token);
    this.check('PostgreSQL holds the accepted charges, in token order', ok, `${rows.length} rows in its charges table`);
  }

  /**
   * `--web`: the web inspector on the whole keyspace, on its own client (as the CLI would run it),
   * at 127.0.0.1:8379 or a free port. Waits a little for a browser, so the story starts on the page.
   */
  async startInspector(): Promise<void> {
    const { n } = this;
    const client = new Client({ endpoints: this.cluster!.endpoints, dialTimeoutMs: 1000 });
    let server = new Inspector(client, { prefix: '', host: '127.0.0.1', port: 8379, showValues: true });
    let url: string;
    try {
      url = await server.start();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
      await server.close();
      server = new Inspector(client, { prefix: '', host: '127.0.0.1', port: 0, showValues: true });
      url = await server.start();
    }
    this.inspector = { server, client };
    n.always(n.bold(`web inspector: ${url}  (open it to watch the queue, the ghost and the failovers live)`));
    const waited = await Promise.race([server.firstPage.then(() => true), sleep(20_000, false)]);
    n.always(waited ? 'a browser is watching: starting' : 'no browser opened the page within 20 s: starting anyway');
    await sleep(this.s.beatMs);
  }

  /** Workers close their sessions and exit, the demo's client closes, the cluster stops. */
  async cleanup(): Promise<void> {
    const procs = [...this.procs.values()];
    await Promise.all(procs.map((p) => p.shutdown(5000)));
    let leftovers: string | undefined;
    if (this.client && this.cluster && !this.cond.failed) {
      try {
        const keys = (await this.client.getPrefix(`${LOCK}/`)).kvs.length + (await this.client.getPrefix(`${ELECTION}/`)).kvs.length;
        const leases = (await this.client.leaseLeases()).length;
        leftovers = `${keys} keys, ${leases} leases`;
        this.check('nothing left behind in etcd', keys === 0 && leases === 0, leftovers);
      } catch (err) {
        this.check('nothing left behind in etcd', false, String(err));
      }
    }
    this.stopWatching.abort();
    await this.inspector?.server.close();
    await this.inspector?.client.close();
    await this.client?.close();
    await Promise.allSettled(this.background);
    await this.cluster?.stop();
    await this.pgLedger?.stop();
    const alive = procs.filter((p) => p.alive).length;
    this.check(
      'cleaned up: cluster stopped, children gone',
      alive === 0 && (this.cluster?.members.every((m) => !m.running) ?? true),
      `${procs.length} worker processes exited, 3 etcd members stopped`,
    );
  }

  /** Kill everything at once (Ctrl-C, or a second failure during cleanup). */
  emergencyStop(): void {
    for (const p of this.procs.values()) p.signal('SIGKILL');
    void this.inspector?.server.close();
    void this.cluster?.stop();
    void this.pgLedger?.stop();
  }

  summary(error: unknown): boolean {
    const { n } = this;
    const allOk = error === undefined && this.checks.every((c) => c.ok);
    if (!n.quiet) n.always('');
    n.always(n.bold(`Invariants checked (${this.s.mode} mode, ${(n.now() / 1000).toFixed(1)} s):`));
    for (const c of this.checks) {
      const mark = c.ok ? n.green('✓') : n.red('✗');
      const value = c.value ?? (c.ok ? 'yes' : 'NO');
      n.always(`  ${mark} ${c.label}: ${c.ok ? value : n.red(value)}${c.detail ? n.dim(`  (${c.detail})`) : ''}`);
    }
    if (error !== undefined) n.always(`  ${n.red('✗')} demo ran to the end: ${n.red('NO')}  (${error instanceof Error ? error.message : String(error)})`);
    n.always(allOk ? n.green(n.bold('All invariants held.')) : n.red(n.bold('Some invariants FAILED.')));
    return allOk;
  }
}

/** An error message for reading: lease ids shortened. */
function tidy(message: string): string {
  return message.replace(/\b[0-9a-f]{12,16}\b/g, (hex) => short(hex));
}

function parseArgs(argv: string[]): { fast: boolean; quiet: boolean; web: boolean } | undefined {
  const flags = { fast: false, quiet: false, web: false };
  for (const a of argv) {
    if (a === '--fast') flags.fast = true;
    else if (a === '--web') flags.web = true;
    else if (a === '--quiet' || a === '-q') flags.quiet = true;
    else if (a === '--help' || a === '-h') return undefined;
    else {
      process.stderr.write(`demo: unknown option ${a}\n`);
      process.exitCode = 2;
      return undefined;
    }
  }
  return flags;
}

async function main(): Promise<void> {
  const flags = parseArgs(process.argv.slice(2));
  if (!flags) {
    const usage =
      'usage: npm run demo -- [--fast] [--quiet] [--web]\n  --fast   short TTLs (about 25 s, for CI)\n  --quiet  print only the final invariants\n' +
      '  --web    run the web inspector beside it and print its URL (http://127.0.0.1:8379/)\n';
    (process.exitCode === 2 ? process.stderr : process.stdout).write(usage);
    return;
  }
  const demo = new Demo(flags.fast ? FAST : NORMAL, flags.quiet);
  let interrupted = false;
  const onSignal = (sig: NodeJS.Signals): void => {
    if (interrupted) return;
    interrupted = true;
    process.stderr.write(`\ndemo: ${sig}: stopping workers and etcd\n`);
    demo.cond.fail(new Error(`interrupted by ${sig}`));
    demo.emergencyStop();
    process.exitCode = 130;
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  let error: unknown;
  try {
    await demo.setup();
    if (flags.web) await demo.startInspector();
    await demo.sceneLocks();
    await sleep(demo.s.beatMs);
    await demo.sceneElection();
    await sleep(demo.s.beatMs);
    await demo.sceneGhost();
    await sleep(demo.s.beatMs);
    await demo.sceneRaft();
  } catch (err) {
    error = err;
  }
  demo.finalChecks();
  try {
    await demo.databaseCheck();
  } catch (err) {
    error ??= err;
  }
  demo.n.scene('The end', [], false);
  demo.n.step('cleaning up: workers close their sessions (revoking their leases) and exit, the cluster stops');
  try {
    await demo.cleanup();
  } catch (err) {
    error ??= err;
    demo.emergencyStop();
  }
  demo.cond.fail(new Error('the demo is over'));
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  if (interrupted) return;
  const ok = demo.summary(error);
  if (error !== undefined && !flags.quiet) {
    for (const p of demo.procs.values()) if (p.stderr.trim()) process.stderr.write(`--- ${p.name} stderr ---\n${p.stderr}`);
  }
  process.exitCode = ok ? 0 : 1;
  // Everything is closed, so the process ends by itself. If something still holds it open, say so
  // (a bug in the demo or the library) instead of hanging.
  setTimeout(() => {
    process.stderr.write('demo: something kept the process alive after cleanup; exiting\n');
    process.exit(process.exitCode ?? 1);
  }, 5000).unref();
}

await main();
