// The workload: what each simulated process does, drawn from the seed as a plan (so that a failing
// schedule can be shrunk to fewer operations), and the actors that carry it out with the real
// primitives, telling the oracle what each believes it holds.
import type { Client } from '../../client/client.js';
import { compare, op as kv } from '../../client/kv.js';
import { DoubleBarrier } from '../../primitives/double-barrier.js';
import { Election, observeLeader, runAsLeader } from '../../primitives/election.js';
import { lockAll } from '../../primitives/multilock.js';
import { Mutex } from '../../primitives/mutex.js';
import { RWMutex } from '../../primitives/rwmutex.js';
import { Semaphore } from '../../primitives/semaphore.js';
import { Session } from '../../session.js';
import { type Belief, OPERATOR, type Oracle, type Rule } from './oracle.js';
import { Rng } from './rng.js';
import type { Proc } from './time.js';

export const WORKLOADS = ['mixed', 'mutex', 'rwmutex', 'semaphore', 'election', 'barrier', 'churn', 'snipe', 'marks'] as const;
export type WorkloadName = (typeof WORKLOADS)[number];

export type OpKind =
  | 'lock'
  | 'try-lock'
  | 'abort-lock'
  | 'read'
  | 'write'
  | 'permit'
  | 'campaign'
  | 'run-as-leader'
  | 'lock-all'
  | 'double-barrier'
  | 'foreign'
  | 'clear'
  | 'overwrite'
  | 'snipe'
  | 'crowd';

/** One operation of an actor. */
export interface Op {
  readonly id: number;
  readonly kind: OpKind;
  readonly name: string;
  readonly share: boolean;
  readonly holdMs: number;
  readonly gapMs: number;
  /** The wait is aborted after this long (0: never). */
  readonly abortMs: number;
  /** A foreign participant's keys of a nested name, created in the same Txn as its key. */
  readonly nested?: number;
  /** The operator's overwrite: which participant's key, by age (0: the oldest, a holder's). */
  readonly target?: number;
}

export interface SessionPlan {
  readonly ttl: number;
  readonly actors: Op[][];
}

export interface ProcPlan {
  readonly name: string;
  readonly sessions: SessionPlan[];
  /** Names of elections this process observes. */
  readonly observes: string[];
  /**
   * The member its client tries first (its endpoints listed from there on): watches and keepalives
   * stay on it while writes go to the leader, so a follower behind the leader serves them.
   */
  readonly member?: number;
}

export type FaultKind =
  | 'partition'
  | 'member-crash'
  | 'leader-loss'
  | 'stall'
  | 'lose-answer'
  | 'pause'
  | 'crash-proc'
  | 'operator-delete'
  | 'operator-put'
  | 'operator-revoke'
  | 'early-revoke'
  | 'compact'
  | 'follower-lag'
  | 'stream-break'
  | 'watch-cancel'
  | 'slow-answers';

/**
 * The faults drawn from the plan's stream for every schedule. 'watch-cancel' also comes from a stream
 * of its own (planFor), and with 'slow-answers' in the churn and snipe plans (see Shape.slow).
 */
export const FAULT_KINDS: readonly FaultKind[] = [
  'partition',
  'member-crash',
  'leader-loss',
  'stall',
  'lose-answer',
  'pause',
  'crash-proc',
  'operator-delete',
  'operator-put',
  'operator-revoke',
  'early-revoke',
  'compact',
  'follower-lag',
  'stream-break',
];

export interface Fault {
  readonly id: number;
  readonly at: number;
  readonly kind: FaultKind;
  /** Which process, which member (indexes), and for how long. */
  readonly target: number;
  readonly member: number;
  readonly ms: number;
}

export interface Plan {
  readonly procs: ProcPlan[];
  readonly faults: Fault[];
  /** Faults happen before this (virtual ms); after it the run must settle. */
  readonly quietAt: number;
}

const KINDS: Record<WorkloadName, readonly OpKind[]> = {
  mixed: ['lock', 'lock', 'try-lock', 'abort-lock', 'read', 'write', 'permit', 'campaign', 'run-as-leader', 'lock-all', 'double-barrier'],
  mutex: ['lock', 'lock', 'try-lock', 'abort-lock', 'lock-all'],
  rwmutex: ['read', 'read', 'write'],
  semaphore: ['permit'],
  election: ['campaign', 'campaign', 'run-as-leader'],
  barrier: ['double-barrier'],
  churn: ['lock', 'lock', 'abort-lock'],
  snipe: ['lock'],
  marks: ['lock', 'lock', 'lock', 'abort-lock'],
};

