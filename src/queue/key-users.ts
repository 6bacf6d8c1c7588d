/**
 * The calls of this process on one key of a session. Our key is `<name>/<lease hex>`, as Go's, so two
 * lock() or campaign() calls on one session and one name share it: the second joins the first's
 * place. They are counted here, and the key is deleted in etcd only when the last of them releases,
 * aborts or fails; one leaving ends only itself.
 */
export interface KeyUse {
  key: string;
  /** The incarnation (CreateRevision) the users share, once an enqueue reported it. */
  rev?: bigint;
  /** Calls on that incarnation, waiting or holding, that have not left it. */
  users: number;
  /** Enqueues in flight: each becomes a user of the incarnation it finds, or of the one it creates. */
  pending: number;
  /** An incarnation whose holdings ended (lost, or revoked) while it may still be in etcd: never joined again. */
  retired?: bigint;
}

/**
 * The keys one session uses: the one use itself while the session has one key (the common case, and
 * a queue of 10,000 sessions would otherwise hold 10,000 Maps), a Map by key from the second on.
 */
export class KeyUsers {
  private u: KeyUse | Map<string, KeyUse> | undefined;

  of(key: string): KeyUse | undefined {
    const u = this.u;
    return u instanceof Map ? u.get(key) : u?.key === key ? u : undefined;
  }

  /** Forgets `use` once nobody uses or enqueues it: the next acquire on its key creates, not joins. */
  settle(key: string, use: KeyUse): void {
    if (use.users !== 0 || use.pending !== 0) return;
    const u = this.u;
    if (u === use) this.u = undefined;
    else if (u instanceof Map && u.get(key) === use) u.delete(key);
  }

  /** An enqueue of `key` starts: until it answers, the key is in use (no sweeper takes it for a ghost). */
  begin(key: string): KeyUse {
    const u = this.u;
    let use = this.of(key);
    if (!use) {
      use = { key, rev: undefined, users: 0, pending: 0 };
      if (!u) this.u = use;
      else if (u instanceof Map) u.set(key, use);
      else
        this.u = new Map([
          [u.key, u],
          [key, use],
        ]);
    }
    use.pending++;
    return use;
  }

  /**
   * The enqueue found or created incarnation `rev` and becomes one of its users: true if it joins
   * others, false if it is the first. Undefined when `rev` is older than the incarnation counted
   * now: an answer that arrived after a newer one (the key was deleted and created again meanwhile).
   * That call is not counted, and must not hold on its answer: it enqueues again.
   */
  join(key: string, use: KeyUse, rev: bigint): boolean | undefined {
    use.pending--;
    if (use.rev === rev) return ++use.users > 1;
    if (use.rev === undefined || rev > use.rev) {
      // A newer incarnation: the one the other users shared was deleted (their waits and watches see it).
      use.rev = rev;
      use.users = 1;
      return false;
    }
    this.settle(key, use);
    return undefined;
  }

  /** The enqueue failed: it no longer counts. */
  abandon(key: string, use: KeyUse): void {
    use.pending--;
    this.settle(key, use);
  }

  /**
   * The holdings of incarnation `rev` of `key` ended (lost, or revoked) while the key may still be in
   * etcd: its token belongs to them, so no later call joins it; the next enqueue replaces it.
   */
  retire(key: string, rev: bigint): void {
    const use = this.of(key);
    if (use?.rev === rev) use.retired = rev;
  }

  /**
   * One more call of this process uses incarnation `rev` of `key`, which another call holds now (an
   * RWMutex downgrade): the key then goes with the last of them. False if `rev` is not the one in use.
   */
  joinHeld(key: string, rev: bigint): boolean {
    const use = this.of(key);
    if (!use || use.rev !== rev) return false;
    use.users++;
    return true;
  }

  /**
   * A call leaves incarnation `rev` of `key`: released, aborted or failed. Returns true when no other
   * call of this process uses it, so the caller deletes it (guarded on `rev`), and false when it is
   * left to them.
   */
  leave(key: string, rev: bigint): boolean {
    const use = this.of(key);
    if (!use) return true;
    if (use.rev === undefined) {
      // Only enqueues in flight use the key: they take this incarnation over, or drop it if they fail.
      use.rev = rev;
      return false;
    }
    if (use.rev !== rev) return true; // not (or no longer) counted: an incarnation that was replaced
    use.users--;
    if (use.users > 0 || use.pending > 0) return false;
    this.settle(key, use);
    return true;
  }
}
