// A test file's own etcd (etcdForFile) and the helpers the lock and barrier files use over it.
import { Client, type Session } from '../../src/index.js';
import type { EtcdCluster } from '../../src/testing/index.js';
import { etcdForFile } from './etcd.js';
import { serverState, waitersBlocked } from './server-metrics.js';
import { openSessions } from './sessions.js';
import { Probe } from '../probe.js';

/** What {@link etcdFile} gives a test file. */
export interface EtcdFile {
  /** The file's etcd and its client, once `before` has started them. */
  cluster(): { etcd: EtcdCluster; client: Client };
  /** Each test's own prefix under the file's root. */
  fresh(scope: string): string;
  /** Sessions on `on` (default: this file's client) that the test closes at its end. */
  sessions(n: number, ttl?: number, on?: Client): Promise<Session[]>;
  /** A client of its own for a test's waiters, spied on (see Probe): its calls and watches are counted. */
  probed(): Probe;
  /** Watchers open on etcd now: the base for {@link EtcdFile.blocked}. */
  watchersNow(): Promise<number>;
  /** `n` more waiters than `base` (watchersNow) blocked on their watch, with nothing in flight. */
  blocked(base: number, n?: number, what?: string): Promise<void>;
}

/** {@link etcdForFile}, and the helpers every lock test file had a copy of. */
export function etcdFile(
  root: string,
  ready: (etcd: EtcdCluster, client: Client) => void,
  options: { beforeChecks?: () => Promise<void> } = {},
): EtcdFile {
  let etcd: EtcdCluster | undefined;
  let client: Client | undefined;
  const fresh = etcdForFile(
    root,
    (e, c) => {
      etcd = e;
      client = c;
      ready(e, c);
    },
    options,
  );
  const url = (): string => etcd!.clientUrls[0]!;
  return {
    cluster: () => ({ etcd: etcd!, client: client! }),
    fresh,
    sessions: (n, ttl = 30, on = client!) => openSessions(on, n, ttl),
    probed: () => new Probe(new Client({ endpoints: etcd!.endpoints })),
    watchersNow: async () => (await serverState(url())).watchers,
    blocked: (base, n = 1, what) => waitersBlocked(url(), base, n, what),
  };
}
