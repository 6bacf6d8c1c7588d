// Virtual time: every timer, Date, performance.now and process.hrtime of the process run on a fake
// clock (@sinonjs/fake-timers) that the simulator advances one timer at a time, letting promise
// jobs run between timers. Each timer belongs to the simulated process that created it, so a
// paused process's timers wait and a crashed one's never fire.
//
// Which process is running needs no AsyncLocalStorage: timers fire one at a time and every promise
// job they start runs before the next fires, so the process of the last timer fired is the one
// running until then. Code outside every process (the cluster, the network) runs as none.
import { createRequire } from 'node:module';

type FakeClock = {
  now: number;
  next(): number;
  countTimers(): number;
  uninstall(): void;
};
type FakeTimers = { install(config: Record<string, unknown>): FakeClock };

/** The fake-timers library, an optional peer dependency of etcd-concurrency/testing. */
function fakeTimers(): FakeTimers {
  try {
    return createRequire(import.meta.url)('@sinonjs/fake-timers') as FakeTimers;
  } catch (err) {
    throw new Error(
      'the simulator needs @sinonjs/fake-timers (an optional peer dependency of etcd-concurrency/testing): npm install --save-dev @sinonjs/fake-timers@15',
      { cause: err },
    );
  }
}

/** What the clock must never fake: promise jobs and ticks are how the library's code runs between timers. */
const FAKED = ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate', 'setInterval', 'clearInterval', 'Date', 'hrtime', 'performance'];

/** The virtual epoch: 2026-01-01T00:00:00Z. */
export const EPOCH_MS = Date.UTC(2026, 0, 1);

type Callback = (...args: unknown[]) => void;

/** A timer callback waiting for its process to wake. */
interface Deferred {
  run: () => void;
  cancelled: boolean;
}

/** A simulated client process: its timers and deliveries stop while paused and end when crashed. */
export class Proc {
  paused = false;
  crashed = false;
  /** Timer callbacks that came due while paused, in the order they came due. */
  deferred: Deferred[] = [];
  /** Runs at the instant the process wakes, before any of its timers (the oracle's assertHeld check). */
  onWake?: () => void;

  constructor(
    readonly name: string,
    private readonly time: VirtualTime,
  ) {}

  /** Runs `fn` as this process: the timers it creates belong to it. Promise jobs it leaves run as
   * whoever runs next: start asynchronous work with `start`, which runs it from a timer of its own. */
  run<T>(fn: () => T): T {
    return this.time.as(this, fn);
  }

  /** Starts `fn` as this process on the next turn (from a timer of its own, so its promise jobs are its own too). */
  start<T>(fn: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => this.run(() => setTimeout(() => fn().then(resolve, reject), 0)));
  }

  pause(): void {
    if (!this.crashed) this.paused = true;
  }

  resume(): void {
    if (!this.paused || this.crashed) return;
    this.paused = false;
    this.run(() => this.onWake?.());
    const due = this.deferred;
    this.deferred = [];
    // Everything that came due while it slept runs now, in the order it came due.
    for (const d of due) if (!d.cancelled) this.run(() => setTimeout(d.run, 0));
  }

  crash(): void {
    this.crashed = true;
    this.paused = false;
    this.deferred = [];
  }
}

/**
 * The clock. install() fakes the globals, and uninstall() restores them; run() advances time timer
 * by timer until `done` says so, nothing is left to run, or a budget runs out.
 */
export class VirtualTime {
  /** The process running now (undefined: none, the simulated servers and network). */
  current: Proc | undefined;
  private clock?: FakeClock;
  private readonly realSetImmediate = globalThis.setImmediate;
  private readonly realRandom = Math.random;
  private saved: Record<string, unknown> = {};
  private readonly entries = new WeakMap<object, Deferred>();
  private fakeClearInterval: (h: unknown) => void = () => {};
  /** Timer callbacks fired (steps). */
  steps = 0;
  /** An exception a timer callback threw, if any (the run stops with it). */
  thrown: unknown[] = [];

  /** Milliseconds since the virtual epoch... as performance.now() reads it. */
  get now(): number {
    return this.clock ? this.clock.now - EPOCH_MS : 0;
  }

