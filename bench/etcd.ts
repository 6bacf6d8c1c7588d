// The etcd the benchmark runs against: its own, started fresh with etcd's defaults (fsync on).
import { startEtcd } from '../src/testing/index.js';

export interface BenchEtcd {
  endpoints: string[];
  /** etcd's member process ids, to read their CPU time. */
  pids(): number[];
  stop(): Promise<void>;
}

export async function startBenchEtcd(members: 1 | 3): Promise<BenchEtcd> {
  const cluster = await startEtcd({ members });
  return {
    endpoints: cluster.endpoints,
    pids: () => cluster.members.map((m) => m.pid).filter((p): p is number => p !== undefined),
    stop: () => cluster.stop(),
  };
}
