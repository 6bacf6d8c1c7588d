import type { Client } from '../client/client.js';
import { LeaseNotFoundError } from '../client/errors.js';
import { compare, op } from '../client/kv.js';
import { validateName } from '../keys.js';
import { markLeaseGone, type Session } from '../session.js';
import type { AcquireOptions } from '../queue/acquire.js';
import { waitUntil, type TurnRule } from '../queue/wait.js';

/** Options of a {@link Barrier}. */
export interface BarrierOptions {
  /**
   * Attach the barrier key to this session's lease, so that the barrier releases itself when the
   * holder dies (fail open). Default: no lease, as Go's `recipe.Barrier`: the barrier stays held
   * until someone calls `release()`, whoever dies (fail closed). Either way the key is the same, so
   * Go processes wait on it and release it as usual.
   */
  session?: Session;
}

/** Options of a wait: `signal` stops waiting (the wait rejects with its reason and closes its watch). */
export type BarrierWaitOptions = AcquireOptions;

/**
 * A barrier: one key, `name`, blocks every `wait()` while it exists; `release()` deletes it and
 * lets every waiter through. The same key and semantics as Go's `recipe.Barrier`
 * (go.etcd.io/etcd/client/v3/experimental/recipes), so Go and Node processes can hold, wait on
 * and release one barrier.
 */
export class Barrier {
  /** The barrier key, used exactly as given (Go's `NewBarrier(client, key)`). */
  readonly name: string;
  /** The session whose lease the key goes on, if any (see {@link BarrierOptions.session}). */
  readonly session?: Session;

  /**
   * @param client - the client the barrier's calls go through.
   * @param name - the barrier key; Go's `NewBarrier(client, name)` with the same key is the same barrier.
   * @param options - `session` to put the key on that session's lease (default: no lease, as Go).
   */
  constructor(
    readonly client: Client,
    name: string,
    options: BarrierOptions = {},
  ) {
    this.name = validateName(name, 'barrier name');
    if (options.session) this.session = options.session;
  }

  /**
   * Holds the barrier: creates its key if absent, with an empty value, as Go's `Hold`. Unlike Go's,
   * holding a barrier that is already held is not an error: it resolves and leaves the key as it is
   * (so a retry after a lost answer is safe). With a session whose lease is gone it rejects with
   * the session's SessionExpiredError.
   */
  async hold(): Promise<void> {
    const lease = this.session?.leaseId ?? 0n;
    this.session?.assertAlive();
    // Create only if absent: a held barrier keeps its key, lease and revision.
    await this.client
      .txn({ compare: [compare.version(this.name, '=', 0n)], success: [op.put(this.name, '', lease)], failure: [] }, { idempotent: true })
      .catch((err: unknown) => {
        if (this.session && err instanceof LeaseNotFoundError) {
          markLeaseGone(this.session);
          throw this.session.signal.reason;
        }
        throw err;
      });
  }

  /**
   * Releases the barrier: deletes its key (whoever holds it, as Go's `Release`), which lets every
   * waiter through. Releasing a barrier that is not held does nothing. Not retried when its outcome
   * is unknown (WriteOutcomeUnknownError): a blind retry could release a later hold.
   */
  async release(): Promise<void> {
    await this.client.delete(this.name);
  }

  /**
   * Waits until the barrier is not held: resolves at once if its key is absent, else when the key
   * is deleted (released, or its lease gone). Go's `Wait`, with a signal. An abort rejects with the
   * signal's reason and closes the watch; nothing is left in etcd (a wait creates nothing).
   */
  async wait(options: BarrierWaitOptions = {}): Promise<void> {
    options.signal?.throwIfAborted();
    const client = this.client;
    const key = Buffer.from(this.name);
    const held = (signal: AbortSignal) => client.range({ key, countOnly: true }, { signal });
    // A delete after our read is a release, even if someone holds the barrier again before we read
    // again: Go's Wait returns on it too.
    let released = false;
    const rule: TurnRule = {
      async blocker(signal) {
        if (released) return null;
        const r = await held(signal);
        if (r.count === 0n) return null;
        return {
          watch: { key, noPut: true },
          asOf: r.header.revision, // the check is only that the key exists, which this read proved
          confirmed: true,
          changed: (e) => e.type === 'delete' && (released = true),
          check: { keys: [key], blocked: ([kv]) => kv !== undefined },
        };
      },
    };
    // No session: a wait puts nothing on its lease, and a holder's lost lease deletes the key, which
    // is a release; failing the wait on it instead would report a released barrier as an error.
    await waitUntil(client, rule, { signal: options.signal });
  }
}
