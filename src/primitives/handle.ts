// The handles a holder gets: a lock's, a permit's, an RW lock's, a leader's. Each is a thin face on
// the engine's Ownership (src/queue/ownership.ts), with the primitive's own words.
import type { Compare } from '../client/kv.js';
import type { Ownership } from '../queue/ownership.js';
import type { ReleaseResult } from '../queue/release.js';
import type { Session } from '../session.js';

/**
 * What a lock holder and a leader hold in their hands: the key, the fencing token, the loss signal
 * and the owner compare. {@link LockHandle} and {@link LeaderHandle} add their own verbs.
 */
export interface OwnerHandle extends AsyncDisposable {
  /** Our key, `<name>/<lease id in hex>`. */
  readonly key: string;
  /**
   * The key's CreateRevision: every later owner gets a larger one. Pass it to the resource you
   * protect and have it reject writes with a token lower than the highest it has seen. A bigint:
   * `JSON.stringify` refuses bigints, so send `String(token)` (and compare as BigInt on the other end).
   */
  readonly fencingToken: bigint;
  /** The session the key lives on. */
  readonly session: Session;
  /**
   * Aborts when ownership ends: session lost, our key deleted or moved off our lease by anyone, or
   * released by us. It fires before the server can expire the lease; stop protected work then.
   */
  readonly signal: AbortSignal;
  /**
   * A Txn compare on the key's CreateRevision: Go's `IsOwner()`. It fails once our key is deleted, but
   * not when someone else (an operator's plain `put`) moved it off our lease, after which another
   * session may hold: guard your own etcd writes with {@link OwnerHandle.ownerCompares} instead.
   */
  ownerCompare(): Compare;
  /**
   * The Txn compares that succeed only while we own the key (our incarnation, on our lease): make your
   * own etcd writes conditional on all of them, `compare: handle.ownerCompares()`.
   */
  ownerCompares(): Compare[];
  /**
   * Gives the key up: every handle's one verb (a lock's `unlock()`, a leader's `resign()` are the same
   * call). Idempotent, guarded on the fencing token, and never rejects for want of etcd: see
   * {@link ReleaseResult}.
   */
  release(): Promise<ReleaseResult>;
}

/** The shared implementation of the handles; not exported from the package. */
export abstract class OwnerHandleBase implements OwnerHandle {
  constructor(protected readonly own: Ownership) {}

  get key(): string {
    return this.own.key;
  }

  get fencingToken(): bigint {
    return this.own.fencingToken;
  }

  get session(): Session {
    return this.own.session;
  }

  get signal(): AbortSignal {
    return this.own.signal;
  }

  ownerCompare(): Compare {
    return this.own.ownerCompare();
  }

  ownerCompares(): Compare[] {
    return this.own.ownerCompares();
  }

  release(): Promise<ReleaseResult> {
    return this.own.release();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.own.release();
  }
}

/** A lock's, permit's or RW lock's handle: assertHeld(), and release() under the primitive's own name too; `await using` releases. */
export abstract class HeldHandle extends OwnerHandleBase {
  assertHeld(): void {
    this.own.assert();
  }
}
