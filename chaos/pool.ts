// The chaos parent's workers as a group: started together, stopped together, picked by role.
import type { Role } from './common.js';
import { WorkerProc, type PoolOptions, type WorkerSpec } from './workers.js';

export class WorkerPool {
  readonly workers: WorkerProc[];

  constructor(
    specs: WorkerSpec[],
    readonly options: PoolOptions,
  ) {
    this.workers = specs.map((s) => new WorkerProc(s, this));
  }

  async start(): Promise<void> {
    for (const w of this.workers) await w.spawn();
    await Promise.all(this.workers.map((w) => w.ready));
  }

  byRole(role: Role): WorkerProc[] {
    return this.workers.filter((w) => w.spec.role === role);
  }

  /** Workers holding a lock or leading, per their last report. */
  holders(): WorkerProc[] {
    return this.workers.filter((w) => w.alive && w.holding);
  }

  /** Undo every network fault on every worker's proxies. */
  healProxies(): void {
    for (const w of this.workers) {
      for (const p of w.proxies) {
        p.blackhole(false);
        p.delay(0);
      }
    }
  }

  /** Stops every worker; returns the labels of those that did not exit on their own. */
  async stopAll(limitMs: number): Promise<string[]> {
    this.healProxies();
    const results = await Promise.all(this.workers.map(async (w) => ({ w, ok: await w.stop(limitMs) })));
    await Promise.all(this.workers.map((w) => w.closeProxies()));
    return results.filter((r) => !r.ok).map((r) => r.w.label);
  }

  async killAll(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.kill()));
    await Promise.all(this.workers.map((w) => w.closeProxies()));
  }
}
