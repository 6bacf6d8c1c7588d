// The demo's names, its two speeds and the jobs its workers charge to card 8801.
import type { Job } from './protocol.js';

export const LOCK = '/locks/card-8801';
export const ELECTION = '/election/scheduler';

export interface Settings {
  mode: string;
  /** Lease TTL of the ordinary workers: long enough to ride out an etcd leader election. */
  workerTtl: number;
  /** The ghost's lease TTL: short, so that the pause which outlives it is short too. */
  ghostTtl: number;
  schedulerTtl: number;
  /** Work inside the critical section, scene 1. */
  holdMs: number;
  /** The ghost's slow part, during which it is frozen. */
  ghostHoldMs: number;
  /** Work inside the critical section, scene 4: long enough to kill etcd's leader meanwhile. */
  raftHoldMs: number;
  tickMs: number;
  /** A pause between scenes, so a human can read along. */
  beatMs: number;
}

export const FAST: Settings = {
  mode: 'fast',
  workerTtl: 10,
  ghostTtl: 3,
  schedulerTtl: 3,
  holdMs: 250,
  ghostHoldMs: 1000,
  raftHoldMs: 1200,
  tickMs: 500,
  beatMs: 150,
};

export const NORMAL: Settings = {
  mode: 'normal',
  workerTtl: 15,
  ghostTtl: 5,
  schedulerTtl: 5,
  holdMs: 1500,
  ghostHoldMs: 2000,
  raftHoldMs: 4000,
  tickMs: 1500,
  beatMs: 3000,
};

export const JOBS: Job[] = [1250, 4999, 1800, 23000, 675, 4000, 1525, 9900, 330].map((cents, i) => ({
  id: `charge-${i + 1}`,
  label: `charge #${i + 1}`,
  cents,
}));
export const job = (n: number): Job => JOBS[n - 1]!;
