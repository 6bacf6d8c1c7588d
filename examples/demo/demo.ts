// The demo's state and its machinery: the cluster and the workers, the parent's own watch of the
// queue, the workers' events, the fenced ledger served over their pipes, the scenes' helpers, the
// inspector and the clean-up. The scenes are in scenes.ts, the verdict in verdict.ts, the command
// line in main.ts.
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, Session, type Watch } from '../../src/index.js';
import { startEtcd, type EtcdCluster } from '../../src/testing/index.js';
import { Inspector } from '../../src/cli/web/server.js';
import { FencedLedger, type WriteResult } from './ledger.js';
import { PostgresLedger } from './pg-ledger.js';
import { Narrator, ms, money, short } from './narrate.js';
import { Conditions, WorkerProc } from './procs.js';
import type { Job, LedgerRequest, WorkerEvent } from './protocol.js';
import { ELECTION, LOCK, type Settings } from './settings.js';

export interface Check {
  label: string;
  ok: boolean;
  /** Printed after the label instead of yes/NO. */
  value?: string;
  detail?: string;
}

export interface QueueEntry {
  key: string;
  lease: string;
  rev: bigint;
  at: number;
  scene: number;
  deletedAt?: number;
}

export interface Acquisition {
  who: string;
  token: bigint;
  key: string;
  at: number;
  scene: number;
}

export class Demo {
  readonly n: Narrator;
  readonly s: Settings;
  readonly cond = new Conditions();
  readonly ledger = new FencedLedger();
  /** The ledger in PostgreSQL, when it is installed: it decides the writes, `ledger` records them. */
  pgLedger?: PostgresLedger;
  /** The parent's session for the PostgreSQL ledger's writes: which etcd the workers' tokens came from. */
  ledgerSession?: Session;
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
  readonly stopWatching = new AbortController();
  readonly background: Promise<void>[] = [];
  scene = 0;
  /** "holds the lock" lines waiting for the parent's watch to report that key joining the queue. */
  private readonly pendingLocked = new Map<string, string>();
  /** Workers allowed to lose their lock in the current scene (the ghost). */
  expectedLoss = new Set<string>();

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
    n.step(`cluster up: ${cluster.members.map((m, i) => `${m.name} ${m.endpoint}${i === leader ? ' (Raft leader)' : ''}`).join(', ')}`);
    n.detail(`workers up: ${workers.map((x) => `${this.who(x)} pid ${this.proc(x).pid}`).join(', ')}`);
    this.init(workers);
    // The schedulers of scene 2 start while scene 1 runs: nine processes at once crowd a small machine.
    this.spawn(['s1', 's2', 's3']);
    this.init(['s1', 's2', 's3']);
    this.client = new Client({ endpoints: cluster.endpoints, dialTimeoutMs: 1000 });
    if (pgLedger) this.ledgerSession = await Session.create(this.client);
    await Promise.all([this.watchQueue(`${LOCK}/`), this.watchQueue(`${ELECTION}/`)]);
  }

  private spawn(names: string[]): void {
    for (const name of names) {
      this.procs.set(
        name,
        new WorkerProc(
          name,
          () => this.n.now(),
          (p, e) => this.onEvent(p, e),
          (p) => this.onExit(p),
        ),
      );
    }
  }

  ready(names: string[]): Promise<void> {
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
        (before
          ? this.n.dim(` · watches only ${this.leases.get(before.lease) ?? short(before.lease)}'s key`)
          : this.n.dim(' · first in line')),
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
        if (e.ttl !== this.s.workerTtl)
          n.detail(`${w} opened a session: lease ${short(e.lease)}, TTL ${e.ttl} s, renewed every ${ms((e.ttl * 1000) / 3)}`);
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

  trouble(what: string): void {
    this.troubles.push(what);
    this.n.step(this.n.red(`unexpected: ${what}`));
  }

  /** The fenced ledger, served to the workers over their pipes. */
  private onLedger(p: WorkerProc, id: number, req: LedgerRequest): void {
    const { n } = this;
    const w = this.who(p.name);
    if (req.op === 'read') {
      p.send({
        cmd: 'ledger-reply',
        id,
        reply: { ok: true, applied: this.ledger.has(req.job.id), highest: this.ledger.highest.toString() },
      });
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
    this.pgLedger.write(req.job, token, p.name, this.ledgerSession!).then(
      (v) =>
        reply(
          v.ok
            ? this.ledger.accepted(req.job, token, p.name, n.now())
            : this.ledger.refused(
                req.job,
                token,
                p.name,
                v.highest,
                `PostgreSQL refused it: StaleTokenError, token ${token} < ${v.highest} in its fence table`,
              ),
        ),
      (err: unknown) => this.cond.fail(new Error(`the ledger's PostgreSQL write failed: ${String(err)}`)),
    );
  }

  // ── scenes ──────────────────────────────────────────────────────────────────────────────────

  begin(title: string, intro: string[]): void {
    this.flushLocked();
    this.scene++;
    this.n.scene(title, intro);
  }

  async beat(): Promise<void> {
    await sleep(this.s.beatMs);
  }

  /** Send a lock command; resolves once that worker has unlocked again. */
  lockJob(name: string, j: Job, extra: { holdMs: number; ttl?: number; ghost?: boolean }): Promise<void> {
    const p = this.proc(name);
    const mark = p.mark();
    p.send({ cmd: 'lock', lock: LOCK, job: j, ...extra });
    return this.cond.until(`${name} to lock, write and unlock`, () => p.events('unlocked', mark).length > 0);
  }

  /** FIFO: in `scene`, the lock went to the queued keys in CreateRevision order, each with its own revision as token. */
  fifo(scene: number): { ok: boolean; order: string } {
    const acq = this.acquisitions.filter((a) => a.scene === scene);
    const queued = this.queue.filter((q) => q.scene === scene).sort((a, b) => (a.rev < b.rev ? -1 : 1));
    const ok = acq.length === queued.length && acq.every((a, i) => a.key === queued[i]!.key && a.token === queued[i]!.rev);
    return { ok, order: acq.map((a) => `${this.who(a.who)}(${a.token})`).join(' → ') };
  }

  // ── the end ─────────────────────────────────────────────────────────────────────────────────

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
    await this.ledgerSession?.close().catch(() => {}); // interrupted, etcd is gone already; else the check below sees a lease left
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
}

/** An error message for reading: lease ids shortened. */
export function tidy(message: string): string {
  return message.replace(/\b[0-9a-f]{12,16}\b/g, (hex) => short(hex));
}
