// What runAsLeader's retries between terms use.
import { Backoff, sleep } from '../client/backoff.js';
import { AuthenticationError, ClientClosedError, EtcdError, PermissionDeniedError } from '../client/errors.js';
import { SessionExpiredError } from '../errors.js';
import { rethrown } from '../rethrow.js';
import type { Client } from '../client/client.js';
import { retryWhile } from '../client/backoff.js';
import { CompactedError, InvalidArgumentError, isTransient } from '../client/errors.js';
import { op, toBuffer, txnRange, type Bytes, type KeyValue } from '../client/kv.js';
import { QueuedIterator } from '../client/queued-iterator.js';
import { telemetryOf } from '../metrics/telemetry.js';
import { channels } from '../diagnostics.js';
import { LeadershipLostError, NotLeaderError, OwnershipLostError } from '../errors.js';
import { participantKey, validateName } from '../keys.js';
import { Session } from '../session.js';
import { acquire, type AcquireOptions } from '../queue/acquire.js';
import type { Ownership } from '../queue/ownership.js';
import { OwnerHandleBase, type OwnerHandle } from './handle.js';
import { oldestParticipant } from './participants.js';
import type { ReleaseResult } from '../queue/release.js';
import { oldestRule, ourKeyStands, participantScope, participantTicket, ticketLost } from '../queue/oldest.js';
import type { LeaderHealth } from './health.js';
import type { LostErrorFactory } from '../queue/wait.js';

/** Options of `campaign()`: stop waiting (`signal`), and Go's sharing of one key by calls of this process (`share`). */
export type CampaignOptions = AcquireOptions;

/** Who leads an election. */
export interface LeaderInfo {
  /** The leader's key, `<name>/<lease id in hex>`. */
  key: string;
  /** The proclaimed value, as UTF-8 text. */
  value: string;
  /** The proclaimed value as bytes. */
  valueBytes: Buffer;
  /** The key's CreateRevision: the leadership term, strictly increasing across leaders. */
  fencingToken: bigint;
  leaseId: bigint;
}

/**
 * A change seen by `observe()`: a leader (new, or a new value), or no leader at all. The value is
 * at `event.leader.value` once `event.type === 'leader'` narrowed it:
 * `for await (const ev of election.observe()) if (ev.type === 'leader') console.log(ev.leader.value)`.
 * `revision` is the etcd revision the event was read at.
 */
export type LeaderEvent = { type: 'leader'; leader: LeaderInfo; revision: bigint } | { type: 'none'; revision: bigint };

const leadershipLost: LostErrorFactory = (key, message, options) => new LeadershipLostError(message, key, options);

function leaderInfo(kv: KeyValue): LeaderInfo {
  return {
    key: kv.key.toString(),
    value: kv.value.toString('utf8'),
    valueBytes: kv.value,
    fencingToken: kv.createRevision,
    leaseId: kv.lease,
  };
}

/**
 * Leader election on etcd: candidates queue by CreateRevision and the oldest leads. Interoperates
 * with Go's `concurrency.Election` and `etcdctl elect` on the same name.
 */
export class Election {
  readonly name: string;
  /** This session's candidate key, `<name>/<lease id in hex>`. */
  readonly key: string;

  constructor(
    readonly session: Session,
    name: string,
  ) {
    this.name = validateName(name, 'election name');
    this.key = participantKey(this.name, session.leaseId);
  }

  /**
   * Becomes a candidate with `value` and resolves once this candidate leads, confirmed against our
   * key on our lease. A second campaign of this process on the same session and name waits in the
   * process, with no request to etcd, until the first one's term ends (resigned, lost or aborted),
   * then campaigns with a key of its own: a new term, a new fencing token. With `share: true` on
   * both it joins the first's key instead, as Go does: it keeps that place and etcd gets the new
   * value; the key is counted and goes with the last of them. A key an earlier process left on a
   * lease this session adopted keeps its place too, with the new value. On abort or any error our
   * key is deleted, an adopted one included (Go leaves it behind on errors: etcd issue 21128).
   */
  campaign(value: Bytes, options: CampaignOptions = {}): Promise<LeaderHandle> {
    return campaignTerm(this, value, options);
  }

  /** The current leader, or undefined when there is none. */
  leader(options: { signal?: AbortSignal } = {}): Promise<LeaderInfo | undefined> {
    return currentLeader(this.session.client, this.name, options);
  }

