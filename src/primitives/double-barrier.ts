import { retryWhile } from '../client/backoff.js';
import type { CallProgress } from '../client/connection.js';
import { InvalidArgumentError, isTransient, LeaseNotFoundError } from '../client/errors.js';
import { compare, op, prefixEnd, SortOrder, SortTarget, txnRange, type KeyValue } from '../client/kv.js';
import { validateName } from '../keys.js';
import { markLeaseGone, type Session } from '../session.js';
import { BarrierKeyLostError, TooManyClientsError } from '../errors.js';
import type { AcquireOptions } from '../queue/acquire.js';
import { dropTicket } from '../queue/release.js';
import { LateKeys, sessionQueue } from '../queue/state.js';
import { waitUntil, type TurnRule } from '../queue/wait.js';
import { stopSignal } from '../stop.js';

/** Options of enter() and leave(): `signal` stops waiting; the call then deletes our key and closes its watch. */
export type DoubleBarrierWaitOptions = AcquireOptions;

/** Our membership: our waiter key, its CreateRevision, and the revision at which the barrier opened. */
interface Entry {
  key: string;
  rev: bigint;
  /** ModRevision of the `<name>/ready` put that let us in: keys created before it are our round. */
  ready: bigint;
  /** A create of our key had an unknown outcome: it may still land after we leave. */
  late: boolean;
}

/** The most members whose presence the opening Txn checks (see open). */
const GUARDED_MEMBERS = 32;

/**
 * A double barrier: `enter()` waits until `count` members have entered, `leave()` until every one of
 * them has left. The keys and protocol of Go's `recipe.DoubleBarrier`
 * (go.etcd.io/etcd/client/v3/experimental/recipes), so Go and Node processes can be members of one
 * barrier: each member is a key `<name>/waiters/<unique>` on its session's lease, and the member
 * that completes the count puts `<name>/ready` (no lease), which opens the barrier.
 *
 * A member that dies counts as gone once its lease expires (or at once if its session is closed):
 * in enter() its place frees up for another process; in leave() it counts as having left.
 *
 * Differences from Go's recipe, each fixing a way it can hang or leave a key behind:
 * - enter() and leave() take a signal; an abort or error deletes our key and closes the watch.
 * - leave() waits only for its own round: the keys created before the barrier opened. Go's Leave
 *   waits for every key under `waiters/`, including the next round's entrants; a member still in
 *   Leave then waits for a round that may need that very member to enter: a deadlock.
 * - The last member out deletes `ready` only if it is still its own round's (guarded on its
 *   revision), and any member that finds its round empty removes it: Go leaves it behind for good
 *   when the oldest member dies in Leave. Here it stays only when the round's last member cannot
 *   delete it: it dies (its process crashes, its session is lost), or it cannot reach etcd as it
 *   comes out, giving up enter() or leave(), or leaving an earlier round (see closeIfLast). A later
 *   round ignores it.
 * - A watch that ends early (compaction, failover) is re-established and the state read again; Go's
 *   WaitEvents returns as if the awaited event had happened.
 *
 * enter() counts members exactly as Go does, so that both languages agree on who opens the barrier
 * and who is refused. That includes members of the previous round still leaving: a process that
 * enters again before everyone has left may see the next round open with them counted.
 */
export class DoubleBarrier {
  readonly name: string;
  /** How many members the barrier waits for. */
  readonly count: number;
  private readonly readyKey: string;
  private readonly waiters: string;
  private entry?: Entry;
  private busy = false;

  /**
   * @param session - the member's session: its waiter key lives on this lease, so it goes when the member dies.
   * @param name - the barrier's name; Go's `NewDoubleBarrier(session, name, count)` with the same name joins it.
   * @param count - how many members each round waits for; every member must pass the same count.
   */
  constructor(
    readonly session: Session,
    name: string,
    count: number,
  ) {
    this.name = validateName(name, 'double barrier name');
    if (!Number.isSafeInteger(count) || count < 1) {
      throw new InvalidArgumentError(`count must be a whole number of members, 1 or more, got ${count}`);
    }
    this.count = count;
    this.readyKey = `${this.name}/ready`;
    this.waiters = `${this.name}/waiters/`;
  }

