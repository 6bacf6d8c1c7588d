/** A sorted read in the write Txn is made while the queue last counted at most this many keys. */
export const SHORT_QUEUE = 32n;
const HINTS_PER_CLIENT = 1024;

/**
 * The newest count a client saw per queue prefix (bounded, oldest out first): whether the enqueue
 * may make a sorted read in its write Txn, and whether a new head marks its key (see predecessor.ts).
 * Newest by revision, not by arrival: concurrent enqueues' answers arrive in any order.
 */
export class QueueHints {
  private readonly lastCount = new Map<string, { n: bigint; rev: bigint }>();

  /** This client last counted the queue under `prefix` at most SHORT_QUEUE keys. */
  short(prefix: Buffer): boolean {
    const c = this.lastCount.get(prefix.toString('latin1'));
    return c !== undefined && c.n <= SHORT_QUEUE;
  }

  /** This client last counted the queue under `prefix` at more than SHORT_QUEUE keys. */
  long(prefix: Buffer): boolean {
    const c = this.lastCount.get(prefix.toString('latin1'));
    return c !== undefined && c.n > SHORT_QUEUE;
  }

  /** The queue under `prefix` held `n` keys at revision `rev`; an older count than the one kept is ignored. */
  note(prefix: Buffer, n: bigint, rev: bigint): void {
    const m = this.lastCount;
    const k = prefix.toString('latin1');
    const had = m.get(k);
    if (had && had.rev > rev) return;
    m.delete(k); // re-inserted last: the map's order is its age
    if (m.size >= HINTS_PER_CLIENT) m.delete(m.keys().next().value!);
    m.set(k, { n, rev });
  }
}
