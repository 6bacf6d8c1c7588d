// The parent's side of the worker processes: spawning, the JSON-lines pipes, signals, and waiting
// for conditions on the events they send.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { encode, type Command, type WorkerEvent } from './protocol.js';

const WORKER_SCRIPT = fileURLToPath(new URL('./worker.ts', import.meta.url));
/** The tsx loader by absolute URL, so workers start whatever the current directory is. */
const TSX = import.meta.resolve('tsx');

export interface Received {
  event: WorkerEvent;
  /** Parent's clock (ms since the demo started) when the line arrived. */
  at: number;
}

/** One worker child process. */
export class WorkerProc {
  readonly child: ChildProcess;
  readonly received: Received[] = [];
  /** The child's stderr, for the error report if it misbehaves. */
  stderr = '';
  /** Set once the child has exited: `code 0`, `SIGKILL`, ... */
  exitedWith?: string;
  readonly exited: Promise<void>;
  /** True after we sent `exit` or a fatal signal ourselves: its exit is expected. */
  expectExit = false;
  paused = false;

  constructor(
    readonly name: string,
    now: () => number,
    onEvent: (proc: WorkerProc, event: WorkerEvent) => void,
    onExit: (proc: WorkerProc) => void,
  ) {
    this.child = spawn(process.execPath, ['--import', TSX, WORKER_SCRIPT], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, NODE_NO_WARNINGS: '1' },
    });
    this.child.stdin!.on('error', () => {}); // writing to a worker that just died
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      let event: WorkerEvent;
      try {
        event = JSON.parse(line) as WorkerEvent;
      } catch {
        this.stderr += `${line}\n`;
        return;
      }
      this.received.push({ event, at: now() });
      onEvent(this, event);
    });
    this.child.stderr!.setEncoding('utf8').on('data', (d: string) => (this.stderr += d));
    this.exited = once(this.child, 'exit').then(([code, signal]) => {
      this.exitedWith = signal ? String(signal) : `code ${code}`;
      onExit(this);
    });
  }

  get pid(): number {
    return this.child.pid ?? 0;
  }

  get alive(): boolean {
    return this.exitedWith === undefined;
  }

  send(command: Command): void {
    if (this.alive && this.child.stdin!.writable) this.child.stdin!.write(encode(command));
  }

  /** Index of the next event to arrive: pass it to `since` filters. */
  mark(): number {
    return this.received.length;
  }

  /** Events of type `ev` received at or after `since`. */
  events<E extends WorkerEvent['ev']>(ev: E, since = 0): (Extract<WorkerEvent, { ev: E }> & { at: number })[] {
    return this.received
      .slice(since)
      .filter((r) => r.event.ev === ev)
      .map((r) => ({ ...(r.event as Extract<WorkerEvent, { ev: E }>), at: r.at }));
  }

  last<E extends WorkerEvent['ev']>(ev: E, since = 0): (Extract<WorkerEvent, { ev: E }> & { at: number }) | undefined {
    const all = this.events(ev, since);
    return all[all.length - 1];
  }

  /** SIGKILL or SIGTERM: the process is gone without any cleanup of its own. */
  signal(signal: 'SIGKILL' | 'SIGTERM'): void {
    if (!this.alive) return;
    this.expectExit = true;
    this.child.kill(signal);
    if (this.paused) this.child.kill('SIGCONT');
  }

  /** SIGSTOP: frozen in place, sockets open, timers not running: a stop-the-world pause. */
  pause(): void {
    if (!this.alive || this.paused) return;
    this.child.kill('SIGSTOP');
    this.paused = true;
  }

  resume(): void {
    if (!this.alive || !this.paused) return;
    this.child.kill('SIGCONT');
    this.paused = false;
  }

  /** Asks the worker to close its sessions and exit; kills it if it has not within `graceMs`. */
  async shutdown(graceMs: number): Promise<void> {
    if (!this.alive) return;
    this.expectExit = true;
    this.resume();
    this.send({ cmd: 'exit' });
    const timer = setTimeout(() => this.signal('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}

/**
 * Waiting for the state the events build up: `until(what, check)` resolves once `check()` holds,
 * re-checked after every event (`notify()`), and rejects after a hang guard or on a fatal error.
 */
export class Conditions {
  private readonly waiters = new Set<{ check: () => boolean; resolve: () => void; reject: (e: Error) => void }>();
  private fatal?: Error;

  until(what: string, check: () => boolean, limitMs = 30_000): Promise<void> {
    const p = this.wait(what, check, limitMs);
    // A wait that an earlier failure left unawaited must not crash the process as an unhandled rejection.
    p.catch(() => {});
    return p;
  }

  private wait(what: string, check: () => boolean, limitMs: number): Promise<void> {
    if (this.fatal) return Promise.reject(this.fatal);
    if (check()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`gave up after ${limitMs} ms waiting for ${what}`));
      }, limitMs);
      const waiter = {
        check,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (e: Error) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.waiters.add(waiter);
    });
  }

  notify(): void {
    for (const w of [...this.waiters]) {
      let ok = false;
      try {
        ok = w.check();
      } catch (err) {
        this.waiters.delete(w);
        w.reject(err as Error);
        continue;
      }
      if (ok) {
        this.waiters.delete(w);
        w.resolve();
      }
    }
  }

  /** Something went wrong that no waiting will fix: fail every wait, now and later. */
  fail(err: Error): void {
    this.fatal ??= err;
    for (const w of [...this.waiters]) {
      this.waiters.delete(w);
      w.reject(this.fatal);
    }
  }

  get failed(): Error | undefined {
    return this.fatal;
  }
}