  /** Our waiter key, `<name>/waiters/<unique>`, from enter() until leave() (else undefined). */
  get key(): string | undefined {
    return this.entry?.key;
  }

  /**
   * The revision of the first `ready` put this member saw after its key, from enter() until leave()
   * (else undefined): the round it entered, and the keys created before it are the ones leave() waits
   * for. Not `ready`'s ModRevision read later: a member entering while our round still leaves may put
   * `ready` again, opening the next round (Go's counting). If that put comes before this member saw
   * the first, it shares that later round.
   */
  get openedAt(): bigint | undefined {
    return this.entry?.ready;
  }

  /**
   * Enters the barrier and waits until `count` members have entered. Rejects with
   * TooManyClientsError if `count` members are already in, and with the session's
   * SessionExpiredError if the session is lost meanwhile. On abort or any error our key is deleted.
   */
  async enter(options: DoubleBarrierWaitOptions = {}): Promise<void> {
    if (this.busy || this.entry) {
      throw new InvalidArgumentError(`double barrier ${this.name}: enter() called twice; leave() before entering again`);
    }
    this.busy = true;
    const stop = stopSignal(options.signal, this.session.signal);
    try {
      this.entry = await this.join(stop.signal);
    } finally {
      stop.dispose();
      this.busy = false;
    }
  }

  /**
   * Leaves the barrier and waits until every member of this round has left (or died: its key gone
   * with its lease). Rejects with the session's SessionExpiredError if the session is lost
   * meanwhile. On abort or any error our key is deleted: to the others, we have left.
   */
  async leave(options: DoubleBarrierWaitOptions = {}): Promise<void> {
    const entry = this.entry;
    if (this.busy || !entry) {
      throw new InvalidArgumentError(
        this.busy
          ? `double barrier ${this.name}: leave() while enter() or leave() still runs; await it first`
          : `double barrier ${this.name}: leave() without enter(); enter() first`,
      );
    }
    this.busy = true;
    const stop = stopSignal(options.signal, this.session.signal);
    try {
      await this.depart(entry, stop.signal);
      // Gone already; dropped anyway, which starts the sweep of a create that may still land (createKey).
      if (entry.late) await dropKey(this.session, this.name, entry.key, entry.rev);
      await this.closeIfLast().catch(() => {});
    } catch (err) {
      // Giving up: our key goes now, or the others would wait for it as long as our session lives;
      // and if it was the last of its round, so does `ready`.
      await dropKey(this.session, this.name, entry.key, entry.rev);
      await this.closeIfLast().catch(() => {});
      throw stop.signal.aborted ? stop.signal.reason : err;
    } finally {
      this.entry = undefined;
      stop.dispose();
      this.busy = false;
    }
  }

  private async join(stop: AbortSignal): Promise<Entry> {
    const client = this.session.client;
    stop.throwIfAborted();
    // Refused before writing anything when the barrier is full, as Go checks first too.
    const prefix = Buffer.from(this.waiters);
    const now = await retryWhile(
      () => client.range({ key: prefix, rangeEnd: prefixEnd(prefix), countOnly: true }, { signal: stop }),
      isTransient,
      stop,
    );
    if (now.count >= BigInt(this.count)) throw new TooManyClientsError(this.name, this.count);
    const mine = await this.createKey();
    try {
      stop.throwIfAborted();
      if (mine.first.length >= this.count) {
        const last = mine.first[this.count - 1]!.createRevision;
        if (mine.rev > last) throw new TooManyClientsError(this.name, this.count);
        // We complete the count: open the barrier for everyone, unless a member counted has left since.
        if (mine.rev === last) {
          const ready = await this.open(mine.first.slice(0, this.count));
          if (ready !== undefined) return { key: mine.key, rev: mine.rev, ready, late: mine.late };
        }
      }
      return { key: mine.key, rev: mine.rev, ready: await this.waitOpen(mine, stop), late: mine.late };
    } catch (err) {
      await dropKey(this.session, this.name, mine.key, mine.rev);
      // `ready` may have been put counting us, unseen: if we were the last of that round, it goes too.
      await this.closeIfLast().catch(() => {});
      throw stop.aborted ? stop.reason : err;
    }
  }

