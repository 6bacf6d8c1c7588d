import type { Watch, WatchBatch, WatchSink } from '../client/watch.js';
import type { Session } from '../session.js';

/** What a kept watch watches and how: its id (built when needed, not kept by every waiter). */
export interface WatchTarget {
  /** The key to watch, or the prefix when `prefix` is set (a string: its UTF-8 bytes). */
  key: string | Buffer;
  prefix?: boolean;
  /** Deletes only: puts under a watched prefix (newcomers queueing behind) cannot end a wait. */
  noPut?: boolean;
  /** Puts only: a wait for a key to appear (a barrier opening) ignores deletes. */
  noDelete?: boolean;
}

/** A watch kept open after a wait: its batches wait here for the session's next wait on the same key. */
export class Kept implements WatchSink {
  readonly batches: WatchBatch[] = [];
  timer?: NodeJS.Timeout;
  constructor(
    readonly w: Watch,
    /** Every event after this revision reaches the watch. */
    readonly from: bigint,
    /** The newest event revision a wait has taken from it: a later wait may reuse it only if its read is not older. */
    readonly through: bigint,
  ) {}

  push(batch: WatchBatch): void {
    this.batches.push(batch);
  }

  end(): void {} // an ended watch is never taken again (take checks w.ended)
}

/** A kept watch's id. */
export function keptId(b: WatchTarget): string {
  // A Buffer key by its bytes (latin1 is lossless), a string key as itself: a key is always one or the other.
  return `${b.prefix ? 'p' : 'k'}${b.noPut ? 'n' : ''}${b.noDelete ? 'd' : ''}${typeof b.key === 'string' ? `s/${b.key}` : `b/${b.key.toString('latin1')}`}`;
}

/** Where a watch we cancel ourselves hands its last word: nobody listens any more. */
export const ignored: WatchSink = { push() {}, end() {} };

const KEEP_PER_SESSION = 4;
const KEEP_MS = 5000;

/**
 * The watches a client keeps open after a wait, per session and watched key: at most a few per
 * session, each for a few seconds, for the session's next wait on the same key (a FIFO queue's
 * order repeats). Dropped when their session ends or the client closes.
 */
export class KeptWatches {
  private readonly bySession = new Map<Session, Map<string, Kept>>();

  take(session: Session, id: string): Kept | undefined {
    const m = this.bySession.get(session);
    const k = m?.get(id);
    if (!k) return undefined;
    m!.delete(id);
    clearTimeout(k.timer);
    return k.w.ended ? undefined : k;
  }

  keep(session: Session, id: string, k: Kept): void {
    if (session.signal.aborted || k.w.ended) return drop(k);
    let m = this.bySession.get(session);
    if (!m) {
      const map = (m = new Map<string, Kept>());
      this.bySession.set(session, map);
      session.signal.addEventListener(
        'abort',
        () => {
          if (this.bySession.get(session) === map) this.bySession.delete(session);
          for (const x of map.values()) drop(x);
          map.clear();
        },
        { once: true },
      );
    }
    const old = m.get(id);
    if (old) {
      m.delete(id);
      drop(old);
    }
    if (m.size >= KEEP_PER_SESSION) {
      const [oldestId, oldest] = m.entries().next().value!;
      m.delete(oldestId);
      drop(oldest);
    }
    const map = m;
    k.timer = setTimeout(() => {
      if (map.get(id) === k) map.delete(id);
      drop(k);
    }, KEEP_MS);
    k.timer.unref();
    map.set(id, k);
  }

  /** The client closed: every kept watch goes. */
  close(): void {
    for (const m of this.bySession.values()) for (const k of m.values()) drop(k);
    this.bySession.clear();
  }
}

export function drop(k: Kept): void {
  clearTimeout(k.timer);
  k.w.sink = ignored;
  k.w.cancel();
}
