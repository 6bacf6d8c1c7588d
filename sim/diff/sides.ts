// The sides a sequence runs on: a fresh real etcd of one version, or (see sim.ts) the simulator.
import { Client } from '../../src/index.js';
import { startEtcd } from '../../src/testing/index.js';

/** A fresh store behind a Client; close() ends both. */
export interface Side {
  /** For reports: `etcd 3.4.23`, `sim 3.4`. */
  readonly name: string;
  readonly client: Client;
  close(): Promise<void>;
}

/** Makes a fresh side for each sequence. */
export type SideFactory = () => Promise<Side>;

/**
 * A fresh single-member etcd of `version` (`3.4`, `3.7.3`) per sequence, from the cache startEtcd
 * uses. A short election timeout: a single member then leads within a few ms of starting, and
 * nothing compared depends on it (raft terms are dropped; leases are longer than any run).
 */
export function etcdSide(version: string): SideFactory {
  return async () => {
    const etcd = await startEtcd({ version, heartbeatMs: 10, electionMs: 100 });
    const client = new Client({ endpoints: etcd.endpoints });
    return {
      name: `etcd ${etcd.version}`,
      client,
      close: async () => {
        try {
          await client.close();
        } finally {
          await etcd.stop();
        }
      },
    };
  };
}
