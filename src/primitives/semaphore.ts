import { InvalidArgumentError } from '../client/errors.js';
import { op, prefixEnd, SortOrder, SortTarget, txnRange, type RangeRequest } from '../client/kv.js';
import { PermitCountConflictError, PermitLostError } from '../errors.js';
import { isParticipant, isParticipantKey, ownBuffer, participantKey, prefixOf, validateName } from '../keys.js';
import type { Session } from '../session.js';
import { acquire, tryAcquire, type AcquireOptions, type QueueSpec } from '../queue/acquire.js';
import { HeldHandle, type OwnerHandle } from './handle.js';
import type { ReleaseResult } from '../queue/release.js';
import { pagesByCreate } from '../client/pages.js';
import { ourKeyStands, ticketLost } from '../queue/oldest.js';
import type { Ticket, TicketSpec } from '../queue/enqueue.js';
import type { BatchCheck } from '../queue/recheck.js';
import type { Blocker, LostErrorFactory, TurnRule } from '../queue/wait.js';
import type { WatchEvent } from '../client/watch.js';

/**
 * The most permits a semaphore may have: a waiter at the head of the queue checks every holder in
 * one Txn, and etcd allows 128 compares per Txn (`--max-txn-ops`), two per holder.
 */
export const MAX_PERMITS = 60;

const permitLost: LostErrorFactory = (key, message, options) => new PermitLostError(message, key, options);

/**
 * A fair counting semaphore: at most `permits` sessions hold a permit at once, and permits go in
 * the order of the keys' CreateRevision. One key per session, `<name>/<lease hex>`, whose value is
 * the permit count, so that a participant using another count is refused with a clear error.
 *
 * One release wakes at most one waiter: the first waiter (the head) watches the prefix for deletes;
 * every other waiter watches only the waiter just before it, which writes its key once when it
 * takes a permit. So a release costs O(1) requests and events however long the queue.
 *
 * One key per session means one permit per session at a time: a second acquire() of this process
 * on the same session and name waits in the process, with no request to etcd, until the first
 * permit's key is gone, then queues a key of its own (open a session per concurrent holder to hold
 * several permits). With `share: true` on both, the second shares the first's permit, as in Go.
 */
export class Semaphore {
  readonly name: string;
  /** This session's key: `<name>/<lease id in hex>`. */
  readonly key: string;
  readonly permits: number;

  constructor(
    readonly session: Session,
    name: string,
    options: { permits: number },
  ) {
    this.name = validateName(name, 'semaphore name');
    const permits = options?.permits;
    if (!Number.isInteger(permits) || permits < 1 || permits > MAX_PERMITS) {
      throw new InvalidArgumentError(`permits must be an integer from 1 to ${MAX_PERMITS}, got ${String(permits)}`);
    }
    this.permits = permits;
    this.key = participantKey(this.name, session.leaseId);
  }

  /**
   * Waits for a permit. Resolves once our key is confirmed to be among the `permits` oldest and
   * still on our lease. Fails at once with SessionExpiredError if the session is lost while
   * waiting, and with PermitCountConflictError if another participant uses another count; on
   * abort or any error our key is deleted.
   */
  acquire(options: PermitOptions = {}): Promise<PermitHandle> {
    return acquire(this.queue(options.label, options.share), options);
  }

  /** Takes a permit if one is free right now (and this session has none); otherwise returns null and leaves no key behind. */
  tryAcquire(options: Pick<PermitOptions, 'label' | 'share'> = {}): Promise<PermitHandle | null> {
    return tryAcquire(this.queue(options.label, options.share));
  }

