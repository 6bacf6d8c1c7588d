import type { KeyValue, RangeRequest } from '../client/kv.js';

/** Our place in a queue: our key and its CreateRevision (the ticket, and once we hold, the fencing token). */
export interface Ticket {
  key: string;
  /** CreateRevision of our key: the queue ticket and, once we hold, the fencing token. */
  rev: bigint;
  /**
   * True when another call of this process (same session, same key) already used this incarnation:
   * we share it. Either way this call is counted as one of its users (see leaveKey): the key is
   * deleted only when the last of them releases, aborts or fails. A key found on our lease that no
   * call of this process uses is this call's alone, including one an earlier process left on a
   * lease this session adopted.
   */
  joined: boolean;
  /** The key's value as etcd holds it (for election's "update the value if it differs"). */
  value: Buffer;
  /** Our turn already: the enqueue's count proved nobody we could wait for was there. */
  first: boolean;
  /** What the spec's `peek` read in the same Txn (a semaphore checks its peers' permit count). */
  peeked: readonly KeyValue[];
  /**
   * What the spec's `lookup` read in the same Txn, after our put (so at revision `rev`): the keys
   * just before ours, newest first. Present only when the queue was short; the rule consumes it.
   */
  preceding?: { kvs: KeyValue[]; more: boolean };
}

/** What to enqueue: our key and value, and the range whose count, read in the same Txn, may prove we go first. */
export interface TicketSpec {
  key: string;
  value: Buffer;
  /** The keys counted in the enqueue Txn (ours among them when `key` falls inside). */
  count: { key: Buffer; rangeEnd: Buffer };
  /** True when that count proves it is our turn at once (a mutex: only our key under the prefix). */
  first(count: bigint): boolean;
  /** An O(1) read to make in the same Txn (a limit, unsorted), for checks on the participants. */
  peek?: RangeRequest;
  /**
   * A sorted read of the keys before ours (newest first), made in the same Txn only while this
   * client last saw the counted range short: etcd reads every key of a sorted range in its apply
   * loop, which is nothing for a few keys and would stall every write behind a long queue.
   */
  lookup?: RangeRequest;
  /**
   * When set, a call that finds our key in place while other calls of this process use it joins them
   * only if `mayJoin` says so, given what `read` (made in the same Txn) found and the key's
   * CreateRevision; else it waits until they have left the key, then takes a key of its own. An RWMutex
   * read lock: it must not join a read key that a writer queued behind since.
   */
  joinCheck?: { read: RangeRequest; mayJoin(kvs: readonly KeyValue[], rev: bigint): boolean };
}
