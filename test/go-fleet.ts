// The Go side of the mixed fleet: drives interop/go (a small program on etcd's own Go package
// go.etcd.io/etcd/client/v3/concurrency), built once into a cache by interop/go-build.ts, over
// line-delimited JSON. See interop/go/main.go for the protocol.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { before } from 'node:test';
import type { EtcdCluster } from '../src/testing/index.js';
import { buildGoInterop } from '../interop/go-build.js';

export { buildGoInterop, findGo, GO_INTEROP_CACHE, GO_INTEROP_DIR } from '../interop/go-build.js';

/**
 * Builds the Go program before the tests of this file or suite (cached: once per machine), not in
 * a test's own time; returns a getter of its path.
 */
export function goInteropBinary(): () => string {
  let bin: string | undefined;
  before(async () => {
    bin = await buildGoInterop();
  });
  return () => bin!;
}

/** Starts the Go program for a test `t` and reports to it which client module the program was built with. */
export type GoStarter = (t: { diagnostic(m: string): void }, endpoints?: string[], ttl?: number, server?: EtcdCluster) => Promise<GoFleet>;

/**
 * Builds the Go program before the file's tests (see goInteropBinary) and returns a starter of it on
 * `endpoints` (default: all of the file's `etcd()`), with session TTL `ttl` (default 30 s).
 */
export function goStarter(etcd: () => EtcdCluster): GoStarter {
  const bin = goInteropBinary();
  return async (t, endpoints = etcd().endpoints, ttl = 30, server = etcd()) => {
    const go = new GoFleet(bin(), endpoints, { ttl });
    const ready = await go.ready;
    t.diagnostic(
      `etcd ${server.version} (${server.members.length} member${server.members.length > 1 ? 's' : ''}), go.etcd.io/etcd/client/v3 ${String(ready.client)}, Go session TTL ${ttl} s`,
    );
    return go;
  };
}

/** One line the Go program printed. `at` is performance.now() when the test process read it. */
export interface GoEvent {
  event: string;
  id?: string;
  at: number;
  key?: string;
  rev?: number;
  header?: number;
  value?: string | number;
  lease?: string;
  mod?: number;
  ok?: boolean;
  error?: string;
  op?: string;
  n?: number;
  client?: string;
  [k: string]: unknown;
}

const live = new Set<GoFleet>();
// If this process exits with Go children still running (process.exit, a failed hook), don't leave
// them behind. (When it dies by a signal their stdin closes: they revoke their leases and exit.)
process.on('exit', () => {
  for (const g of live) g.child.kill('SIGKILL');
});

/**
 * A running interop/go process: `send` commands to actors (each one a Go concurrency.Session), and
 * await their events in order with `next`/`expect`. Every process is killed and awaited by
 * {@link closeGoFleets} if a test did not close it.
 */
export class GoFleet {
  readonly child: ChildProcess;
  readonly events: GoEvent[] = [];
  readonly exited: Promise<number | string>;
  private stderrText = '';
  private readonly cursors = new Map<string, number>();
  private waiters: { pred: (e: GoEvent) => boolean; from: number; resolve: (e: GoEvent) => void; reject: (e: Error) => void }[] = [];
  private readonly listeners = new Set<(e: GoEvent) => void>();
  private ended = false;
  /** Resolves with the `ready` line (client module version, endpoints, TTL). */
  readonly ready: Promise<GoEvent>;