  /** Leadership changes as they happen; see {@link observeLeader}. */
  observe(options: { signal?: AbortSignal } = {}): AsyncIterableIterator<LeaderEvent> {
    return observeLeader(this.session.client, this.name, options);
  }
}

/** campaign(), returning the implementation so runAsLeader can end a term locally. */
function campaignTerm(e: Election, value: Bytes, options: AcquireOptions): Promise<Leadership> {
  const { session, name } = e;
  const bytes = toBuffer(value);
  return acquire(
    {
      session,
      kind: 'campaign',
      name,
      share: options.share === true,
      ticket: participantTicket(session, name, bytes),
      rules: {
        rule: (ticket, lost) => oldestRule(session, participantScope(name), ticket, lost),
        lostError: leadershipLost,
        // Already a candidate (a sibling's key, or one an earlier process left on an adopted lease):
        // keep its place and take the new value, as Go does, so etcd and the handle agree.
        async prepare(ticket, signal) {
          if (ticket.value.equals(bytes)) return;
          // Guarded on our incarnation and our lease: never puts back on our lease a key someone moved off it.
          const t = await session.client.txn(
            { compare: ourKeyStands(session, ticket), success: [op.put(ticket.key, bytes, session.leaseId)], failure: [] },
            { idempotent: true, signal },
          );
          if (!t.succeeded) await ticketLost(session, ticket, leadershipLost, signal ?? new AbortController().signal);
        },
        hold: (own) => new Leadership(own, bytes),
      },
    },
    options,
  );
}

/** The current leader of election `name`, or undefined. Needs no session. */
export async function currentLeader(client: Client, name: string, options: { signal?: AbortSignal } = {}): Promise<LeaderInfo | undefined> {
  const { owner } = await oldestParticipant(client, validateName(name, 'election name'), options);
  return owner && leaderInfo(owner);
}

/**
 * Leadership changes of election `name`: the current leader (or "none") first, then every new
 * leader, every proclaimed value, and "none" when the leader goes with no successor. Each event is
 * computed from a read at the revision of the change, so a candidate that never led is never
 * reported (etcd issue 18163). Survives stream drops and compaction; ends only when `signal` aborts.
 */
export function observeLeader(client: Client, name: string, options: { signal?: AbortSignal } = {}): AsyncIterableIterator<LeaderEvent> {
  validateName(name, 'election name');
  const stop = new AbortController();
  const onAbort = (): void => stop.abort();
  const out = new QueuedIterator<LeaderEvent>(() => {
    options.signal?.removeEventListener('abort', onAbort);
    stop.abort();
  });
  if (options.signal?.aborted) {
    out.end();
    return out;
  }
  options.signal?.addEventListener('abort', onAbort, { once: true });
  void runObserver(client, name, stop.signal, out).then(
    () => out.end(),
    (err: unknown) => out.end(stop.signal.aborted ? undefined : err),
  );
  return out;
}

async function runObserver(client: Client, name: string, signal: AbortSignal, out: QueuedIterator<LeaderEvent>): Promise<void> {
  // The leader key as last reported; null until the first report.
  const seen: { last: KeyValue | undefined | null } = { last: null };
  const emit = (kv: KeyValue | undefined, revision: bigint): void => {
    const last = seen.last;
    if (last !== null) {
      if (!kv && !last) return;
      if (kv && last && kv.key.equals(last.key) && kv.createRevision === last.createRevision && kv.modRevision === last.modRevision) return;
    }
    seen.last = kv;
    out.push(kv ? { type: 'leader', leader: leaderInfo(kv), revision } : { type: 'none', revision });
  };
  // Once running, reads are retried through an outage (an observer ends only when its signal
  // aborts); the very first read is not, so a wrong endpoint fails at once with a clear error.
  let started = false;
  const read = (revision?: bigint) => {
    const once = () => oldestParticipant(client, name, { revision, signal });
    return started ? retryWhile(once, isTransient, signal) : once();
  };
  /** Reports the leader as of `revision` (now when omitted, or when that revision was compacted). */
  const readAt = async (revision?: bigint): Promise<bigint> => {
    let r: { owner: KeyValue | undefined; revision: bigint };
    try {
      r = await read(revision);
    } catch (err) {
      if (!(err instanceof CompactedError) || revision === undefined) throw err;
      r = await read();
    }
    started = true;
    emit(r.owner, r.revision);
    return r.revision;
  };
  // A first read before any watch: it reports the current leader at once, and a wrong endpoint
  // fails here with a clear error instead of a watch waiting for a stream that never opens.
  await readAt();
  while (!signal.aborted) {
    // From "now" (served at once), then the read: changes up to the read's revision are in the read,
    // later ones arrive on the watch. Only changes of the leader key, or a first key when there is
    // no leader, can change who leads: a new key is never older than the ones it queues behind.
    const w = client.watch(`${name}/`, { prefix: true, signal });
    try {
      await w.created;
      // The revision of the last read: every change up to it is in what was reported. A read at an
      // event's revision whose history was compacted meanwhile reads "now" instead: the events
      // still queued up to then are older than what it reported, and must not be reported after it.
      let through = await readAt();
      for await (const batch of w) {
        for (const e of batch.events) {
          if (e.kv.modRevision <= through) continue;
          const cur = seen.last;
          if (cur && e.kv.key.equals(cur.key)) {
            const sameTerm = e.type === 'put' && e.kv.createRevision === cur.createRevision && e.kv.lease === cur.lease;
            if (sameTerm) emit(e.kv, e.kv.modRevision);
            else through = await readAt(e.kv.modRevision);
          } else if (!cur && e.type === 'put') {
            through = await readAt(e.kv.modRevision);
          }
        }
      }
      return; // signal aborted
    } catch (err) {
      if (signal.aborted) return;
      if (!(err instanceof CompactedError)) throw err;
    } finally {
      w.cancel();
    }
  }
}

