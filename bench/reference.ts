// The reference: a fair lock / election built the usual way, i.e. Go's concurrency package
// (Mutex.Lock, Election.Campaign, waitDeletes), on our Client. Its waits start the predecessor's
// watch at the read's header revision, which etcd serves from its 100 ms catch-up loop.
import { compare, op, prefixEnd, participantKey, type Client, type Session } from '../dist/index.js';

import { SortOrder, SortTarget } from '../dist/client/kv.js';

const ASCEND = SortOrder.ASCEND;
const DESCEND = SortOrder.DESCEND;
const CREATE = SortTarget.CREATE;

export class GoStyleQueue {
  readonly key: string;
  private readonly prefix: Buffer;
  private readonly end: Buffer;
  private myRev = 0n;

  constructor(
    readonly session: Session,
    name: string,
    /** Go's Mutex re-reads its own key after waiting (etcd 11456); its Campaign does not. */
    private readonly recheck: boolean,
  ) {
    this.key = participantKey(name, session.leaseId);
    this.prefix = Buffer.from(`${name}/`);
    this.end = prefixEnd(this.prefix);
  }

  private get client(): Client {
    return this.session.client;
  }

  /** Mutex.Lock / Election.Campaign: resolves with our CreateRevision once we are the oldest. */
  async acquire(value: string | Buffer = ''): Promise<bigint> {
    const oldest = op.range({ key: this.prefix, rangeEnd: this.end, sortOrder: ASCEND, sortTarget: CREATE, limit: 1n });
    const t = await this.client.txn({
      compare: [compare.createRevision(this.key, '=', 0n)],
      success: [op.put(this.key, value, this.session.leaseId), oldest],
      failure: [op.get(this.key), oldest],
    });
    let myRev = t.header.revision;
    if (!t.succeeded) myRev = t.responses[0]!.responseRange!.kvs![0]!.createRevision!;
    this.myRev = myRev;
    const owner = t.responses[1]!.responseRange!.kvs?.[0];
    if (!owner || owner.createRevision === myRev) return myRev;
    await this.waitDeletes(myRev - 1n);
    if (this.recheck && !(await this.client.get(this.key))) throw new Error(`${this.key}: session expired while waiting`);
    return myRev;
  }

  /** Go's waitDeletes: until no key older than ours is left, watch the newest older one for its delete. */
  private async waitDeletes(maxCreateRev: bigint): Promise<void> {
    for (;;) {
      const r = await this.client.range({
        key: this.prefix,
        rangeEnd: this.end,
        sortOrder: DESCEND,
        sortTarget: CREATE,
        maxCreateRevision: maxCreateRev,
        limit: 1n,
      });
      const pred = r.kvs[0];
      if (!pred) return;
      // Go's waitDelete: client.Watch(key, WithRev(getResp.Header.Revision)).
      const w = this.client.watch(pred.key, { startRevision: r.header.revision, noPut: true });
      try {
        for await (const batch of w) if (batch.events.some((e) => e.type === 'delete')) break;
      } finally {
        w.cancel();
      }
    }
  }

  /** Mutex.Unlock: a plain Delete. */
  async unlock(): Promise<void> {
    await this.client.delete(this.key);
  }

  /** Election.Resign: delete only if the key is still our incarnation. */
  async resign(): Promise<void> {
    await this.client.txn({ compare: [compare.createRevision(this.key, '=', this.myRev)], success: [op.delete(this.key)], failure: [] });
  }
}