const NAME: Record<OpKind, readonly string[]> = {
  lock: ['locks/a', 'locks/b'],
  'try-lock': ['locks/a', 'locks/b'],
  'abort-lock': ['locks/a', 'locks/b'],
  'lock-all': ['locks/a'],
  read: ['rw/a'],
  write: ['rw/a'],
  permit: ['sem/a'],
  campaign: ['elect/a'],
  'run-as-leader': ['elect/a'],
  'double-barrier': ['dbar/a'],
  foreign: ['locks/a', 'sem/a'],
  clear: ['locks/a', 'rw/a', 'sem/a', 'elect/a'],
  overwrite: ['locks/a', 'rw/a', 'sem/a', 'elect/a'],
  snipe: ['locks/a'],
  crowd: ['locks/a'],
};

/** Which resource a holding of each kind writes through the fenced store (reads and permits write nothing exclusive). */
const FENCED: Partial<Record<OpKind, string>> = {
  lock: 'lock',
  'try-lock': 'lock',
  'abort-lock': 'lock',
  write: 'rw',
  campaign: 'leader',
  'run-as-leader': 'leader',
};

export const PERMITS = 2;
export const BARRIER_COUNT = 2;

/** How a plan is drawn: which operations, how many sessions and actors, how much sharing. */
interface Shape {
  readonly kinds: readonly OpKind[];
  /** How many client processes (2 or 3 unless said). */
  procs?(rng: Rng): number;
  sessions(rng: Rng): number;
  actors(rng: Rng): number;
  /** The chance that an operation of a session with several actors is made with `share`. */
  readonly share: number;
  name(rng: Rng, kind: OpKind): string;
  /** How long a holding lasts (unless said: mostly short, some long enough for a renewal to fail under them). */
  hold?(rng: Rng): number;
  /**
   * The chance that an operator process (etcdctl) also runs, deleting a name's keys in one revision
   * or writing a participant's key with a plain put (no lease).
   */
  readonly operator: number;
  /**
   * That operator's edits, made one after another (unless said: one or two, each a clear or an
   * overwrite); `op` draws an operation of one actor.
   */
  edits?(rng: Rng, op: (kind: OpKind) => Op): Op[];
  /**
   * Every process's unary answers come back slow and out of order while the faults last, and its
   * watches are cancelled a few times.
   */
  readonly slow?: boolean;
  /**
   * Another client's process keeps keys of a nested name under the lock's prefix from the start to
   * the end of the faults, more than SHORT_QUEUE (src/queue/state.ts) of them: every look-up counts
   * the queue long, so holders mark their keys.
   */
  readonly crowd?: boolean;
}

/** The named workloads, and half of the mixed one's seeds: every name of the kinds, little sharing. */
function broad(kinds: readonly OpKind[]): Shape {
  return {
    kinds,
    sessions: (rng) => (rng.chance(0.3) ? 2 : 1),
    actors: (rng) => (rng.chance(0.35) ? 2 : 1),
    share: 0.2,
    name: (rng, kind) => rng.pick(NAME[kind]),
    operator: 0,
  };
}

/**
 * The other half of the mixed workload's seeds: one primitive, one name, several calls of one
 * session racing (in-process turns, sharing, hand-overs), foreign participants created together
 * with keys of a nested name (ties in CreateRevision, long queues), and sometimes an operator who
 * deletes every key of the name in one revision.
 */
const FOCUSED: Record<'mutex' | 'rwmutex' | 'semaphore' | 'election', readonly OpKind[]> = {
  mutex: ['lock', 'lock', 'try-lock', 'abort-lock', 'lock-all', 'foreign'],
  rwmutex: ['read', 'read', 'write'],
  semaphore: ['permit', 'permit', 'foreign'],
  election: ['campaign', 'campaign', 'run-as-leader'],
};
const FOCUS_NAME: Record<string, string> = { mutex: 'locks/a', rwmutex: 'rw/a', semaphore: 'sem/a', election: 'elect/a' };

