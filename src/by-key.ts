// Records by their key, for state kept per session (the queue engine's key users and gates). Pure.

/** Records by their key, the first inline: a session uses one key almost always, and a Map costs each of 10,000 waiters 220 B. */
export class ByKey<V extends { readonly key: string }> {
  private first: V | undefined;
  private more: Map<string, V> | undefined;

  of(key: string): V | undefined {
    return this.first?.key === key ? this.first : this.more?.get(key);
  }

  /** Adds `v`, whose key has none. */
  protected add(v: V): V {
    if (this.first === undefined) this.first = v;
    else (this.more ??= new Map()).set(v.key, v);
    return v;
  }

  protected remove(v: V): void {
    if (this.first === v) this.first = undefined;
    else if (this.more?.get(v.key) === v) this.more.delete(v.key);
  }
}
