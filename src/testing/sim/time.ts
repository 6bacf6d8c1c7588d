// Virtual time: every timer, Date, performance.now and process.hrtime of the process run on a
// virtual clock that the simulator advances one timer at a time, letting promise jobs run between
// timers. Each timer belongs to the simulated process that created it, so a paused process's
// timers wait and a crashed one's never fire.
//
// @sinonjs/fake-timers fakes Date and process.hrtime; performance.now and the timers are this
// file's: a heap that fires them in fake-timers' order (due time, immediates first, then
// creation), reached by every way to make one (the globals, `node:timers`, `node:timers/promises`,
// util.promisify(setTimeout)). The functions are made once for every run: the globals hold them
// while a clock is installed, the two modules from the first install on (node's own timers then
// answer while none is).
//
// Which process is running needs no AsyncLocalStorage: timers fire one at a time and every promise
// job they start runs before the next fires, so the process of the last timer fired is the one
// running until then. Code outside every process (the cluster, the network) runs as none.
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { promisify } from 'node:util';

type FakeClock = { now: number; uninstall(): void };
type FakeTimers = { install(config: Record<string, unknown>): FakeClock };

const load = createRequire(import.meta.url);
let loaded: FakeTimers | undefined;

/** The fake-timers library, an optional peer dependency of etcd-concurrency/testing. */
function fakeTimers(): FakeTimers {
  try {
    loaded ??= load('@sinonjs/fake-timers') as FakeTimers;
    return loaded;
  } catch (err) {
    throw new Error(
      'the simulator needs @sinonjs/fake-timers (an optional peer dependency of etcd-concurrency/testing): npm install --save-dev @sinonjs/fake-timers@15',
      { cause: err },
    );
  }
}

/**
 * The clocks fake-timers fakes; promise jobs and ticks stay real: they are how the library's code
 * runs between timers. performance.now is this file's (see `virtualNow`).
 */
const CLOCKS = ['Date', 'hrtime'];
/** Where code finds timer functions besides the globals: the module objects that `import ... from 'node:timers'` reads after syncBuiltinESMExports. */
const TIMERS_MODULE = load('node:timers') as Record<string, unknown>;
const PROMISE_TIMERS = load('node:timers/promises') as Record<string, unknown>;
/** node:timers' own functions, which the virtual ones call while no clock is installed. */
const REAL_TIMERS = { ...TIMERS_MODULE } as Record<string, (...args: unknown[]) => unknown>;
/**
 * Whether node:timers and node:timers/promises hold the virtual timer functions: from the first
 * install on, for good (with no clock installed they are node's own). Telling the ESM bindings
 * (syncBuiltinESMExports) walks every builtin module loaded; done at each install and uninstall,
 * it cost more than a run's store.
 */
let modulesHoldVirtual = false;
/** The virtual epoch: 2026-01-01T00:00:00Z. */
export const EPOCH_MS = Date.UTC(2026, 0, 1);

type Callback = (...args: unknown[]) => void;

/** The clock installed now, which `virtualNow` reads. */
let installed: VirtualTime | undefined;

/**
 * performance.now while a clock is installed: one function on the real performance object for
 * every run. fake-timers would put a new performance object (in dictionary mode) with a new `now`
 * in place at each install, and the code that calls it, optimised for the last run's, would be
 * deoptimised and compiled again run after run.
 */
function virtualNow(): number {
  return installed!.now;
}

/** Math.random while a clock is installed (one function for every run, as virtualNow). */
function virtualRandom(): number {
  return installed!.draw();
}

/** setTimeout's largest delay; a longer one fires after 1 ms (as Node and fake-timers do). */
const MAX_TIMEOUT = 2 ** 31 - 1;
const NO_ARGS: unknown[] = [];

/**
 * One timer, also the handle setTimeout returns (with Node's ref/unref/hasRef/refresh). Ordered by
 * due time, then immediates first, then `order` (creation, or the last reschedule of an interval).
 */