function focused(family: keyof typeof FOCUSED): Shape {
  return {
    kinds: FOCUSED[family],
    sessions: (rng) => (rng.chance(0.4) ? 2 : 1),
    actors: (rng) => rng.pick([1, 2, 2, 3]),
    share: 0.5,
    name: (_, kind) => (kind === 'lock-all' ? 'locks/a' : FOCUS_NAME[family]!),
    operator: 0.3,
  };
}

/**
 * The churn workload (a tenth of mixed's seeds): the calls of one session on one lock all made with `share`,
 * their answers slow and out of order, while the server keeps cancelling the processes' watches (a
 * holding whose watch fails is lost while its key stands: the next enqueue replaces that key). An
 * enqueue's answer may then be about an incarnation of the key that was deleted and made again
 * since (issue 35, 7).
 */
const CHURN: Shape = {
  kinds: KINDS.churn,
  sessions: () => 1,
  actors: (rng) => rng.pick([2, 3]),
  share: 1,
  name: () => 'locks/a',
  operator: 0,
  slow: true,
};

/**
 * The snipe workload (and a tenth of the mixed one's seeds): one process whose session runs four
 * actors on one lock, about half of their calls with `share`, each holding a moment; their answers
 * come back slow and out of order, the server cancels their watches a few times, and an operator
 * deletes every other participant key as it is made. A call's enqueue answer is then often about an
 * incarnation that was deleted and made again by another call of the session since, a call that may
 * have come and gone before that answer arrives (issue 35, 7).
 */
const SNIPE: Shape = {
  kinds: KINDS.snipe,
  procs: () => 1,
  sessions: () => 1,
  actors: () => 4,
  share: 0.5,
  name: () => 'locks/a',
  hold: (rng) => rng.between(0, 20),
  operator: 1,
  // It watches for holdMs, from a moment after the start to before the faults end.
  edits: (rng, op) => [{ ...op('snipe'), gapMs: rng.between(0, 300), holdMs: rng.between(4000, 5500) }],
  slow: true,
};

/**
 * The marks workload: two sessions in each of two or three processes on one lock whose queue counts long
 * (a crowd of a nested name's keys under its prefix), so that each holder marks its key and the
 * waiter behind a marked head takes the head's delete as its turn, after one Txn that confirms its
 * own key; an operator meanwhile deletes the name's keys in one revision or moves a participant's
 * key off its lease (a waiter's, most often): that Txn must then fail.
 */
const MARKS: Shape = {
  kinds: KINDS.marks,
  sessions: () => 2,
  actors: (rng) => rng.pick([1, 1, 2]),
  share: 0.3,
  name: () => 'locks/a',
  operator: 1,
  // Two or three edits within the faults' time, each a clear or a waiter's key moved off its lease.
  edits: (rng, op) =>
    Array.from({ length: rng.between(2, 3) }, () => ({
      ...(rng.chance(0.6) ? op('clear') : { ...op('overwrite'), target: rng.between(1, 3) }),
      holdMs: 0,
      gapMs: rng.between(300, 1600),
    })),
  crowd: true,
};

const SHAPES: Partial<Record<WorkloadName, Shape>> = { churn: CHURN, snipe: SNIPE, marks: MARKS };

/** The seed's plan. */
export function planFor(seed: number, options: { faults?: boolean; workload?: WorkloadName } = {}): Plan {
  const workload = options.workload ?? 'mixed';
  // A fifth of the mixed workload's seeds, chosen by a stream of their own, are snipe's plans and
  // churn's, a tenth each, a tenth of the rest the barrier workload's (members entering, giving up
  // and opening at once), and a tenth of what is left the marks workload's (a long queue whose
  // holders mark their keys). Half of the others focus on one primitive; the rest are drawn as before
  // these choices existed (from a stream of their own), so those seeds keep their meaning.
  const focus = workload === 'mixed' ? new Rng(seed, 'shape') : undefined;
  const mix = new Rng(seed, 'mix');
  const mixed = workload === 'mixed';
  const special = mixed && mix.chance(0.2) ? (mix.chance(0.5) ? SNIPE : CHURN) : undefined;
  const shape = special ?? (mixed && mix.chance(0.1) ? broad(KINDS.barrier) : mixed && mix.chance(0.1) ? MARKS : undefined);
  const withFaults = options.faults !== false;
  const plan = shape
    ? draw(new Rng(seed, 'plan'), shape, withFaults)
    : focus?.chance(0.5)
      ? draw(new Rng(seed, 'focus'), focused(focus.pick(['mutex', 'rwmutex', 'semaphore', 'election'] as const)), withFaults)
      : draw(new Rng(seed, 'plan'), SHAPES[workload] ?? broad(KINDS[workload]), withFaults);
  // From streams of their own, so that the rest of the plan keeps its meaning: in some schedules the
  // clients list the cluster's members in orders of their own, and the server cancels a process's
  // watches once.
  const first = new Rng(seed, 'first-member');
  const procs = first.chance(0.4) ? plan.procs.map((p) => ({ ...p, member: first.int(3) })) : plan.procs;
  const extra = new Rng(seed, 'watch-cancel');
  const faults = [...plan.faults];
  if (withFaults && workload !== 'churn' && extra.chance(0.15)) {
    const target = extra.int(plan.procs.length);
    faults.push({ id: faults.length, at: extra.between(50, plan.quietAt - 1000), kind: 'watch-cancel', target, member: 0, ms: 0 });
    faults.sort((a, b) => a.at - b.at || a.id - b.id);
  }
  return { ...plan, procs, faults };
}