/** Proof of leadership: the term's fencing token, a loss signal, proclaim and a guarded resign. */
export interface LeaderHandle extends OwnerHandle {
  /** The value last proclaimed, as UTF-8 text. */
  readonly value: string;
  /** The value last proclaimed, as bytes. */
  readonly valueBytes: Buffer;
  /** Throws LeadershipLostError unless still leading, checking the session's deadline against the clock now. */
  assertLeader(): void;
  /** Publishes a new value, only while leading; otherwise throws NotLeaderError and the handle is dead. */
  proclaim(value: Bytes): Promise<void>;
  /**
   * Steps down so the next candidate leads at once. Idempotent. Never rejects for want of etcd: a delete that fails is retried in the
   * background until the key is gone or the session ends, and the result is then `pending` (see
   * {@link ReleaseResult}); `signal` aborts once the key is gone. Nothing is left to do in a `finally`.
   */
  resign(): Promise<ReleaseResult>;
}

class Leadership extends OwnerHandleBase implements LeaderHandle {
  constructor(
    own: Ownership,
    private current: Buffer,
  ) {
    super(own);
  }

  get value(): string {
    return this.current.toString('utf8');
  }

  get valueBytes(): Buffer {
    return this.current;
  }

  assertLeader(): void {
    this.own.assert();
  }

  async proclaim(value: Bytes): Promise<void> {
    try {
      this.own.assert();
    } catch (cause) {
      const reason = cause instanceof OwnershipLostError ? cause.reason : 'lease_expired';
      throw new NotLeaderError(`${this.key} (term ${this.fencingToken}) no longer leads; campaign again`, this.key, { cause, reason });
    }
    const bytes = toBuffer(value);
    // Guarded on our incarnation and our lease: a key someone moved off our lease stays off it.
    const t = await this.own.session.client.txn(
      {
        compare: this.own.ownerCompares(),
        success: [op.put(this.key, bytes, this.own.session.leaseId)],
        failure: [op.get(this.key)],
      },
      { idempotent: true },
    );
    if (!t.succeeded) {
      const kv = txnRange(t, 0).kvs[0];
      const reason = kv?.createRevision === this.fencingToken ? 'moved_off_lease' : 'key_deleted';
      const err = new NotLeaderError(`${this.key} (term ${this.fencingToken}) no longer leads; campaign again`, this.key, { reason });
      this.own.ownerCompareFailed(err, reason);
      throw err;
    }
    this.current = bytes;
  }

  resign(): Promise<ReleaseResult> {
    return this.release();
  }

  /** Watches the term from now, whether or not anyone looks at `signal` (runAsLeader's terms). */
  watch(): void {
    this.own.watchNow();
  }

  /** Ends the term locally (runAsLeader's shutdown): the signal aborts with `reason`. */
  revoke(reason: unknown): void {
    this.own.end(reason);
  }

  /** True once the term ended (lost, resigned or revoked). */
  get ended(): boolean {
    return this.own.isEnded;
  }
}