class Timer {
  at = 0;
  order = 0;
  /** In the heap, at `index`. */
  queued = false;
  index = 0;
  /** Cleared: it never runs again, also not from a paused process's deferred list. */
  cancelled = false;
  private refed = true;

  constructor(
    /** The clock it was made on. */
    readonly time: VirtualTime,
    /** What Node's Timeout turns into as a number. */
    private readonly id: number,
    readonly proc: Proc | undefined,
    readonly cb: Callback,
    readonly args: unknown[],
    /** The delay as given (refresh() uses it again). */
    readonly delay: unknown,
    readonly immediate: boolean,
    /** The period of an interval (undefined: fires once). */
    readonly interval: number | undefined,
  ) {}

  call(): void {
    if (this.args.length === 0) this.cb();
    else this.cb(...this.args);
  }

  ref(): this {
    this.refed = true;
    return this;
  }

  unref(): this {
    this.refed = false;
    return this;
  }

  hasRef(): boolean {
    return this.refed;
  }

  refresh(): this {
    this.time.reschedule(this);
    return this;
  }

  [Symbol.toPrimitive](): number {
    return this.id;
  }
}

/** A simulated client process: its timers and deliveries stop while paused and end when crashed. */
export class Proc {
  paused = false;
  crashed = false;
  /** Timers that came due while paused, in the order they came due. */
  deferred: Timer[] = [];
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
    for (const t of due) if (!t.cancelled) this.run(() => setTimeout(() => t.call(), 0));
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
  /** What install() replaced, to put back. */
  private saved: [Record<string, unknown>, string, unknown][] = [];
  /** What Math.random draws from while installed. */
  private random: () => number = this.realRandom;
  /** @internal Math.random's draw (see virtualRandom). */
  draw(): number {
    return this.random();
  }
  /** performance's own `now` before install() (none: the prototype's). */
  private savedNow: PropertyDescriptor | undefined;
  /** Timers by due time: a binary heap (see `before`). */
  private readonly heap: Timer[] = [];
  /** Timers not yet fired or cleared (an interval until cleared). */
  private live = 0;
  private nextOrder = 1;
  /** While a timer's callback runs (not its promise jobs): a 0 ms timer made then is due 1 ms later, as fake-timers has it. */
  private inTimer = false;
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
    this.clock = fakeTimers().install({ now: EPOCH_MS, toFake: CLOCKS, loopLimit: 1e9 });
    installed = this;
    this.savedNow = Object.getOwnPropertyDescriptor(performance, 'now');
    Object.defineProperty(performance, 'now', { value: virtualNow, configurable: true, writable: true, enumerable: true });
    for (const [name, f] of Object.entries(VIRTUAL_TIMERS)) this.replace(globalThis as Record<string, unknown>, name, f);
    if (!modulesHoldVirtual) {
      Object.assign(TIMERS_MODULE, VIRTUAL_TIMERS);
      Object.assign(PROMISE_TIMERS, VIRTUAL_PROMISE_TIMERS);
      // What `import { setTimeout } from 'node:timers/promises'` sees follows the modules' objects only when told.
      syncBuiltinESMExports();
      modulesHoldVirtual = true;
    }
    this.random = random;
    Math.random = virtualRandom;
  }

  private replace(target: Record<string, unknown>, name: string, f: unknown): void {
    this.saved.push([target, name, target[name]]);
    target[name] = f;
  }

  uninstall(): void {
    if (!this.clock) return;
    for (const [target, name, f] of this.saved) target[name] = f;
    this.saved = [];
    this.clock.uninstall();
    this.clock = undefined;
    if (this.savedNow) Object.defineProperty(performance, 'now', this.savedNow);
    else delete (performance as { now?: unknown }).now;
    this.savedNow = undefined;
    installed = undefined;
    Math.random = this.realRandom;
    this.heap.length = 0;
    this.live = 0;
  }

  /** What `proc.run(() => setTimeout(fn, ms))` makes (proc undefined: a timer of no process), without the detour. */
  after(proc: Proc | undefined, ms: number, fn: () => void): void {
    this.make(proc, fn, NO_ARGS, ms, false, undefined);
  }

  /** @internal A new timer of the running process (the virtual timer functions'). */
  add(cb: Callback, args: unknown[], delay: unknown, immediate: boolean, interval: number | undefined): Timer {
    if (typeof cb !== 'function') throw new TypeError(`[ERR_INVALID_CALLBACK]: Callback must be a function. Received ${cb}`);
    return this.make(this.current, cb, args, delay, immediate, interval);
  }

  private make(
    proc: Proc | undefined,
    cb: Callback,
    args: unknown[],
    delay: unknown,
    immediate: boolean,
    interval: number | undefined,
  ): Timer {
    const t = new Timer(this, this.nextOrder, proc, cb, args, delay, immediate, interval);
    this.live++;
    this.schedule(t);
    return t;
  }

  /** Queues `t` at now + its delay. */
  private schedule(t: Timer): void {
    t.at = this.clock!.now + (dueIn(t.delay) || (this.inTimer ? 1 : 0));
    t.order = this.nextOrder++;
    this.push(t);
  }

  /** @internal Timer.refresh(): due again its delay from now. */
  reschedule(t: Timer): void {
    if (t.cancelled) return;
    if (t.queued) this.remove(t);
    else this.live++;
    this.schedule(t);
  }

  /** @internal */
  clear(t: Timer): void {
    if (t.cancelled) return;
    t.cancelled = true;
    if (t.queued) {
      this.remove(t);
      this.live--;
    }
  }

  /** Fires the first timer: as its process, or deferred while that process sleeps, or never once it crashed. */
  private fireNext(): void {
    const t = this.pop()!;
    const clock = this.clock!;
    clock.now = t.at;
    if (t.interval !== undefined) {
      t.at += t.interval;
      t.order = this.nextOrder++;
      this.push(t);
    } else this.live--;
    const proc = t.proc;
    if (proc) {
      if (proc.crashed) {
        // A crashed process's interval must not tick forever.
        if (t.interval !== undefined) this.clear(t);
        return;
      }
      if (proc.paused) {
        // An interval fires once on waking, not once per period missed.
        if (!(t.interval !== undefined && proc.deferred.includes(t))) proc.deferred.push(t);
        return;
      }
    }
    this.current = proc;
    this.inTimer = true;
    try {
      t.call();
    } finally {
      this.inTimer = false;
    }
  }

  // ---- the heap ------------------------------------------------------------------------------------

  private push(t: Timer): void {
    const h = this.heap;
    t.queued = true;
    let i = h.length;
    h.push(t);
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (!before(t, h[up]!)) break;
      h[i] = h[up]!;
      h[i]!.index = i;
      i = up;
    }
    h[i] = t;
    t.index = i;
  }

  private pop(): Timer | undefined {
    const h = this.heap;
    const top = h[0];
    if (!top) return undefined;
    this.removeAt(0);
    return top;
  }

  private remove(t: Timer): void {
    this.removeAt(t.index);
  }

  private removeAt(i: number): void {
    const h = this.heap;
    const gone = h[i]!;
    gone.queued = false;
    const last = h.pop()!;
    if (i === h.length) return;
    // Put the last one in the hole, then move it up or down.
    let j = i;
    while (j > 0) {
      const up = (j - 1) >> 1;
      if (!before(last, h[up]!)) break;
      h[j] = h[up]!;
      h[j]!.index = j;
      j = up;
    }
    if (j === i) {
      for (;;) {
        const l = 2 * j + 1;
        if (l >= h.length) break;
        const r = l + 1;
        const c = r < h.length && before(h[r]!, h[l]!) ? r : l;
        if (!before(h[c]!, last)) break;
        h[j] = h[c]!;
        h[j]!.index = j;
        j = c;
      }
    }
    h[j] = last;
    last.index = j;
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
    return this.live;
  }

  /** Why run() must stop before the next step, if it must. */
  private mustStop(stop: () => boolean, budget: Budget): StopReason | undefined {
    if (this.thrown.length > 0) return 'thrown';
    if (stop()) return 'stopped';
    if (this.live === 0) return 'idle';
    if (this.steps >= budget.steps) return 'steps';
    if (this.now > budget.ms) return 'time';
    return undefined;
  }

  /**
   * Advances time one timer at a time, letting every promise job and tick run after each, until
   * `stop()` is true or no timer is left. Returns why it stopped.
   *
   * Each step is a real setImmediate callback: Node runs the promise jobs and ticks left by one
   * before it calls the next, so steps are queued in batches, and the event loop turns once a batch
   * rather than once a step.
   */
  run(stop: () => boolean, budget: Budget): Promise<StopReason> {
    return new Promise((resolve) => {
      let ended = false;
      const step = (last: boolean): void => {
        if (ended) return;
        const why = this.mustStop(stop, budget);
        if (why) {
          ended = true;
          resolve(why);
          return;
        }
        this.steps++;
        try {
          this.fireNext();
        } catch (err) {
          this.thrown.push(err);
        }
        if (last) batch();
      };
      const batch = (): void => {
        for (let i = 1; i <= STEPS_PER_TURN; i++) this.realSetImmediate(step, i === STEPS_PER_TURN);
      };
      batch();
    });
  }
}

