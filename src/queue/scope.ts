import { isParticipantKey, ownBuffer, prefixOf } from '../keys.js';

/** Where a waiter looks for what is older than it: a key range, and which keys in it count. */
export interface Scope {
  prefix: Buffer;
  /** True for a participant's key (not a nested name's, not unrelated data under the prefix). */
  isCandidate(key: Buffer): boolean;
}

const SCOPES = 256;

/** Scopes by name, shared by every waiter of a client on the name (bounded: oldest out first). */
export class Scopes {
  private readonly byName = new Map<string, Scope>();

  /** The participants of a lock or election: `<name>/<hex>` keys. */
  participants(name: string): Scope {
    let scope = this.byName.get(name);
    if (!scope) {
      if (this.byName.size >= SCOPES) this.byName.delete(this.byName.keys().next().value!);
      const prefix = ownBuffer(prefixOf(name));
      this.byName.set(name, (scope = { prefix, isCandidate: (key) => isParticipantKey(prefix, key) }));
    }
    return scope;
  }
}
