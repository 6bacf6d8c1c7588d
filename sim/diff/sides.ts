// The sides a sequence runs on: a fresh real etcd of one version, or a fresh simulated etcd with
// that version's profile.
import { Client } from '../../src/index.js';
import { startEtcd } from '../../src/testing/index.js';
import { PROFILES as SIM_PROFILES } from '../../src/testing/sim/store.js';
import { World } from '../../src/testing/sim/world.js';

/** A fresh store and a Client on it. */
export interface Side {
  /** For reports: `etcd 3.4.23`, `sim 3.4`. */
  readonly name: string;
  /** Runs `work` with the side's Client to its end (on the simulator, driving its virtual clock). */
  run<T>(work: (client: Client) => Promise<T>): Promise<T>;
  /** Ends the Client and the store. */
  close(): Promise<void>;
}

/** Makes a fresh side for each sequence; `seed` is the sequence's (the simulator's network draws from it). */
export type SideFactory = (seed: number) => Promise<Side>;

/** The simulator's profiles, by etcd release line (3.4, 3.7). */
export type ProfileName = keyof typeof SIM_PROFILES;
export const PROFILES = Object.keys(SIM_PROFILES) as ProfileName[];

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
      run: (work) => work(client),
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

/** Virtual time a sequence may take: far more than it needs (every wait of the runner is bounded). */
const SIM_BUDGET = { steps: 5_000_000, ms: 30 * 60_000 };

/**
 * A fresh simulated single-member etcd with `profile` per sequence. It owns the process's clock
 * from the start of a run to close(): nothing else may run meanwhile.
 */
export function simSide(profile: ProfileName): SideFactory {
  return async (seed) => {
    const world = new World({ seed, profile, members: 1 });
    world.install();
    const proc = world.proc('diff');
    const client = world.client(proc);
    /** Runs `work` as the simulated client process until it settles. */
    const drive = async <T>(work: () => Promise<T>): Promise<T> => {
      let outcome: { ok: true; value: T } | { ok: false; err: unknown } | undefined;
      proc.start(work).then(
        (value) => (outcome = { ok: true, value }),
        (err: unknown) => (outcome = { ok: false, err }),
      );
      const why = await world.time.run(() => outcome !== undefined, { steps: SIM_BUDGET.steps, ms: world.time.now + SIM_BUDGET.ms });
      if (!outcome)
        throw new Error(`the simulator stopped before the run ended (${why}${world.time.thrown.map((e) => `: ${e}`).join('')})`);
      if (!outcome.ok) throw outcome.err;
      return outcome.value;
    };
    return {
      name: `sim ${profile}`,
      run: (work) => drive(() => work(client)),
      close: async () => {
        try {
          await drive(() => client.close());
        } finally {
          world.dispose();
        }
      },
    };
  };
}