export interface RunAsLeaderOptions {
  /** The value to campaign with (and proclaim). */
  value: Bytes;
  /** Shutdown: stops the task, then resigns so a successor takes over at once. */
  signal?: AbortSignal;
  /**
   * Run the task for one term only; do not campaign again after it ends early (then resolve undefined,
   * whatever the task returned or threw on its way out; with a Session that was lost, reject with its
   * SessionExpiredError as without `once`).
   */
  once?: boolean;
  /** Lease TTL when given a Client (a new session per term after a loss). Default 30. */
  ttl?: number;
  /** Told when this instance starts and stops leading. A throw counts as the task's error; the term still ends resigned. */
  onLeaderChange?: (leading: boolean, leader: LeaderHandle) => void;
  /**
   * A health check to feed, made by `leaderHealth({ graceMs })`: it turns unhealthy when a term's
   * leadership ended (lost, or shutdown) and the task has not stopped within `graceMs`. Serve it
   * with `healthHandler(health)` on your `/healthz`.
   */
  health?: LeaderHealth;
  /**
   * The longest wait between two attempts to campaign again while etcd cannot be reached (the wait
   * doubles from half a second up to this, with jitter). Default 5000.
   */
  maxRetryDelayMs?: number;
}

/**
 * What runAsLeader publishes on the `etcd-concurrency:leader:retry` diagnostics channel each time
 * a campaign (or the session for it) failed and it will try again after `delayMs`.
 */
export interface LeaderRetryEvent {
  /** The election name. */
  name: string;
  /** 1 for the first retry after a success (or the start), then 2, 3, ... */
  attempt: number;
  /** How long it waits before the next attempt. */
  delayMs: number;
  /** Why the attempt failed (UnavailableError while etcd is unreachable, a lost session, ...). */
  error: unknown;
}

/**
 * Whether runAsLeader tries again after `err` ended an attempt to campaign: it does for anything the
 * cluster may get over (unreachable, timeouts, a write of unknown outcome, a lost lease or session
 * when it makes its own), not for bad input, refused credentials or permissions, or a closed client.
 */
function campaignAgainAfter(err: unknown, ownSession: boolean): boolean {
  if (err instanceof InvalidArgumentError || err instanceof ClientClosedError) return false;
  if (err instanceof PermissionDeniedError || err instanceof AuthenticationError) return false;
  if (err instanceof SessionExpiredError) return ownSession && err.reason !== 'client_closed';
  // Anything else of ours is the cluster's (a bug, a TypeError, ends the loop where it can be seen).
  return err instanceof EtcdError;
}

/**
 * Runs `task` only while leading election `name`. The task gets the LeaderHandle: it must stop when
 * `leader.signal` aborts, which happens before the lease can expire on the server, so a task that
 * outlives its term (a pause, a partition) is told to stop before anyone else can lead.
 * When leadership is lost the task's settling is awaited and, unless `once`, we campaign again.
 * Resolves with the task's result (after resigning); with undefined when `signal` stopped it (the
 * term's `leader.signal` then aborts with a LeadershipLostError whose reason is `released` and whose
 * cause is the signal's reason), or when the one term of `once` was lost.
 *
 * An outage does not end it: while etcd cannot be reached (or the session for the next term cannot
 * be made), it tries again with backoff capped at `maxRetryDelayMs`, counting each retry in
 * `etcd_concurrency.election.retries` and publishing a {@link LeaderRetryEvent} on the
 * `etcd-concurrency:leader:retry` diagnostics channel, until `signal` aborts. Only bad input
 * (InvalidArgumentError), refused credentials or permissions, or a closed client end it with an
 * error. With a Session, a lost session ends the loop with SessionExpiredError (a session never
 * recovers); with a Client, a fresh session is created for the next term, after an outage too.
 */
