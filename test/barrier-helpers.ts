// Helpers shared by the barrier test files (barrier, double-barrier, double-barrier-count): the
// file's etcd (etcdFile) and the waits that say a barrier call has been answered or is still waiting.
import type { Client } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { type EtcdFile, type EventLog, type LoggedEvent, etcdFile, grpcHandled, metric, settle, waitFor } from './helpers.js';

/** What {@link barrierFile} gives a barrier test file. */
export interface BarrierFile extends EtcdFile {
  /** How many calls of `method` etcd has answered. */
  handled(method: 'Range' | 'Txn'): Promise<number>;
  /** Watchers open on etcd now. */
  watchers(): Promise<number>;
  /**
   * Resolves once etcd has answered `n` more `method` calls than `base`, and one more read after them
   * on the same connection: whatever those answers led to has run by then.
   */
  answered(method: 'Range' | 'Txn', base: number, n: number): Promise<void>;
  /** One read on the shared connection, then a turn of the event loop: answers sent before it have been handled. */
  roundTrip(): Promise<void>;
  /** The next put of a waiter key under `name` in `log`, from event index `from`. */
  waiterPut(log: EventLog, name: string, from: number): Promise<LoggedEvent>;
}

/** {@link etcdFile} for a barrier test file, with the waits above. */
export function barrierFile(
  root: string,
  ready: (etcd: EtcdCluster, client: Client) => void,
  options: { beforeChecks?: () => Promise<void> } = {},
): BarrierFile {
  const file = etcdFile(root, ready, options);
  const url = (): string => file.cluster().etcd.clientUrls[0]!;
  const handled = (method: 'Range' | 'Txn'): Promise<number> => grpcHandled(url(), method);
  const roundTrip = async (): Promise<void> => {
    await file.cluster().client.get(`${root}round-trip`);
    await settle();
  };
  return {
    ...file,
    handled,
    watchers: () => metric(url(), 'etcd_debugging_mvcc_watcher_total'),
    answered: async (method, base, n) => {
      await waitFor(async () => (await handled(method)) >= base + n, `${n} more ${method} answered`);
      await roundTrip();
    },
    roundTrip,
    waiterPut: (log, name, from) => log.next((e) => e.type === 'put' && e.key.startsWith(`${name}/waiters/`), from),
  };
}
