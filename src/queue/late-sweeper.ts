import type { KeyValue } from '../client/kv.js';
import type { Session } from '../session.js';

/**
 * An enqueue attempt whose outcome was unknown (retried on another member) may still be applied
 * long after: a request held by a frozen or cut-off member is forwarded when it wakes. Landing
 * after we released the key, its "create if absent" succeeds and brings the key back on our live
 * lease, owned by nobody, blocking everyone queued behind it. So once such a key is released, it
 * is watched for the rest of the session, and a re-creation this process is not using is deleted.
 * One per session: the keys that may land late, and whether a sweeper watches each.
 */
export class LateSweeper {
  private readonly keys = new Map<string, boolean>();

  /**
   * A create of `key` on the session's lease had an unknown outcome (`CallProgress.ambiguous`): once
   * the key is given up, a re-creation landing late is swept for the rest of the session.
   */
  mayLandLate(key: string): void {
    if (!this.keys.has(key)) this.keys.set(key, false);
  }

  /**
   * `key` is given up (its last user released or dropped it): if it may land late, sweep it from now
   * on. `inUse` tells a key this process uses again; `remove` deletes a ghost incarnation.
   */
  givenUp(session: Session, key: string, inUse: () => boolean, remove: (rev: bigint) => Promise<void>): void {
    if (this.keys.get(key) !== false) return;
    this.keys.set(key, true);
    void sweep(session, key, inUse, remove);
  }
}

async function sweep(session: Session, key: string, inUse: () => boolean, remove: (rev: bigint) => Promise<void>): Promise<void> {
  const client = session.client;
  const check = async (kv: KeyValue | undefined): Promise<void> => {
    if (!kv || kv.lease !== session.leaseId || inUse()) return;
    // Checked and sent in one step; an enqueue starting meanwhile waits for this delete to land.
    await remove(kv.createRevision);
  };
  while (!session.signal.aborted && !client.closed) {
    const w = client.watch(key, { signal: session.signal });
    try {
      await w.created;
      await check(await client.get(key)); // one that landed before the watch started
      for await (const batch of w) for (const e of batch.events) if (e.type === 'put') await check(e.kv);
      return; // the session ended
    } catch {
      // A compacted or broken watch: start again from now (the read covers the gap).
    } finally {
      w.cancel();
    }
  }
}
