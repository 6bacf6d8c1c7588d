// Helpers shared by the RWMutex test files (rwmutex, rwmutex-loss).
import type { RWLockHandle, Session } from '../src/index.js';
import { type EtcdFile, type Tracked, assertNoKeys, closeAll, settleAll } from './helpers.js';
import type { Probe } from './probe.js';

/** What a test run by {@link waitersOn}'s function is handed. */
export interface Waiters {
  /** The lock's name, under the test's own prefix. */
  name: string;
  probe: Probe;
  /** Sessions on the file's client. */
  own: Session[];
  /** Sessions on the probed client, for the waiters. */
  waiting: Session[];
  /** Calls that may still run when the test ends: settled once every session is closed. */
  pending: Tracked<RWLockHandle>[];
}

/**
 * `withWaiters(scope, counts, body)` for a test file: runs `body` on a fresh lock name with `own`
 * sessions (default 1) on the file's client and `waiting` sessions (default 1, TTL `ttl`) on a probed
 * client; then closes them all, settles `pending` and checks that nothing is left under the test's prefix.
 */
export function waitersOn(
  file: EtcdFile,
): (scope: string, counts: { own?: number; waiting?: number; ttl?: number }, body: (w: Waiters) => Promise<void>) => Promise<void> {
  return async (scope, counts, body) => {
    const p = file.fresh(scope);
    const probe = file.probed();
    const own = await file.sessions(counts.own ?? 1);
    const waiting = await file.sessions(counts.waiting ?? 1, counts.ttl ?? 30, probe.client);
    const pending: Tracked<RWLockHandle>[] = [];
    try {
      await body({ name: `${p}rw`, probe, own, waiting, pending });
    } finally {
      await closeAll([...own, ...waiting]);
      await probe.client.close();
      await settleAll(pending);
    }
    await assertNoKeys(file.cluster().client, p);
  };
}