  private queue(label = '', share?: boolean): QueueSpec<PermitHandle> {
    const { session, name, permits } = this;
    // The permit count, then the label: peers compare only the first token.
    const value = ownBuffer(label === '' ? String(permits) : `${permits} ${label}`);
    const prefix = ownBuffer(prefixOf(name));
    const range = { key: prefix, rangeEnd: ownBuffer(prefixEnd(prefix)) };
    const ticket: TicketSpec = {
      key: this.key,
      value,
      count: range,
      // Fewer than `permits` others under the prefix: a permit is ours at once.
      first: (n) => n <= BigInt(permits),
      // Two keys in key order (unsorted: O(1)), to check that a peer uses the same count.
      peek: { ...range, limit: 2n },
    };
    return {
      session,
      kind: 'permit',
      name,
      share: share === true,
      ticket,
      rules: {
        rule: (t, lost) => permitRule(session, name, permits, value, t, lost),
        lostError: permitLost,
        prepare: async (t) => {
          // Our own key found in place (a sibling's, or one left on an adopted lease) must agree too.
          const ours = t.value.toString().split(' ', 1)[0]!;
          if (ours !== String(permits)) throw new PermitCountConflictError(name, permits, t.key, ours);
          // Only participants: a stray key (no lease) is skipped, whatever an operator wrote in it.
          for (const kv of t.peeked) {
            const count = kv.value.toString().split(' ', 1)[0]!;
            if (kv.key.toString() === t.key || !isParticipant(prefix, kv) || count === String(permits)) continue;
            throw new PermitCountConflictError(name, permits, kv.key.toString(), count);
          }
        },
        hold: (own) => new HeldPermit(own),
      },
    };
  }
}

/** Options of `acquire()`: the options of every acquire call, and a label for the key. */
export interface PermitOptions extends AcquireOptions {
  /** Written after the permit count in the key's value (`"<permits> <label>"`), for `inspect`. */
  label?: string;
}

/** A participant older than us, as a keys-only read reports it (no lease from etcd 3.7 on). */
interface Older {
  key: Buffer;
  createRevision: bigint;
  modRevision: bigint;
}

/**
 * "Among the `permits` oldest". The head (exactly `permits` older) waits for any delete under the
 * prefix; a waiter further back waits for the waiter just before it to change: leave, or take a
 * permit, which it marks by writing its key once. A waiter whose turn came writes that mark.
 */