  /** The first `count` waiters by CreateRevision: Go's enteredClients, up to the one that opens. */
  private firstWaiters() {
    const prefix = Buffer.from(this.waiters);
    return op.range({
      key: prefix,
      rangeEnd: prefixEnd(prefix),
      sortOrder: SortOrder.ASCEND,
      sortTarget: SortTarget.CREATE,
      limit: BigInt(this.count),
      keysOnly: true,
    });
  }

  /**
   * Creates our waiter key `<name>/waiters/<nanoseconds>` on the session's lease (Go's
   * newUniqueEphemeralKey) and reads, in the same Txn, the first `count` waiters.
   */
  private async createKey(): Promise<{ key: string; rev: bigint; first: KeyValue[]; late: boolean }> {
    const { client, leaseId } = this.session;
    for (;;) {
      const key = `${this.waiters}${uniqueSuffix()}`;
      const progress: CallProgress = { sent: false };
      const t = await client
        .txn(
          {
            compare: [compare.version(key, '=', 0n)],
            success: [op.put(key, '', leaseId), this.firstWaiters()],
            failure: [op.get(key), this.firstWaiters()],
          },
          // Guarded on the key's absence, so a retry cannot create a second key. No signal: cancelled
          // after etcd applied it, it would leave a key nobody knows to delete.
          { idempotent: true },
          progress,
        )
        // An attempt with an unknown outcome may land after we dropped the key, bringing it back on our
        // live lease as a member nobody is: once dropped, it is swept. Before the catch's dropTicket.
        // Our names never repeat, so any re-creation is such a ghost.
        .finally(() => {
          if (progress.ambiguous) (sessionQueue(this.session).late ??= new LateKeys()).add(key);
        })
        .catch((err: unknown) => {
          if (err instanceof LeaseNotFoundError) {
            markLeaseGone(this.session);
            throw this.session.signal.reason;
          }
          // An outcome unknown (the last error's, or an earlier attempt's): the key may exist or still
          // land, a member nobody will remove would be counted. Dropping it also arms the sweep.
          if (isTransient(err) || progress.ambiguous) void dropTicket(this.session, { key }, { kind: 'barrier', name: this.name });
          throw err;
        });
      const late = progress.ambiguous === true;
      if (t.succeeded) return { key, rev: t.header.revision, first: txnRange(t, 1).kvs, late };
      // On our lease: our own first attempt, its answer lost (names never repeat in this process).
      // Anyone else's: a name clash with another process, so take the next name, as Go does.
      const kv = txnRange(t, 0).kvs[0];
      if (kv?.lease === leaseId) return { key, rev: kv.createRevision, first: txnRange(t, 1).kvs, late };
    }
  }

  /**
   * Puts `ready` (no lease, as Go), letting every member through, and returns its revision; undefined
   * when a member we counted has left meanwhile (its session expired): then we wait with the others
   * for the count to be complete again. Go puts it unguarded, and lets a round in one member short.
   */
  private async open(counted: readonly KeyValue[]): Promise<bigint | undefined> {
    // One compare per member, within what any etcd takes in a Txn (--max-txn-ops, 128 by default and
    // rarely lowered): a larger barrier opens unguarded, as Go's does.
    const stayed = counted.length <= GUARDED_MEMBERS ? counted.map((kv) => compare.createRevision(kv.key, '=', kv.createRevision)) : [];
    // No caller signal: once applied the barrier is open for the others anyway. Repeating it is harmless.
    const t = await retryWhile(
      () => this.session.client.txn({ compare: stayed, success: [op.put(this.readyKey, '')], failure: [] }, { idempotent: true }),
      isTransient,
      this.session.signal,
    );
    return t.succeeded ? t.header.revision : undefined;
  }