function draw(rng: Rng, shape: Shape, withFaults: boolean): Plan {
  const { kinds } = shape;
  let id = 0;
  const procs: ProcPlan[] = [];
  const nProcs = shape.procs ? shape.procs(rng) : rng.between(2, 3);
  const op = (kind: OpKind, nActors: number): Op => ({
    id: id++,
    kind,
    name: shape.name(rng, kind),
    share: nActors > 1 && rng.chance(shape.share),
    // Mostly short holds; some long enough for a renewal to fail under them.
    holdMs: shape.hold ? shape.hold(rng) : rng.chance(0.15) ? rng.between(1500, 8000) : rng.between(0, 400),
    gapMs: rng.between(0, 300),
    abortMs: kind === 'abort-lock' ? rng.between(1, 600) : kind === 'double-barrier' ? rng.between(500, 3000) : 0,
    // Past a page of the look-up (8), sometimes past a long queue (32).
    ...(kind === 'foreign' ? { nested: rng.chance(0.3) ? rng.between(33, 40) : rng.between(8, 12) } : {}),
    ...(kind === 'overwrite' ? { target: rng.chance(0.7) ? 0 : rng.between(1, 3) } : {}),
    ...(kind === 'crowd' ? { nested: rng.between(33, 40) } : {}),
  });
  for (let p = 0; p < nProcs; p++) {
    const sessions: SessionPlan[] = [];
    const nSessions = shape.sessions(rng);
    for (let s = 0; s < nSessions; s++) {
      const actors: Op[][] = [];
      const nActors = shape.actors(rng);
      for (let a = 0; a < nActors; a++) {
        const ops: Op[] = [];
        const nOps = rng.between(2, 5);
        for (let o = 0; o < nOps; o++) {
          ops.push(op(rng.pick(kinds), nActors));
        }
        actors.push(ops);
      }
      sessions.push({ ttl: rng.pick([3, 5, 10]), actors });
    }
    const observes = kinds.includes('campaign') && rng.chance(0.5) ? ['elect/a'] : [];
    procs.push({ name: `p${p + 1}`, sessions, observes });
  }
  const faults: Fault[] = [];
  const quietAt = 6000;
  if (withFaults) {
    const nFaults = rng.between(0, 4);
    for (let f = 0; f < nFaults; f++) {
      faults.push({
        id: f,
        at: rng.between(50, quietAt - 1000),
        kind: rng.pick(FAULT_KINDS),
        target: rng.int(nProcs),
        member: rng.int(3),
        ms: rng.pick([200, 800, 2500, 6000, 12000]),
      });
    }
    if (shape.slow) {
      for (let p = 0; p < nProcs; p++) {
        faults.push({ id: faults.length, at: 50, kind: 'slow-answers', target: p, member: 0, ms: quietAt - 50 });
        for (let n = rng.between(2, 4); n > 0; n--) {
          faults.push({ id: faults.length, at: rng.between(200, quietAt - 200), kind: 'watch-cancel', target: p, member: 0, ms: 0 });
        }
      }
    }
    faults.sort((a, b) => a.at - b.at || a.id - b.id);
    // The operator's deletes come within the faults' time too: gaps that add up to less than 5 s.
    if (shape.operator > 0 && rng.chance(shape.operator)) {
      const edits = shape.edits
        ? shape.edits(rng, (kind) => op(kind, 1))
        : Array.from({ length: rng.between(1, 2) }, () => ({
            ...op(rng.chance(0.5) ? 'clear' : 'overwrite', 1),
            holdMs: 0,
            gapMs: rng.between(300, 2500),
          }));
      procs.push({ name: OPERATOR, sessions: [{ ttl: 10, actors: [edits] }], observes: [] });
    }
  }
  if (shape.crowd) {
    procs.push({
      name: 'crowd',
      sessions: [{ ttl: 10, actors: [[{ ...op('crowd', 1), gapMs: 0, holdMs: rng.between(4000, 5500) }]] }],
      observes: [],
    });
  }
  return { procs, faults, quietAt };
}

