import { isStopped, onStop, stopReason } from '../stop.js';
import { ByKey } from '../by-key.js';

/**
 * In-process turns on one key of a session: a small readers-writer lock, FIFO, taken before any etcd
 * traffic. An exclusive call (a lock, a permit, a write lock, a campaign) waits here, with no request,
 * while another call of this process holds or waits on the key, so that it gets a key of its own (a
 * new fencing token) once the other's is gone. Shared calls (read locks, `share: true`) hold together.
 */
export interface Gate {
  readonly key: string;
  readonly gates: Gates;
  /** Calls holding their turn now. */
  holders: number;
  /** The holders hold exclusively (one call, plus any read lock it downgraded to). */
  exclusive: boolean;
  queue?: Turn[]; // made when a turn first waits
}

interface Turn {
  shared: boolean;
  /** A shared turn that waits, like an exclusive one, until nobody holds (see {@link Gates.enterAfterHolders}). */
  afterHolders: boolean;
  grant(exit: Exit): void;
}

/** A turn held: `leave()` ends it (idempotent). An object, not a closure: each of 10,000 waiters keeps one. */
export class Exit {
  private done = false;
  constructor(private readonly g: Gate) {}

  leave(): void {
    if (this.done) return;
    this.done = true;
    this.g.gates.left(this.g);
  }
}

/** The gates of one session, by key. Nothing here knows etcd. */
export class Gates extends ByKey<Gate> {
  private gateOf(key: string): Gate {
    return this.of(key) ?? this.add({ key, gates: this, holders: 0, exclusive: false });
  }

  private take(g: Gate, shared: boolean): Exit {
    g.holders++;
    g.exclusive = !shared;
    return new Exit(g);
  }

  /** A turn on `g` ended (Exit.leave). */
  left(g: Gate): void {
    g.holders--;
    if (g.holders === 0) g.exclusive = false;
    this.grantQueued(g);
    if (g.holders === 0 && !g.queue?.length) this.remove(g);
  }

  /** FIFO: the head goes first; shared turns behind it go along while the gate stays shared. */
  private grantQueued(g: Gate): void {
    while (g.queue?.length && free(g, g.queue[0]!)) {
      const t = g.queue.shift()!;
      t.grant(this.take(g, t.shared));
    }
  }

  /** Calls wait for a turn on `key`. */
  waiting(key: string): boolean {
    return (this.of(key)?.queue?.length ?? 0) > 0;
  }

  /** Takes a turn now if the gate is free for it (nobody queued ahead either), else undefined. */
  tryEnter(key: string, shared: boolean): Exit | undefined {
    const g = this.gateOf(key);
    if (g.queue?.length || !free(g, { shared, afterHolders: false })) return undefined;
    return this.take(g, shared);
  }

  /** Waits for a turn, in FIFO order; rejects with the reason of `signal` or of `sessionSignal`. */
  enter(key: string, shared: boolean, sessionSignal: AbortSignal, signal?: AbortSignal): Promise<Exit> {
    const now = this.tryEnter(key, shared);
    if (now) return Promise.resolve(now);
    return this.wait(this.gateOf(key), { shared, afterHolders: false }, sessionSignal, signal);
  }

  /**
   * A shared turn once every call holding one now has left, FIFO (later shared calls wait behind it,
   * then hold with it): a read that must not join its holders' read key (a writer queued behind it).
   */
  enterAfterHolders(key: string, sessionSignal: AbortSignal, signal?: AbortSignal): Promise<Exit> {
    const g = this.gateOf(key);
    if (g.holders === 0 && !g.queue?.length) return Promise.resolve(this.take(g, true));
    return this.wait(g, { shared: true, afterHolders: true }, sessionSignal, signal);
  }

  private wait(g: Gate, kind: Pick<Turn, 'shared' | 'afterHolders'>, sessionSignal: AbortSignal, signal?: AbortSignal): Promise<Exit> {
    return new Promise<Exit>((resolve, reject) => {
      if (isStopped(signal, sessionSignal)) return reject(stopReason(signal, sessionSignal));
      const turn: Turn = {
        ...kind,
        grant: (exit) => {
          unlisten();
          resolve(exit);
        },
      };
      (g.queue ??= []).push(turn);
      const unlisten = onStop(signal, sessionSignal, (reason) => {
        const i = g.queue!.indexOf(turn);
        if (i < 0) return;
        g.queue!.splice(i, 1);
        reject(reason);
        // A shared turn behind us may go now that we no longer wait ahead of it.
        this.grantQueued(g);
      });
    });
  }

  /** Another holder of an exclusive turn (an RWMutex write lock downgrading): exclusive until both left. */
  enterAlongside(key: string): Exit {
    return this.take(this.gateOf(key), false);
  }
}

function free(g: Gate, t: Pick<Turn, 'shared' | 'afterHolders'>): boolean {
  return g.holders === 0 || (t.shared && !t.afterHolders && !g.exclusive);
}
