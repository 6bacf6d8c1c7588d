// How far the observer's record of etcd's history goes (observer.ts), and the evidence it can judge.

/** The revisions the observer's watch covered, against those it had to cover. */
export interface RecordExtent {
  /** The last revision the watch delivered (or confirmed by a progress batch). */
  reached: bigint;
  /** The revision it had to reach: the store's revision after the phase's cleanup. */
  wanted: bigint;
}

/**
 * The failure of a phase whose record ends early (its watch stalled or broke for good), naming the
 * revision it ends at; undefined for a complete record. Evidence after that revision is not judged
 * (withinRecord()): a key whose delete the record misses would look alive for ever, and every later
 * grant would be a false violation that hides whatever else happened.
 */
export function incompleteRecord(phase: string, r: RecordExtent): string | undefined {
  if (r.reached >= r.wanted) return undefined;
  return `${phase}: incomplete record: the observer's watch reached revision ${r.reached}, not ${r.wanted}; nothing after revision ${r.reached} was judged`;
}

/**
 * The items the record can judge: those whose revision (`revisionOf`; undefined for an item that
 * names none) is at most the one the record reached. `beyond` counts the rest.
 */
export function withinRecord<T>(items: T[], revisionOf: (item: T) => bigint | undefined, r: RecordExtent): { kept: T[]; beyond: number } {
  const kept = items.filter((item) => {
    const rev = revisionOf(item);
    return rev === undefined || rev <= r.reached;
  });
  return { kept, beyond: items.length - kept.length };
}