  /** Waits for a put of `ready` after our key was created (an older one is a previous round's). */
  private async waitOpen(mine: { key: string; rev: bigint }, stop: AbortSignal): Promise<bigint> {
    const client = this.session.client;
    const ready = Buffer.from(this.readyKey);
    // The revision of the `ready` put that opened our round, from a read or a watch event.
    let opened: bigint | undefined;
    // The revision at which we are still blocked (no `ready` since our key, and our key stands),
    // else undefined: then `opened` is set, or our key is gone. One O(1) Txn.
    const blockedAt = async (signal: AbortSignal): Promise<bigint | undefined> => {
      const t = await client.txn(
        {
          compare: [compare.modRevision(ready, '<', mine.rev + 1n), compare.createRevision(mine.key, '=', mine.rev)],
          success: [],
          failure: [op.get(ready)],
        },
        { idempotent: true, signal },
      );
      if (t.succeeded) return t.header.revision;
      const kv = txnRange(t, 0).kvs[0];
      if (kv && kv.modRevision > mine.rev) opened = kv.modRevision;
      return undefined;
    };
    const rule: TurnRule = {
      blocker: async (signal) => {
        const asOf = opened === undefined ? await blockedAt(signal) : undefined;
        if (opened !== undefined) return null;
        if (asOf === undefined) return this.keyLost(mine.key, signal);
        return {
          watch: { key: ready, noDelete: true },
          asOf, // the read checked all that the check checks
          confirmed: true,
          changed: (e) => {
            if (e.kv.modRevision <= mine.rev) return false; // a previous round's
            opened = e.kv.modRevision;
            return true;
          },
          // blockedAt's compares as reads (the engine batches them with other waiters' checks).
          check: {
            keys: [ready, mine.key],
            blocked: ([r, k]) => (r?.modRevision ?? 0n) <= mine.rev && k?.createRevision === mine.rev,
          },
        };
      },
    };
    await waitUntil(client, rule, { signal: stop, session: this.session });
    return opened!;
  }

  /**
   * After our key went: if `ready` stands and no key of its round (created before it) is left,
   * delete it (guarded on its revision), as the last one out of that round would have. That round
   * may be ours, whose last member gave up its leave() (aborted, failed), or a later one that opened
   * while we were still in: rounds overlap when an entrant comes before the previous round has left.
   * Every member reads after its own delete, so the last of them sees the round empty. Best effort,
   * tried once: an outage now (these calls fail, or our own key's delete has not landed yet and is
   * retried in the background or left to the lease), or a round whose members all died, leaves
   * `ready` as Go's protocol does; a later round ignores it (waitOpen waits for a put after its own key).
   */
  private async closeIfLast(): Promise<void> {
    const client = this.session.client;
    if (client.closed) return;
    const options = { timeoutMs: client.dialTimeoutMs };
    const ready = await client.get(this.readyKey, options);
    if (!ready) return;
    const prefix = Buffer.from(this.waiters);
    const round = await client.range(
      { key: prefix, rangeEnd: prefixEnd(prefix), maxCreateRevision: ready.modRevision - 1n, keysOnly: true },
      options,
    );
    if (round.kvs.length > 0) return;
    await client.txn(
      { compare: [compare.modRevision(this.readyKey, '=', ready.modRevision)], success: [op.delete(this.readyKey)], failure: [] },
      { idempotent: true, ...options },
    );
  }

  /** Our key is gone while we wait: the session's loss if its lease went too, else someone deleted it. */
  private async keyLost(key: string, stop: AbortSignal): Promise<never> {
    const lease = await this.session.client.leaseTimeToLive(this.session.leaseId, { signal: stop }).catch(() => undefined);
    if (lease && lease.ttl <= 0) markLeaseGone(this.session);
    this.session.assertAlive();
    throw new BarrierKeyLostError(key);
  }

