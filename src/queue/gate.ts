import type { Session } from '../session.js';

/**
 * In-process turns on one key of a session: a small readers-writer lock, FIFO, held before any
 * etcd traffic. An exclusive call (a lock, a permit, a write lock, a campaign) waits here while
 * another call of this process holds or waits on the same session and key, without a request to
 * etcd, so that it gets a key of its own (a new incarnation, a new fencing token) once the other
 * one's key is gone. Shared calls (read locks, or any call made with `share: true`) hold together.
 */
interface Gate {
  /** Calls holding their turn now. */
  holders: number;
  /** The holders hold exclusively (one call, plus any read lock it downgraded to). */
  exclusive: boolean;
  queue: Turn[];
}

interface Turn {
  shared: boolean;
  grant(exit: Exit): void;
}

/** Ends a turn; idempotent. */
export type Exit = () => void;

const gates = new WeakMap<Session, Map<string, Gate>>();

function gateOf(session: Session, key: string): Gate {
  let m = gates.get(session);
  if (!m) gates.set(session, (m = new Map()));
  let g = m.get(key);
  if (!g) m.set(key, (g = { holders: 0, exclusive: false, queue: [] }));
  return g;
}

function free(g: Gate, shared: boolean): boolean {
  return g.holders === 0 || (shared && !g.exclusive);
}

function take(session: Session, key: string, g: Gate, shared: boolean): Exit {
  g.holders++;
  g.exclusive = !shared;
  let done = false;
  return () => {
    if (done) return;
    done = true;
    g.holders--;
    if (g.holders === 0) g.exclusive = false;
    // FIFO: the head goes first; shared turns behind it go along while the gate stays shared.
    while (g.queue.length > 0 && free(g, g.queue[0]!.shared)) {
      const t = g.queue.shift()!;
      t.grant(take(session, key, g, t.shared));
    }
    if (g.holders === 0 && g.queue.length === 0) {
      const m = gates.get(session);
      if (m?.get(key) === g) m.delete(key);
    }
  };
}

/** Takes a turn now if the gate is free for it (nobody queued ahead either), else undefined. */
export function tryEnter(session: Session, key: string, shared: boolean): Exit | undefined {
  const g = gateOf(session, key);
  if (g.queue.length > 0 || !free(g, shared)) return undefined;
  return take(session, key, g, shared);
}

/**
 * Waits for a turn, in FIFO order; rejects with the reason of `signal` or of the session's loss.
 * Nothing is sent to etcd meanwhile.
 */
export function enter(session: Session, key: string, shared: boolean, signal?: AbortSignal): Promise<Exit> {
  const now = tryEnter(session, key, shared);
  if (now) return Promise.resolve(now);
  const g = gateOf(session, key);
  return new Promise<Exit>((resolve, reject) => {
    const stop = (): void => {
      const i = g.queue.indexOf(turn);
      if (i < 0) return;
      g.queue.splice(i, 1);
      unlisten();
      reject(signal?.aborted ? signal.reason : session.signal.reason);
      // A shared turn behind us may go now that we no longer wait ahead of it.
      while (g.queue.length > 0 && free(g, g.queue[0]!.shared)) {
        const t = g.queue.shift()!;
        t.grant(take(session, key, g, t.shared));
      }
    };
    const unlisten = (): void => {
      signal?.removeEventListener('abort', stop);
      session.signal.removeEventListener('abort', stop);
    };
    const turn: Turn = {
      shared,
      grant: (exit) => {
        unlisten();
        resolve(exit);
      },
    };
    if (signal?.aborted || session.signal.aborted) return reject(signal?.aborted ? signal.reason : session.signal.reason);
    g.queue.push(turn);
    signal?.addEventListener('abort', stop, { once: true });
    session.signal.addEventListener('abort', stop, { once: true });
  });
}

/**
 * One more holder of an exclusive turn held by this process (an RWMutex write lock downgrading to a
 * read lock): the gate stays exclusive until both have left.
 */
export function enterAlongside(session: Session, key: string): Exit {
  return take(session, key, gateOf(session, key), false);
}
