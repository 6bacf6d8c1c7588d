// The fenced store's counter for one worker: answers its requests (fenced-store.ts) and springs the
// nemesis's traps on them (a freeze at the first request of a hold, an operator taking the hold away).
import type { FencedStore } from './fenced-store.js';
import { now, type ParentMessage, type WorkerEvent } from './common.js';

export type StoreRequest = Extract<WorkerEvent, { t: 'store' }>;

/** What the desk needs of its worker. */
export interface DeskWorker {
  readonly store: FencedStore;
  pause(): void;
  send(m: ParentMessage): void;
  /** The request was applied and its answer sent or on its way: for the worker's Porcupine record. */
  answered(e: StoreRequest, entry: { ok: boolean; value: number }, label: string): void;
}

export class StoreDesk {
  /**
   * Armed by the nemesis. `freeze`: SIGSTOP this worker the moment its next first request of a hold
   * (a ledger read, an enter) is answered. `operator`: at its next request while holding (those, or
   * a leader's write), hand the hold's token to `take` (which deletes its key or revokes its lease)
   * and answer only once that is done and `take` returns.
   */
  private trap?: { kind: 'freeze'; fire: () => void; careful: boolean } | { kind: 'operator'; take: (token: bigint) => Promise<void> };
  /** Armed by the nemesis (trapStale()): runs at this worker's next stale-pause, before it writes. */
  private staleTrap?: (token: bigint) => Promise<void>;

  constructor(private readonly worker: DeskWorker) {}

  /** Applies a request to the store and answers it, unless a trap holds the answer back. */
  answer(e: StoreRequest, label: string): void {
    const store = this.worker.store;
    const token = BigInt(e.token);
    const at = now();
    let entry: { ok: boolean; value: number };
    let highest: bigint;
    if (e.register === 'permits') {
      const p = store.permits;
      entry =
        e.op === 'enter'
          ? p.enter(label, token, at)
          : e.op === 'write'
            ? p.write(label, token, at, e.opId, e.careful)
            : p.leave(label, token, at);
      highest = [...p.admitted].reduce((m, t) => (t > m ? t : m), -1n);
    } else if (e.register === 'rw') {
      const op = e.op === 'enter' || e.op === 'write' ? e.op : 'read';
      entry = store.rw.request(label, op, e.mode ?? 'read', token, at, e.value, e.opId, e.careful);
      highest = store.rw.highest;
    } else {
      const reg = store.register(e.register);
      entry = e.op === 'read' ? reg.read(label, token, at) : reg.write(label, token, e.value ?? 0, at, e.opId, e.careful);
      highest = reg.highest;
    }
    let careful: boolean | undefined;
    const firstOfHold = e.op === 'enter' || (e.op === 'read' && e.register === 'ledger');
    const trap = this.trap;
    if (firstOfHold && trap?.kind === 'freeze') {
      // Freeze it before the answer is written: it wakes up inside its critical section, with a
      // value read under a token that may have been superseded meanwhile (the GC-pause ghost).
      this.worker.pause();
      careful = trap.careful;
      trap.fire();
      this.trap = undefined;
    } else if ((firstOfHold || (e.op === 'write' && e.register === 'election')) && trap?.kind === 'operator') {
      // An operator takes the key away while the holder waits for this answer; it answers after.
      this.trap = undefined;
      const reply: ParentMessage = { t: 'store-reply', id: e.id, ok: entry.ok, value: entry.value, highest: highest.toString() };
      void trap.take(token).finally(() => {
        this.worker.send(reply);
        this.worker.answered(e, entry, label);
      });
      return;
    }
    this.worker.send({ t: 'store-reply', id: e.id, ok: entry.ok, value: entry.value, highest: highest.toString(), careful });
    this.worker.answered(e, entry, label);
  }

  /**
   * A stale hold paused before its writes (worker.ts stalePause()): the armed trap runs with its
   * token, then the worker is told to go on; at once when no trap is armed (it then writes as any
   * plain holder does).
   */
  stalePaused(token: bigint): void {
    const take = this.staleTrap;
    this.staleTrap = undefined;
    if (!take) return this.worker.send({ t: 'stale-go' });
    void take(token).finally(() => this.worker.send({ t: 'stale-go' }));
  }

  /**
   * Asks the worker for a stale hold and arms its trap: at its stale-pause, `take` runs with the
   * hold's token and the worker writes only once `take` returns. Resolves true once `take` has run,
   * false if no stale-pause came within `limitMs`.
   */
  trapStale(limitMs: number, take: (token: bigint) => Promise<void>): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.staleTrap = undefined;
        resolve(false);
      }, limitMs);
      this.staleTrap = async (token) => {
        clearTimeout(timer);
        try {
          await take(token);
        } finally {
          resolve(true);
        }
      };
      this.worker.send({ t: 'stale' });
    });
  }

  /** Resolves true once the worker was frozen right after the first request of a hold, false after `limitMs`. */
  trapNextRead(limitMs: number, careful: boolean): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.trap = undefined;
        resolve(false);
      }, limitMs);
      this.trap = {
        kind: 'freeze',
        careful,
        fire: () => {
          clearTimeout(timer);
          resolve(true);
        },
      };
    });
  }

  /**
   * Arms an operator trap: at the next request this worker makes while holding (see `trap`), `take`
   * runs with the hold's token and the answer waits for it. Resolves true once `take` has run,
   * false if no such request came within `limitMs`.
   */
  trapNextHold(limitMs: number, take: (token: bigint) => Promise<void>): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.trap = undefined;
        resolve(false);
      }, limitMs);
      this.trap = {
        kind: 'operator',
        take: async (token) => {
          clearTimeout(timer);
          try {
            await take(token);
          } finally {
            resolve(true);
          }
        },
      };
    });
  }
}