/** A session that is replaced when lost (creation retried), shared by its actors. */
export class SessionHolder {
  private current: Promise<Session | undefined> | undefined;
  private closed = false;

  constructor(
    private readonly client: Client,
    private readonly ttl: number,
    /** Told the lease of each session that is lost (not closed). */
    private readonly lost: (lease: bigint) => void = () => {},
  ) {}

  async get(): Promise<Session | undefined> {
    for (let attempt = 0; attempt < 50 && !this.closed; attempt++) {
      const s = await (this.current ??= Session.create(this.client, { ttl: this.ttl }).then(
        (s) => this.watchLoss(s),
        () => undefined,
      ));
      if (s && !s.signal.aborted) return s;
      this.current = undefined;
      if (s) void s.close().catch(() => {});
      await sleep(200);
    }
    return undefined;
  }

  private watchLoss(s: Session): Session {
    void s.done.then((e) => {
      if (e.reason === 'deadline' || e.reason === 'lease_gone') this.lost(s.leaseId);
    });
    return s;
  }

  async close(): Promise<void> {
    this.closed = true;
    const s = await this.current;
    await s?.close().catch(() => {});
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** What an actor reports to: the oracle, the trace, and a line saying what it does now. */
export interface ActorContext {
  readonly proc: Proc;
  readonly oracle: Oracle;
  readonly say: (line: string) => void;
  readonly doing: (what: string) => void;
}

interface Held {
  readonly key: string;
  readonly fencingToken: bigint;
  readonly signal: AbortSignal;
  assertHeld(): void;
}

/** How a grant came: an RWMutex mode, made on a holding of its process, asked for with `share`. */
type GrantedAs = Pick<Belief, 'mode' | 'onHolding' | 'shared'>;

/**
 * Tells the oracle about a holding and ends the belief when its signal aborts (with the loss's
 * reason) or when the returned function is called (a release).
 */
function believe(
  ctx: ActorContext,
  kind: string,
  name: string,
  h: Held,
  session: Session,
  rule: Rule,
  asked: number,
  as: GrantedAs = {},
): () => void {
  const b: Belief = ctx.oracle.granted(
    {
      kind,
      name,
      key: h.key,
      token: h.fencingToken,
      lease: session.leaseId,
      proc: ctx.proc,
      assertHeld: () => h.assertHeld(),
      asked,
      ...as,
    },
    rule,
  );
  const end = (): void => ctx.oracle.ended(b, h.signal.aborted ? lossReason(h.signal.reason) : undefined);
  if (h.signal.aborted) end();
  else h.signal.addEventListener('abort', end, { once: true });
  return end;
}

/** The `reason` of an OwnershipLostError (key_deleted, released, ...). */
function lossReason(err: unknown): string | undefined {
  const r = (err as { reason?: unknown } | undefined)?.reason;
  return typeof r === 'string' ? r : undefined;
}

/** Runs one actor's operations in order. */
export async function actor(ctx: ActorContext, holder: SessionHolder, ops: readonly Op[]): Promise<void> {
  for (const op of ops) {
    ctx.doing(`sleeping before op ${op.id}`);
    await sleep(op.gapMs);
    ctx.doing(`getting a session for op ${op.id}`);
    const session = await holder.get();
    if (!session) return;
    ctx.doing(`op ${op.id} ${op.kind} ${op.name} on lease ${session.leaseId.toString(16)}`);
    try {
      await operate(ctx, session, op);
    } catch (err) {
      ctx.say(`op ${op.id} ${ctx.proc.name} ${op.kind} ${op.name} failed: ${(err as Error).name}`);
    }
  }
}

/** A signal that aborts after `ms` (0: never), and its timer's clearing. */
function deadline(ms: number): { signal?: AbortSignal; clear(): void } {
  if (ms <= 0) return { clear() {} };
  const c = new AbortController();
  const t = setTimeout(() => c.abort(new Error('gave up')), ms);
  return { signal: c.signal, clear: () => clearTimeout(t) };
}

async function operate(ctx: ActorContext, session: Session, op: Op): Promise<void> {
  const asked = Math.round(performance.now());
  const d = deadline(op.abortMs);
  const wait = d.signal ? { signal: d.signal } : {};
  const hold = async (h: { key: string; fencingToken?: bigint; assertHeld?: () => void }, end: () => void): Promise<void> => {
    ctx.doing(`op ${op.id} holding ${h.key}`);
    await sleep(op.holdMs);
    // The protected write, as a careful holder makes it: check, then write with the token, which
    // the fenced store refuses if a newer token wrote first.
    let held = true;
    try {
      h.assertHeld?.();
    } catch {
      held = false;
    }
    const family = FENCED[op.kind];
    if (held && family && h.fencingToken !== undefined) ctx.oracle.fencedWrite(`${family} ${op.name}`, h.fencingToken);
    end();
    ctx.doing(`op ${op.id} releasing ${h.key}`);
  };
  try {
    switch (op.kind) {
      case 'lock':
      case 'abort-lock':
      case 'try-lock': {
        const m = new Mutex(session, op.name);
        const h = op.kind === 'try-lock' ? await m.tryLock({ share: op.share }) : await m.lock({ ...wait, share: op.share });
        d.clear();
        if (!h) return ctx.say(`op ${op.id} ${ctx.proc.name} try ${op.name}: busy`);
        await hold(h, believe(ctx, 'lock', op.name, h, session, 'exclusive', asked, { shared: op.share }));
        await h.unlock();
        return;
      }
      case 'lock-all': {
        const names = ['locks/a', 'locks/b'];
        const h = await lockAll(session, names, wait);
        d.clear();
        const ends = names.map((n) => {
          const one = h.handles.get(n)!;
          return believe(
            ctx,
            'lock',
            n,
            { key: one.key, fencingToken: one.fencingToken, signal: h.signal, assertHeld: () => h.assertHeld() },
            session,
            'exclusive',
            asked,
            { onHolding: true }, // each lock was proved before the last one: judged on the call's time
          );
        });
        await hold({ key: names.join('+') }, () => {
          for (const e of ends) e();
        });
        await h.unlock();
        return;
      }
      case 'read':
      case 'write': {
        const rw = new RWMutex(session, op.name);
        const queued = op.kind === 'read' ? ctx.oracle.writersQueued(op.name, session.leaseId) : undefined;
        const h = op.kind === 'read' ? await rw.rLock({ ...wait, ...(op.share ? {} : { share: false }) }) : await rw.lock(wait);
        d.clear();
        // A read shares by default (op.share leaves the default); one made while this session holds the
        // write lock is a downgrade: it holds at once, on the write lock's key.
        const downgrade = h.mode === 'read' && h.key === rw.writeKey;
        const as: GrantedAs = downgrade ? { onHolding: true, shared: true } : { shared: op.kind === 'read' && op.share };
        const end = believe(ctx, 'rw', op.name, h, session, op.kind, asked, { mode: op.kind, ...as });
        if (queued && h.mode === 'read') ctx.oracle.readGranted(lastBelief(ctx), queued);
        // A writer sometimes downgrades: a read lock while holding the write lock.
        if (op.kind === 'write' && op.share) {
          const r = await rw.rLock().catch(() => undefined);
          if (r) {
            const endRead = believe(ctx, 'rw', op.name, r, session, 'read', asked, { mode: 'read', onHolding: true, shared: true }); // a downgrade
            await hold(h, () => {
              endRead();
              end();
            });
            await r.unlock();
            await h.unlock();
            return;
          }
        }
        await hold(h, end);
        await h.unlock();
        return;
      }
      case 'permit': {
        const s = new Semaphore(session, op.name, { permits: PERMITS });
        const h = await s.acquire({ ...wait, share: op.share });
        d.clear();
        await hold(h, believe(ctx, 'permit', op.name, h, session, PERMITS, asked, { shared: op.share }));
        await h.release();
        return;
      }
      case 'campaign': {
        const e = new Election(session, op.name);
        const h = await e.campaign(`${ctx.proc.name}-${op.id}`, { ...wait, share: op.share });
        d.clear();
        const end = believe(
          ctx,
          'leader',
          op.name,
          { ...h, key: h.key, fencingToken: h.fencingToken, signal: h.signal, assertHeld: () => h.assertLeader() },
          session,
          'exclusive',
          asked,
          { shared: op.share },
        );
        ctx.doing(`op ${op.id} leading ${h.key}`);
        // Proclaims through the hold, every 100 ms or so: one may race an operator's edit of the key.
        const proclaims = Math.max(1, Math.floor(op.holdMs / 100));
        for (let i = 0; i < proclaims; i++) {
          await sleep(op.holdMs / (proclaims + 1));
          await h.proclaim(`${ctx.proc.name}-${op.id}-${i}`).catch(() => {});
        }
        await sleep(op.holdMs / (proclaims + 1));
        end();
        await h.resign();
        return;
      }
      case 'run-as-leader': {
        const c = new AbortController();
        const stop = setTimeout(() => c.abort(), 4000);
        try {
          await runAsLeader(session, op.name, { value: `${ctx.proc.name}-${op.id}`, once: true, signal: c.signal }, async (h) => {
            const end = believe(
              ctx,
              'leader',
              op.name,
              { key: h.key, fencingToken: h.fencingToken, signal: h.signal, assertHeld: () => h.assertLeader() },
              session,
              'exclusive',
              asked,
            );
            await hold({ key: h.key, fencingToken: h.fencingToken, assertHeld: () => h.assertLeader() }, end);
          });
        } finally {
          clearTimeout(stop);
        }
        return;
      }
      case 'foreign': {
        // A participant of another client (Go's Mutex or Semaphore on the same name) that wrote keys
        // of a nested name in the same Txn as its key: they share its CreateRevision and sort before
        // it, so a look-up reads a page of them first. Its lease is not renewed: the key goes when it
        // is revoked after the hold, or when it expires.
        const client = session.client;
        const { id } = await client.leaseGrant(3);
        const key = `${op.name}/${id.toString(16)}`;
        const nested = Array.from({ length: op.nested ?? 0 }, (_, i) => kv.put(`${op.name}/-/${op.id}-${i}`, '', id));
        await client.txn(
          {
            compare: [compare.createRevision(key, '=', 0n)],
            success: [kv.put(key, op.name.startsWith('sem/') ? String(PERMITS) : '', id), ...nested],
            failure: [],
          },
          { idempotent: true },
        );
        ctx.say(`op ${op.id} ${ctx.proc.name} foreign participant ${key} with ${nested.length} nested keys`);
        await sleep(op.holdMs);
        await client.leaseRevoke(id).catch(() => {});
        return;
      }
      case 'crowd': {
        // Another client's keys of a nested name (`<name>/-/...`), on a lease of its own, from the
        // start through the faults: every count of the lock's queue finds it long.
        const client = session.client;
        const { id } = await client.leaseGrant(10);
        const keys = Array.from({ length: op.nested ?? 0 }, (_, i) => `${op.name}/-/${op.id}-${i}`);
        const gone = keys.map((k) => compare.createRevision(k, '=', 0n));
        const puts = keys.map((k) => kv.put(k, '', id));
        ctx.say(`op ${op.id} ${ctx.proc.name} crowd of ${keys.length} nested keys`);
        // Made again, every half second, once an operator's clear has taken them all (only then:
        // never a key an operator moved off its lease).
        for (const end = performance.now() + op.holdMs; performance.now() < end; ) {
          await client.txn({ compare: gone, success: puts, failure: [] }, { idempotent: true }).catch(() => {});
          await sleep(500);
        }
        await client.leaseRevoke(id).catch(() => {});
        return;
      }
      case 'clear':
        // The operator deletes every key of the name, holders' and waiters' alike, in one revision.
        await session.client.delete(`${op.name}/`, { prefix: true });
        return;
      case 'snipe': {
        // The operator watches the name for holdMs and deletes every other participant key as it is
        // made (etcdctl watch, then del): the first, the third, ... The key made again after a delete
        // is left to the call that made it, which may hold and release it while the answer that
        // another call's enqueue got about the deleted one is still on its way.
        const stop = new AbortController();
        const t = setTimeout(() => stop.abort(), op.holdMs);
        let made = 0;
        try {
          for await (const batch of session.client.watch(`${op.name}/`, { prefix: true, signal: stop.signal })) {
            for (const e of batch.events) {
              const participant = /^[0-9a-f]+$/.test(e.kv.key.toString('latin1').slice(op.name.length + 1));
              if (e.type !== 'put' || e.kv.version !== 1n || e.kv.lease === 0n || !participant) continue;
              if (made++ % 2 === 0) await session.client.delete(e.kv.key).catch(() => {});
            }
          }
        } finally {
          clearTimeout(t);
          stop.abort();
        }
        return;
      }
      case 'overwrite': {
        // The operator's plain put on a participant's key (a holder's, most often): it keeps its
        // CreateRevision and loses its lease (issue 35, 2 and 3).
        const { kvs } = await session.client.getPrefix(`${op.name}/`);
        const participants = kvs
          .filter((kv) => kv.lease !== 0n && /^((read|write)\/)?[0-9a-f]+$/.test(kv.key.toString('latin1').slice(op.name.length + 1)))
          .sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1));
        const kv = participants[Math.min(op.target ?? 0, participants.length - 1)];
        if (kv) await session.client.put(kv.key, 'operator');
        return;
      }
      case 'double-barrier': {
        const b = new DoubleBarrier(session, op.name, BARRIER_COUNT);
        await barrierCall(
          ctx,
          session,
          undefined,
          d.signal,
          () => b.enter(wait),
          () => b.key,
        );
        d.clear();
        ctx.say(`op ${op.id} ${ctx.proc.name} entered ${op.name}`);
        await sleep(op.holdMs);
        const out = deadline(op.abortMs);
        try {
          const key = b.key;
          await barrierCall(
            ctx,
            session,
            key,
            out.signal,
            () => b.leave(out.signal ? { signal: out.signal } : {}),
            () => key,
          );
        } finally {
          out.clear();
        }
        ctx.say(`op ${op.id} ${ctx.proc.name} left ${op.name}`);
        return;
      }
    }
  } finally {
    d.clear();
  }
}