export async function runAsLeader<T>(
  target: Session | Client,
  name: string,
  options: RunAsLeaderOptions,
  task: (leader: LeaderHandle) => Promise<T> | T,
): Promise<T | undefined> {
  const health = options.health;
  if (health !== undefined && (typeof health.ended !== 'function' || typeof health.stopped !== 'function')) {
    throw new InvalidArgumentError(
      'options.health must be a LeaderHealth, with ended() and stopped(): make one with leaderHealth({ graceMs })',
    );
  }
  validateName(name, 'election name');
  const owned = !(target instanceof Session);
  let session: Session | undefined = owned ? undefined : target;
  const shutdown = options.signal;
  const client = owned ? (target as Client) : (target as Session).client;
  // Between terms, an unreachable cluster is waited out: tries again with capped backoff.
  const maxDelayMs = options.maxRetryDelayMs ?? 5000;
  if (!(maxDelayMs >= 1)) throw new InvalidArgumentError(`options.maxRetryDelayMs must be 1 or more, got ${maxDelayMs}`);
  const backoff = new Backoff(Math.min(500, maxDelayMs), maxDelayMs);
  let attempt = 0;
  try {
    for (;;) {
      if (shutdown?.aborted) return undefined;
      let leader: Leadership;
      try {
        if (!session || (owned && session.signal.aborted)) {
          if (session) await session.close().catch(() => {});
          session = undefined;
          session = await Session.create(client, { ttl: options.ttl ?? 30, signal: shutdown });
        }
        leader = await campaignTerm(new Election(session, name), options.value, { signal: shutdown });
      } catch (err) {
        if (shutdown?.aborted) return undefined;
        // With the caller's session, its loss ends the loop: only a Client lets us make another.
        // Its reason, not the error of a call in flight when it was lost (etcd unreachable, say).
        if (!owned && session?.signal.aborted) throw rethrown(session.signal.reason);
        if (!campaignAgainAfter(err, owned)) throw err;
        const delayMs = backoff.next();
        attempt++;
        const tel = telemetryOf(client);
        if (tel.metricsOn) tel.leaderRetries.add(1, tel.attrs('campaign', name));
        if (channels.leaderRetry.hasSubscribers)
          channels.leaderRetry.publish({ name, attempt, delayMs, error: err } satisfies LeaderRetryEvent);
        try {
          await sleep(delayMs, shutdown);
        } catch {
          return undefined; // shutdown while waiting
        }
        continue;
      }
      backoff.reset();
      attempt = 0;
      // Shut down as the campaign was won, after its last look at the signal: no task starts (and no
      // listener could hear an abort that already happened).
      if (shutdown?.aborted) {
        await leader.resign().catch(() => {});
        return undefined;
      }
      // Watch the term from its start, whether or not the task looks at leader.signal: whether the
      // term was lost (below) must not depend on what the task, or an installed SDK, touched.
      leader.watch();
      // The term ends released, with a LeadershipLostError as every end of a term (its cause: the signal's reason).
      const onShutdown = (): void =>
        leader.revoke(
          new LeadershipLostError(`${leader.key} (term ${leader.fencingToken}) was given up: runAsLeader's signal aborted`, leader.key, {
            reason: 'released',
            cause: shutdown!.reason,
          }),
        );
      shutdown?.addEventListener('abort', onShutdown, { once: true });
      // The health check learns when leadership ends under the running task (watching the key).
      const onEnded = (): void => health!.ended(leader, leader.signal.reason);
      if (health) {
        if (leader.signal.aborted) onEnded();
        else leader.signal.addEventListener('abort', onEnded, { once: true });
      }
      let result: { value: T } | { error: unknown };
      try {
        // A callback that throws fails the term as the task would; the term still ends resigned.
        options.onLeaderChange?.(true, leader);
        result = { value: await task(leader) };
      } catch (error) {
        result = { error };
      } finally {
        shutdown?.removeEventListener('abort', onShutdown);
        if (health) {
          leader.signal.removeEventListener('abort', onEnded);
          health.stopped();
        }
      }
      try {
        options.onLeaderChange?.(false, leader);
      } catch (error) {
        if (!('error' in result)) result = { error };
      }
      const lostTerm = leader.ended && !shutdown?.aborted;
      // Stop leading only after the task settled, so no two tasks ever overlap by our doing.
      await leader.resign().catch(() => {});
      if (shutdown?.aborted) return undefined;
      if (lostTerm && !options.once) {
        if (!owned) session.assertAlive();
        else {
          // The lease may be what was lost (revoked, expired): start the next term on a fresh one.
          await session.close().catch(() => {});
          session = undefined;
        }
        continue;
      }
      // With the caller's session lost, the loop ends with its error, as without `once`; any other end
      // of the one term of `once`: no result, whatever the task did on its way out (as every such term's).
      if (lostTerm && !owned) session.assertAlive();
      if (lostTerm) return undefined;
      if ('error' in result) throw result.error;
      return result.value;
    }
  } finally {
    if (owned) await session?.close().catch(() => {});
  }
}
