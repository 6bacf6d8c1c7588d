// For long-running observers (`elect --listen`): whether etcd answers, and whether the cluster that
// answers is still the one we were watching. A watch cannot tell: during an outage it just waits,
// and on a fresh cluster (new data, revisions from 1) it waits for a revision that is far away.
import { prefixEnd, type Client } from '../index.js';

/** How often etcd is asked; a count-only read of one prefix costs etcd next to nothing. */
const PROBE_MS = 1000;

export interface ReachabilityEvents {
  /** etcd stopped answering (once per outage). */
  down(err: unknown): void;
  /**
   * etcd answers again after an outage, or another cluster answers (its id changed, or its revision
   * went back): what was being watched must be read afresh.
   */
  changed(why: 'back' | 'new-cluster'): void;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}

function probe(client: Client, key: Buffer, signal: AbortSignal) {
  return client.range(
    { key, rangeEnd: prefixEnd(key), countOnly: true },
    { signal: AbortSignal.any([signal, AbortSignal.timeout(PROBE_MS * 2)]) },
  );
}

/** Resolves once etcd answers a read of `prefix` (probing every second), or `signal` aborts. */
export async function untilAnswers(client: Client, prefix: string, signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    await pause(PROBE_MS, signal);
    if (
      await probe(client, Buffer.from(prefix), signal).then(
        () => true,
        () => false,
      )
    )
      return;
  }
}

/** Probes `prefix` every second until `signal` aborts; never throws. */
export async function watchReachability(client: Client, prefix: string, signal: AbortSignal, on: ReachabilityEvents): Promise<void> {
  const key = Buffer.from(prefix);
  let up = true;
  let seen: { clusterId: bigint; revision: bigint } | undefined;
  while (!signal.aborted) {
    await pause(PROBE_MS, signal);
    if (signal.aborted) return;
    try {
      const { header } = await probe(client, key, signal);
      const fresh = seen !== undefined && (header.clusterId !== seen.clusterId || header.revision < seen.revision);
      seen = { clusterId: header.clusterId, revision: header.revision };
      if (!up) {
        up = true;
        on.changed(fresh ? 'new-cluster' : 'back');
      } else if (fresh) on.changed('new-cluster');
    } catch (err) {
      if (signal.aborted) return;
      if (up) {
        up = false;
        on.down(err);
      }
    }
  }
}