/**
 * Runs a DoubleBarrier call (enter() of a new member, or leave() of member `key`) and tells the
 * oracle how it ended (`member`: the key it resolved with), with when it began to give up: `signal`
 * or the session's aborted.
 */
async function barrierCall(
  ctx: ActorContext,
  session: Session,
  key: string | undefined,
  signal: AbortSignal | undefined,
  call: () => Promise<void>,
  member: () => string | undefined,
): Promise<void> {
  const now = (): number => Math.round(performance.now());
  const calledAt = now();
  let from: number | undefined;
  const abort = (): void => void (from ??= now());
  signal?.addEventListener('abort', abort, { once: true });
  session.signal.addEventListener('abort', abort, { once: true });
  const told = { proc: ctx.proc.name, lease: session.leaseId, ...(key !== undefined ? { key } : {}), calledAt };
  try {
    await call();
    const k = member();
    if (k !== undefined)
      ctx.oracle.barrierCall({ ...told, key: k, from: calledAt, at: now(), outcome: key === undefined ? 'entered' : 'left' });
  } catch (err) {
    // Failed on its own (not aborted): only its way out needed etcd, the first try of its key's delete
    // and closeIfLast()'s three calls; a cut earlier in a long call excuses nothing.
    const { callTimeoutMs, dialTimeoutMs } = session.client;
    const tail = Math.max(calledAt, now() - (callTimeoutMs + 3 * dialTimeoutMs));
    ctx.oracle.barrierCall({ ...told, from: from ?? tail, at: now(), outcome: 'gave-up' });
    throw err;
  } finally {
    signal?.removeEventListener('abort', abort);
    session.signal.removeEventListener('abort', abort);
  }
}

function lastBelief(ctx: ActorContext): Belief {
  return ctx.oracle.last!;
}

/** Watches who leads `name` until `signal` aborts, checking every event against the store's history. */
export async function observer(
  ctx: ActorContext,
  client: Client,
  name: string,
  signal: AbortSignal,
  leaders: (rev: bigint) => { key: string; token: bigint } | null | 'compacted',
): Promise<void> {
  while (!signal.aborted) {
    try {
      for await (const ev of observeLeader(client, name, { signal })) {
        if (ev.type === 'leader') ctx.oracle.observed(name, ev.leader.key, ev.leader.fencingToken, ev.revision, leaders);
      }
    } catch {
      await sleep(200);
    }
  }
}