  constructor(binary: string, endpoints: string[], { ttl = 60, namespace }: { ttl?: number; namespace?: string } = {}) {
    const ns = namespace === undefined ? [] : [`--namespace=${namespace}`];
    this.child = spawn(binary, [`--endpoints=${endpoints.join(',')}`, `--ttl=${ttl}`, ...ns, 'serve'], { stdio: ['pipe', 'pipe', 'pipe'] });
    live.add(this);
    let buf = '';
    this.child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      buf += d;
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim()) this.add(line);
      }
    });
    this.child.stderr!.setEncoding('utf8').on('data', (d: string) => (this.stderrText += d));
    this.child.stdin!.on('error', () => {}); // EPIPE after the child died: reported through `exited`
    this.exited = once(this.child, 'close').then(([code, signal]) => {
      this.ended = true;
      live.delete(this);
      for (const w of this.waiters)
        w.reject(new Error(`go-interop exited (${code ?? signal}) before the awaited event; stderr: ${this.stderrText}`));
      this.waiters = [];
      return (code ?? signal) as number | string;
    });
    this.ready = this.until((e) => e.event === 'ready');
  }

  private add(line: string): void {
    let e: GoEvent;
    try {
      e = { ...(JSON.parse(line) as Omit<GoEvent, 'at'>), at: performance.now() } as GoEvent;
      if (typeof e.event !== 'string') throw new Error('no event');
    } catch {
      e = { event: 'unparsed', value: line, at: performance.now() };
    }
    this.events.push(e);
    const i = this.events.length - 1;
    for (const l of this.listeners) l(e);
    this.waiters = this.waiters.filter((w) => {
      if (i >= w.from && w.pred(e)) {
        w.resolve(e);
        return false;
      }
      return true;
    });
  }

  get stderr(): string {
    return this.stderrText;
  }

  /** Sends one command to actor `id`. */
  send(id: string, op: string, fields: { name?: string; value?: string; counter?: string; n?: number } = {}): void {
    if (this.ended) throw new Error(`go-interop has exited; stderr: ${this.stderrText}`);
    this.child.stdin!.write(`${JSON.stringify({ id, op, ...fields })}\n`);
  }

  /** Calls `fn` with every event from now on (until the returned function is called). */
  onEvent(fn: (e: GoEvent) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** The first event at index >= `from` matching `pred`, printed already or in the future. */
  until(pred: (e: GoEvent) => boolean, from = 0): Promise<GoEvent> {
    const hit = this.events.slice(from).find(pred);
    if (hit) return Promise.resolve(hit);
    if (this.ended) return Promise.reject(new Error(`go-interop has exited; stderr: ${this.stderrText}`));
    return new Promise((resolve, reject) => this.waiters.push({ pred, from, resolve, reject }));
  }

  /** The next event of actor `id` (each call consumes one, in the order they were printed). */
  async next(id: string): Promise<GoEvent> {
    const from = this.cursors.get(id) ?? 0;
    const e = await this.until((x) => x.id === id, from);
    this.cursors.set(id, this.events.indexOf(e) + 1);
    return e;
  }

  /** The next event of actor `id`, which must be `event` (an "error" event fails with its message). */
  async expect(id: string, event: string): Promise<GoEvent> {
    const e = await this.next(id);
    if (e.event !== event) {
      throw new Error(
        `go-interop actor ${id}: expected "${event}", got ${JSON.stringify(e)}${this.stderrText ? `; stderr: ${this.stderrText}` : ''}`,
      );
    }
    return e;
  }

  /**
   * Sends a command and resolves with the actor's first later event named `event`; an "error" or
   * "cancelled" event of that actor first fails the call with its message. The actor's events up to
   * that one count as consumed for next/expect. (Don't use it on an actor that also runs an observe:
   * its "observed" lines would interleave.)
   */
  async call(id: string, op: string, fields: Parameters<GoFleet['send']>[2], event: string): Promise<GoEvent> {
    const from = this.events.length;
    this.send(id, op, fields);
    const e = await this.until((x) => x.id === id && (x.event === event || x.event === 'error' || x.event === 'cancelled'), from);
    // Everything of this actor up to here is consumed, for next/expect.
    this.cursors.set(id, Math.max(this.cursors.get(id) ?? 0, this.events.indexOf(e) + 1));
    if (e.event !== event) throw new Error(`go-interop actor ${id}, ${op}: expected "${event}", got ${JSON.stringify(e)}`);
    return e;
  }

  /** Events of actor `id` not consumed by next/expect yet. */
  pending(id: string): GoEvent[] {
    return this.events.slice(this.cursors.get(id) ?? 0).filter((e) => e.id === id);
  }

  /** Creates actor `id`'s session and returns its lease id in hex (the suffix of its keys). */
  async session(id: string): Promise<string> {
    this.send(id, 'session');
    return (await this.expect(id, 'session')).lease!;
  }

  /**
   * Ends stdin: the program cancels what blocks, revokes every session's lease and exits 0. Waits for
   * that (SIGKILL after `graceMs`, a hang guard) and returns the exit code.
   */
  async close(graceMs = 20_000): Promise<number | string> {
    if (!this.ended) this.child.stdin!.end();
    const t = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(t);
    }
  }

  /** Kills the process with `signal` (nothing is revoked on SIGKILL) and waits for it to exit. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<number | string> {
    if (!this.ended) this.child.kill(signal);
    return this.exited;
  }
}

/** Kills (SIGKILL) and awaits every go-interop process still running; for `after` hooks. */
export async function closeGoFleets(): Promise<void> {
  await Promise.all([...live].map((g) => g.kill('SIGKILL')));
}
