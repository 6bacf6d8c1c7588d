// The etcd the benchmark runs against: its own, started fresh with etcd's defaults (fsync on).
import { startEtcd } from '../src/testing/index.js';

export interface BenchEtcd {
  endpoints: string[];
  /** The server's version as `etcd --version` reports it, e.g. `3.7.3`. */
  version: string;
  /** etcd's member process ids, to read their CPU time. */
  pids(): number[];
  /** SIGKILLs every member (the sessions-scale phase's outage). */
  killAll(): Promise<void>;
  /** Starts every member again on its data and ports; resolves once healthy. */
  restartAll(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * `version` is `3.4`, `3.7.3`, ...: a version from the cache (`npm run etcd -- install`); without
 * it, `ETCD_VERSION`, else the newest cached, else `etcd` on PATH (as the tests pick).
 */
export async function startBenchEtcd(members: 1 | 3, version?: string): Promise<BenchEtcd> {
  const cluster = await startEtcd({ members, ...(version ? { version } : {}) });
  return {
    endpoints: cluster.endpoints,
    version: cluster.version,
    pids: () => cluster.members.map((m) => m.pid).filter((p): p is number => p !== undefined),
    killAll: async () => void (await Promise.all(cluster.members.map((_, i) => cluster.kill(i)))),
    restartAll: async () => void (await Promise.all(cluster.members.map((_, i) => cluster.restart(i)))),
    stop: () => cluster.stop(),
  };
}
