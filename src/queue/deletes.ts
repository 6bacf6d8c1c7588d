/**
 * Deletes of one session still in flight or being retried, by key. An enqueue of that session waits
 * for those among the keys it would queue behind (see ahead): a release whose delete failed must not
 * make its own process wait behind it.
 */
export class InFlightDeletes {
  private readonly byKey = new Map<string, Promise<unknown>>();

  /** Records `done` under `key` until it settles (after any earlier delete of the key: both are waited for). */
  add(key: string, done: Promise<unknown>): void {
    const map = this.byKey;
    const prev = map.get(key);
    const all = prev ? Promise.all([prev, done]) : done;
    map.set(key, all);
    void all.then(() => {
      if (map.get(key) === all) map.delete(key);
    });
  }

  /** The deletes on `key` or on a key `inside` the range an enqueue counts (those it could queue behind). Empty almost always. */
  ahead(key: string, inside: (key: string) => boolean): Promise<unknown>[] {
    if (this.byKey.size === 0) return [];
    const out: Promise<unknown>[] = [];
    for (const [k, p] of this.byKey) if (k === key || inside(k)) out.push(p);
    return out;
  }
}