function permitRule(session: Session, name: string, permits: number, value: Buffer, ticket: Ticket, lost: LostErrorFactory): TurnRule {
  const prefix = ownBuffer(prefixOf(name));
  const end = ownBuffer(prefixEnd(prefix));
  // Incarnations found to have no lease (stray data): never counted again in this wait.
  const strays = new Set<string>();
  const id = (k: { key: Buffer; createRevision: bigint }) => `${k.createRevision}/${k.key.toString('latin1')}`;
  const olderPage = (maxCreate: bigint): RangeRequest => ({
    key: prefix,
    rangeEnd: end,
    sortOrder: SortOrder.DESCEND,
    sortTarget: SortTarget.CREATE,
    maxCreateRevision: maxCreate,
    limit: BigInt(permits + 2),
    keysOnly: true,
  });
  /** Up to `permits + 1` participants older than us, newest first; our key checked in the same Txn. */
  const older = async (signal: AbortSignal): Promise<Older[]> => {
    const t = await session.client.txn(
      { compare: ourKeyStands(session, ticket), success: [op.range(olderPage(ticket.fencingToken - 1n))], failure: [] },
      { idempotent: true, signal },
    );
    if (!t.succeeded) return ticketLost(session, ticket, lost, signal);
    const found: Older[] = [];
    const first = { page: txnRange(t, 0), revision: t.header.revision };
    for await (const page of pagesByCreate(session.client, olderPage(ticket.fencingToken - 1n), first, signal)) {
      for (const kv of page.kvs) {
        if (isParticipantKey(prefix, kv.key) && !strays.has(id(kv))) {
          found.push({ key: ownBuffer(kv.key), createRevision: kv.createRevision, modRevision: kv.modRevision });
        }
      }
      if (found.length > permits) break;
    }
    return found.slice(0, permits + 1);
  };
  /**
   * Still blocked: our key stands, and each of `keys` is the same incarnation on some lease (a
   * keys-only read cannot tell a stray key apart; this read in full can), the first one (with
   * `firstUnchanged`) also not written since: a waiter just before us that takes a permit marks its key.
   */
  const stillCheck = (keys: Older[], firstUnchanged: boolean): BatchCheck => ({
    keys: [ticket.key, ...keys.map((k) => k.key)],
    blocked: ([mine, ...kvs]) => {
      let ok = mine?.createRevision === ticket.fencingToken && mine.lease === session.leaseId;
      keys.forEach((k, i) => {
        const kv = kvs[i];
        if (kv && kv.createRevision === k.createRevision && kv.lease === 0n) strays.add(id(kv));
        ok &&=
          kv?.createRevision === k.createRevision && kv.lease !== 0n && !(firstUnchanged && i === 0 && kv.modRevision !== k.modRevision);
      });
      return ok;
    },
  });
  // Set when, as the head, we saw the delete of a key we had confirmed ahead of us: one of the
  // `permits` older participants is gone, and none can be added (newcomers are younger), so it is
  // our turn without reading again. The mark's Txn still checks that our key stands.
  let freedAhead = false;
  return {
    async blocker(signal: AbortSignal): Promise<Blocker | null> {
      const ahead = freedAhead ? [] : await older(signal);
      freedAhead = false;
      if (ahead.length < permits) {
        // Our turn. Mark it on our key: the waiter behind us watches it to learn it may be next.
        const t = await session.client.txn(
          {
            compare: ourKeyStands(session, ticket),
            success: [op.put(ticket.key, value, session.leaseId)],
            failure: [],
          },
          { idempotent: true, signal },
        );
        if (!t.succeeded) return ticketLost(session, ticket, lost, signal);
        return null;
      }
      if (ahead.length === permits) {
        // The head: a holder leaving (a delete), or moved off its lease by someone (a stray now),
        // can give us a permit; newcomers' puts and marks cannot, and cost no request here.
        const confirmed = new Map(ahead.map((k) => [k.key.toString('latin1'), k.createRevision]));
        const freed = (e: WatchEvent): boolean => {
          // A delete of such a key after the confirmed incarnation was created means that one is gone
          // (a later incarnation is younger than us). An older delete, which a watch on a lagging
          // member can still deliver, proves nothing: it is only a reason to read again.
          if (e.type === 'delete') {
            const created = confirmed.get(e.kv.key.toString('latin1'));
            if (created !== undefined && e.kv.modRevision > created) freedAhead = true;
          }
          return e.type === 'delete' || e.kv.lease === 0n;
        };
        return { watch: { key: prefix, prefix: true }, changed: freed, check: stillCheck(ahead, false) };
      }
      // Further back: wake when the waiter before us leaves or takes a permit (and we may be head).
      // Every key ahead is checked to be on a lease: a stray one ahead would keep us from the head.
      const pred = ahead[0]!;
      return { watch: { key: pred.key }, changed: () => true, check: stillCheck(ahead, true) };
    },
  };
}

/** Proof of holding a permit: the same guarantees as a lock's handle. `await using` releases it. */
export interface PermitHandle extends OwnerHandle {
  /** Throws PermitLostError unless the permit is still held, checking the session's deadline against the clock now. */
  assertHeld(): void;
  /**
   * Releases the permit. Idempotent, and guarded on our CreateRevision. Never rejects for want of etcd: a delete that fails is retried in the
   * background until the key is gone or the session ends, and the result is then `pending` (see
   * {@link ReleaseResult}); `signal` aborts once the key is gone. Nothing is left to do in a `finally`.
   */
  release(): Promise<ReleaseResult>;
}

export class HeldPermit extends HeldHandle implements PermitHandle {}

/** Runs `fn` while holding a permit of semaphore `name`, and always releases it afterwards. */
export async function withPermit<T>(
  session: Session,
  name: string,
  permits: number,
  fn: (permit: PermitHandle) => Promise<T> | T,
  options: PermitOptions = {},
): Promise<T> {
  const handle = await new Semaphore(session, name, { permits }).acquire(options);
  try {
    return await fn(handle);
  } finally {
    await handle.release();
  }
}