  install(random: () => number): void {
    if (this.clock) throw new Error('the virtual clock is already installed');
    this.clock = fakeTimers().install({ now: EPOCH_MS, toFake: FAKED, loopLimit: 1e9 });
    const g = globalThis as unknown as Record<string, unknown>;
    for (const name of ['setTimeout', 'setInterval', 'setImmediate', 'clearTimeout', 'clearInterval', 'clearImmediate']) {
      this.saved[name] = g[name];
    }
    const fakeTimeout = g.setTimeout as (cb: Callback, ms?: number, ...args: unknown[]) => object;
    const fakeInterval = g.setInterval as (cb: Callback, ms?: number, ...args: unknown[]) => object;
    const fakeImmediate = g.setImmediate as (cb: Callback, ...args: unknown[]) => object;
    const clears = {
      clearTimeout: g.clearTimeout as (h: unknown) => void,
      clearInterval: g.clearInterval as (h: unknown) => void,
      clearImmediate: g.clearImmediate as (h: unknown) => void,
    };
    g.setTimeout = (cb: Callback, ms?: number, ...args: unknown[]) => this.tag(cb, args, false, (f) => fakeTimeout(f, ms));
    g.setInterval = (cb: Callback, ms?: number, ...args: unknown[]) => this.tag(cb, args, true, (f) => fakeInterval(f, ms));
    g.setImmediate = (cb: Callback, ...args: unknown[]) => this.tag(cb, args, false, (f) => fakeImmediate(f));
    this.fakeClearInterval = clears.clearInterval;
    for (const [name, clear] of Object.entries(clears)) {
      g[name] = (h: unknown) => {
        if (h && typeof h === 'object') {
          const d = this.entries.get(h);
          if (d) d.cancelled = true;
        }
        clear(h);
      };
    }
    Math.random = random;
  }

  uninstall(): void {
    if (!this.clock) return;
    const g = globalThis as unknown as Record<string, unknown>;
    for (const [name, f] of Object.entries(this.saved)) g[name] = f;
    this.saved = {};
    this.clock.uninstall();
    this.clock = undefined;
    Math.random = this.realRandom;
  }

  /** A fake timer whose callback runs as the process that created it, or waits while that process sleeps. */
  private tag(cb: Callback, args: unknown[], repeat: boolean, create: (f: () => void) => object): object {
    const proc = this.current;
    const entry: Deferred = { run: () => cb(...args), cancelled: false };
    let handle: object | undefined;
    const fire = proc
      ? () => {
          if (entry.cancelled) return;
          if (proc.crashed) {
            // A crashed process's interval must not tick forever.
            if (repeat) this.fakeClearInterval(handle);
            return;
          }
          if (proc.paused) {
            // An interval fires once on waking, not once per period missed.
            if (!(repeat && proc.deferred.includes(entry))) proc.deferred.push(entry);
            return;
          }
          this.current = proc;
          entry.run();
        }
      : () => {
          if (entry.cancelled) return;
          this.current = undefined;
          entry.run();
        };
    handle = create(fire);
    this.entries.set(handle, entry);
    return handle;
  }

  /** Runs `fn` as `proc` (undefined: as none), then as whoever ran before. */
  as<T>(proc: Proc | undefined, fn: () => T): T {
    const before = this.current;
    this.current = proc;
    try {
      return fn();
    } finally {
      this.current = before;
    }
  }

  /** Timers pending (a crashed process's included until they come due). */
  get pending(): number {
    return this.clock?.countTimers() ?? 0;
  }

  /** Lets every promise job and tick run: a real macrotask, after the microtask queue is empty. */
  settle(): Promise<void> {
    return new Promise((resolve) => this.realSetImmediate(resolve));
  }

  /**
   * Advances time one timer at a time, settling promise jobs after each, until `stop()` is true or
   * no timer is left. Returns why it stopped.
   */
  async run(stop: () => boolean, budget: { steps: number; ms: number }): Promise<'stopped' | 'idle' | 'steps' | 'time' | 'thrown'> {
    const clock = this.clock!;
    for (;;) {
      await this.settle();
      if (this.thrown.length > 0) return 'thrown';
      if (stop()) return 'stopped';
      if (clock.countTimers() === 0) return 'idle';
      if (this.steps >= budget.steps) return 'steps';
      if (this.now > budget.ms) return 'time';
      this.steps++;
      try {
        clock.next();
      } catch (err) {
        this.thrown.push(err);
      }
    }
  }
}