  /**
   * Go's Leave, scoped to our round: the oldest member (lowest ModRevision, as Go picks it) keeps its
   * key until it is alone, then deletes `ready` and its key; every other member deletes its key at
   * once. Everyone returns when no key of the round is left.
   */
  private async depart(entry: Entry, stop: AbortSignal): Promise<void> {
    const client = this.session.client;
    const prefix = Buffer.from(this.waiters);
    const own = Buffer.from(entry.key);
    const rule: TurnRule = {
      blocker: async (signal) => {
        // Our round: keys created before the barrier opened. Later ones are the next round's
        // entrants, which Go's Leave waits for too (and can deadlock on).
        const r = await client.range(
          { key: prefix, rangeEnd: prefixEnd(prefix), maxCreateRevision: entry.ready - 1n, keysOnly: true },
          { signal },
        );
        const mine = r.kvs.find((kv) => kv.key.equals(own) && kv.createRevision === entry.rev);
        const others = r.kvs.filter((kv) => kv !== mine);
        if (others.length === 0) {
          // Last out: delete `ready` if it is still our round's (a later round may have put its
          // own), and our key, in one Txn. No signal: once sent it should land (repeating it is harmless).
          const ours = mine ? [op.delete(entry.key)] : [];
          await client.txn(
            {
              compare: [compare.modRevision(this.readyKey, '=', entry.ready)],
              success: [op.delete(this.readyKey), ...ours],
              failure: ours,
            },
            { idempotent: true },
          );
          return null;
        }
        // Not the oldest: leave now, and wait for the rest.
        if (mine && oldest(r.kvs) !== mine) {
          await client.txn(
            { compare: [compare.createRevision(entry.key, '=', entry.rev)], success: [op.delete(entry.key)], failure: [] },
            { idempotent: true },
          );
        }
        // No key joins a round once it is open, so only these keys' deletes can end the wait.
        const left = new Set(others.map((kv) => kv.key.toString('latin1')));
        // While any of them stands we are blocked; the oldest, which Go's protocol keeps to the last, is
        // checked. One compare: a count cannot tell, as etcd counts before maxCreateRevision filters (etcd 18267).
        const last = oldest(others);
        return {
          watch: { key: prefix, prefix: true, noPut: true },
          asOf: r.header.revision, // that read saw `last` standing
          confirmed: true,
          changed: (e) => e.type === 'delete' && left.has(e.kv.key.toString('latin1')),
          check: { keys: [last.key], blocked: ([kv]) => kv?.createRevision === last.createRevision },
        };
      },
    };
    await waitUntil(client, rule, { signal: stop, session: this.session });
  }
}

/** The key with the lowest ModRevision: the member Go's Leave makes wait for the others. */
function oldest(kvs: KeyValue[]): KeyValue {
  return kvs.reduce((a, b) => (b.modRevision < a.modRevision ? b : a));
}

/** @internal the last suffix given out: the simulator starts each run from 0, as a fresh process. */
export const suffixes = { last: 0n };

/** Go's `time.Now().UnixNano()` in decimal, made strictly increasing within this process. */
function uniqueSuffix(): bigint {
  const now = BigInt(Date.now()) * 1_000_000n + (process.hrtime.bigint() % 1_000_000n);
  suffixes.last = now > suffixes.last ? now : suffixes.last + 1n;
  return suffixes.last;
}

/** Deletes our waiter key if it is still our incarnation, retrying in the background (the queue engine's dropTicket). */
function dropKey(session: Session, name: string, key: string, rev: bigint): Promise<void> {
  // A closed client cannot delete anything; the lease takes the key along.
  return session.client.closed ? Promise.resolve() : dropTicket(session, { key, fencingToken: rev }, { kind: 'barrier', name });
}