/** Steps queued at once (see VirtualTime.run). */
const STEPS_PER_TURN = 64;

type StopReason = 'stopped' | 'idle' | 'steps' | 'time' | 'thrown';
type Budget = { steps: number; ms: number };

type TimerFunctions = {
  setTimeout(cb: Callback, ms?: unknown, ...args: unknown[]): Timer;
  setInterval(cb: Callback, ms?: unknown, ...args: unknown[]): Timer;
  setImmediate(cb: Callback, ...args: unknown[]): Timer;
  clearTimeout(h: unknown): void;
  clearInterval(h: unknown): void;
};

/** Node's AbortError, which node:timers/promises rejects with. */
function abortError(signal: AbortSignal | undefined): Error {
  return Object.assign(new Error('The operation was aborted', { cause: signal?.reason }), { name: 'AbortError', code: 'ABORT_ERR' });
}

/** node:timers/promises' setTimeout, setImmediate and setInterval, on `t` (as Node writes them). */
function promiseTimers(t: TimerFunctions): Record<string, unknown> {
  type Options = { signal?: AbortSignal };
  const once =
    (make: (done: () => void) => Timer) =>
    <V>(value: V, options: Options = {}): Promise<V> => {
      const { signal } = options;
      if (signal?.aborted) return Promise.reject(abortError(signal));
      return new Promise<V>((resolve, reject) => {
        const onAbort = (): void => {
          t.clearTimeout(timer);
          reject(abortError(signal));
        };
        const timer = make(() => {
          signal?.removeEventListener('abort', onAbort);
          resolve(value);
        });
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    };
  return {
    setTimeout: <V>(ms?: number, value?: V, options?: Options) => once((done) => t.setTimeout(done, ms))(value, options),
    setImmediate: <V>(value?: V, options?: Options) => once((done) => t.setImmediate(done))(value, options),
    setInterval: async function* <V>(ms?: number, value?: V, options: Options = {}): AsyncGenerator<V> {
      const { signal } = options;
      if (signal?.aborted) throw abortError(signal);
      let due = 0;
      let wake: (() => void) | undefined;
      const interval = t.setInterval(() => {
        due++;
        wake?.();
        wake = undefined;
      }, ms);
      const onAbort = (): void => {
        t.clearInterval(interval);
        wake?.();
        wake = undefined;
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        while (!signal?.aborted) {
          if (due === 0) await new Promise<void>((resolve) => (wake = resolve));
          for (; due > 0 && !signal?.aborted; due--) yield value as V;
        }
        throw abortError(signal);
      } finally {
        t.clearInterval(interval);
        signal?.removeEventListener('abort', onAbort);
      }
    },
  };
}

/**
 * The timer functions put in place of the globals', node:timers' and node:timers/promises' while a
 * clock is installed: made once, for every run, so that code optimised for them stays optimised
 * from one run to the next (see virtualNow).
 */
const VIRTUAL_TIMERS: TimerFunctions & { clearImmediate(h: unknown): void } = {
  setTimeout: (cb: Callback, ms?: unknown, ...args: unknown[]): Timer =>
    installed ? installed.add(cb, args, ms, false, undefined) : (REAL_TIMERS.setTimeout!(cb, ms, ...args) as Timer),
  setInterval: (cb: Callback, ms?: unknown, ...args: unknown[]): Timer => {
    if (!installed) return REAL_TIMERS.setInterval!(cb, ms, ...args) as Timer;
    // fake-timers reads an interval's period as a whole number first: 2.5 ms is 2.
    const whole = Number.parseInt(String(ms), 10);
    return installed.add(cb, args, whole, false, period(whole));
  },
  setImmediate: (cb: Callback, ...args: unknown[]): Timer =>
    installed ? installed.add(cb, args, undefined, true, undefined) : (REAL_TIMERS.setImmediate!(cb, ...args) as Timer),
  clearTimeout: (h: unknown): void => clearVirtual(h, 'clearTimeout'),
  clearInterval: (h: unknown): void => clearVirtual(h, 'clearInterval'),
  clearImmediate: (h: unknown): void => clearVirtual(h, 'clearImmediate'),
};
Object.defineProperty(VIRTUAL_TIMERS.setTimeout, promisify.custom, {
  value: (ms?: number, value?: unknown) => new Promise((resolve) => VIRTUAL_TIMERS.setTimeout(resolve, ms, value)),
});
Object.defineProperty(VIRTUAL_TIMERS.setImmediate, promisify.custom, {
  value: (value?: unknown) => new Promise((resolve) => VIRTUAL_TIMERS.setImmediate(resolve, value)),
});
const VIRTUAL_PROMISE_TIMERS = promiseTimers(VIRTUAL_TIMERS);

/** A virtual timer is cleared on its own clock; any other handle, with no clock installed, by node. */
function clearVirtual(h: unknown, real: 'clearTimeout' | 'clearInterval' | 'clearImmediate'): void {
  if (h instanceof Timer) h.time.clear(h);
  else if (!installed) REAL_TIMERS[real]!(h);
}

/** Whether `a` fires before `b`: due time, then immediates, then order of creation. */
function before(a: Timer, b: Timer): boolean {
  if (a.at !== b.at) return a.at < b.at;
  if (a.immediate !== b.immediate) return a.immediate;
  return a.order < b.order;
}

/** A delay in whole ms as fake-timers reads it (its quirks included: a string is parsed, `1e-7` is 1). */
function dueIn(delay: unknown): number {
  if (delay === undefined) return 0;
  if (typeof delay === 'number' && delay >= 0 && delay <= MAX_TIMEOUT && Number.isInteger(delay)) return delay;
  let d = typeof delay === 'number' ? delay : Number.parseInt(String(delay), 10);
  if (!Number.isFinite(d)) d = 0;
  d = d > MAX_TIMEOUT ? 1 : Math.max(0, d);
  return Number.parseInt(String(d), 10) || 0;
}

/** An interval's period as fake-timers reads it (a negative one too). */
function period(ms: number): number {
  if (!Number.isFinite(ms)) return 1;
  return ms > MAX_TIMEOUT ? 1 : ms;
}
