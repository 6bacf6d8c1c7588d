/**
 * The live holdings of one session by key. Calls on one session and one name share one key: their
 * holdings of one incarnation end together on a loss, and one leaving hands the leader gauge on to
 * another (see Ownership.end).
 */
export class Holdings<T> {
  private readonly byKey = new Map<string, Set<T>>();

  /** Adds `h` under `key`; returns the holdings of `key` (with `h`). */
  add(key: string, h: T): ReadonlySet<T> {
    let set = this.byKey.get(key);
    if (!set) this.byKey.set(key, (set = new Set()));
    set.add(h);
    return set;
  }

  /** Removes `h`; returns the holdings of `key` left. */
  remove(key: string, h: T): ReadonlySet<T> | undefined {
    const set = this.byKey.get(key);
    set?.delete(h);
    if (set?.size === 0) this.byKey.delete(key);
    return set;
  }

  of(key: string): ReadonlySet<T> | undefined {
    return this.byKey.get(key);
  }
}
