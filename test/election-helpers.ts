// Helpers shared by the election test files (election*.test.ts). Everything here waits on events
// (watch events, promises, child output, process exit); `waitFor` (helpers.ts) polls etcd only where no
// event exists.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  Client,
  Election,
  Session,
  type ClientOptions,
  type LeaderEvent,
  type SessionOptions,
  type Watch,
  type WatchEvent,
} from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** A fresh election name per test, so no test sees another's keys. */
export function uniqueName(tag: string): string {
  return `test-election/${tag}-${randomBytes(4).toString('hex')}`;
}

// One name, one contract: the suite's waitFor, track and aborted live in helpers.ts.
export { aborted, track, waitFor, type Tracked } from './helpers.js';

/** Pulls the next value of an iterator, failing if it ended. */
export async function next<T>(it: AsyncIterator<T>): Promise<T> {
  const r = await it.next();
  assert.equal(r.done, false, 'iterator ended unexpectedly');
  return r.value as T;
}

export interface RecordedEvent {
  type: 'put' | 'delete';
  key: string;
  value: string;
  createRevision: bigint;
  modRevision: bigint;
  lease: bigint;
}

/**
 * Records every event under a prefix from the revision it was created at, so a test can wait for
 * "key X was created" and later check exactly which writes happened in between.
 */
export class Recorder {
  readonly events: RecordedEvent[] = [];
  private readonly watch: Watch;
  private waiters: Array<{ pred: (e: RecordedEvent) => boolean; resolve: (e: RecordedEvent) => void; from: number }> = [];
  private readonly loop: Promise<void>;
  /** Store revision at which the watch was confirmed. */
  readonly created: Promise<bigint>;

  constructor(client: Client, prefix: string) {
    const watch = client.watch(prefix, { prefix: true });
    this.watch = watch;
    this.created = watch.created;
    this.loop = (async () => {
      for await (const batch of watch) {
        for (const e of batch.events) this.add(e);
      }
    })().catch(() => {});
  }

  private add(e: WatchEvent): void {
    const r: RecordedEvent = {
      type: e.type,
      key: e.kv.key.toString(),
      value: e.kv.value.toString(),
      createRevision: e.kv.createRevision,
      modRevision: e.kv.modRevision,
      lease: e.kv.lease,
    };
    this.events.push(r);
    const i = this.events.length - 1;
    this.waiters = this.waiters.filter((w) => {
      if (i >= w.from && w.pred(r)) {
        w.resolve(r);
        return false;
      }
      return true;
    });
  }

  /** The first event (at index >= from) matching `pred`, recorded already or in the future. */
  until(pred: (e: RecordedEvent) => boolean, from = 0): Promise<RecordedEvent> {
    const found = this.events.slice(from).find(pred);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => this.waiters.push({ pred, resolve, from }));
  }

  /** Waits for the PUT that created `key`. */
  keyCreated(key: string): Promise<RecordedEvent> {
    return this.until((e) => e.type === 'put' && e.key === key && e.createRevision === e.modRevision);
  }

  /** Waits for the DELETE of `key`. */
  deleted(key: string, from = 0): Promise<RecordedEvent> {
    return this.until((e) => e.type === 'delete' && e.key === key, from);
  }

  /** Events strictly after revision `rev`. */
  after(rev: bigint): RecordedEvent[] {
    return this.events.filter((e) => e.modRevision > rev);
  }

  async close(): Promise<void> {
    this.watch.cancel();
    await this.loop;
  }
}

/** A child process whose stdout is read line by line. */
export class Child {
  readonly proc: ChildProcess;
  readonly lines: string[] = [];
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private waiters: Array<{ index: number; resolve: (l: string) => void; reject: (e: Error) => void }> = [];
  private buf = '';
  private ended = false;

  constructor(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}) {
    this.proc = spawn(cmd, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc.stdout!.setEncoding('utf8');
    this.proc.stderr!.setEncoding('utf8');
    this.proc.stdout!.on('data', (d: string) => {
      this.buf += d;
      let i: number;
      while ((i = this.buf.indexOf('\n')) >= 0) {
        this.lines.push(this.buf.slice(0, i));
        this.buf = this.buf.slice(i + 1);
      }
      this.wake();
    });
    this.proc.stderr!.on('data', (d: string) => (this.stderr += d));
    // 'close' comes after the exit and after stdout/stderr were read to their end.
    this.exited = new Promise((resolve) => {
      this.proc.on('close', (code, signal) => {
        this.ended = true;
        this.wake();
        resolve({ code, signal });
      });
    });
  }

  private wake(): void {
    this.waiters = this.waiters.filter((w) => {
      if (w.index < this.lines.length) {
        w.resolve(this.lines[w.index]!);
        return false;
      }
      if (this.ended) {
        w.reject(
          new Error(`child exited before printing line ${w.index + 1}; stdout: ${JSON.stringify(this.lines)}; stderr: ${this.stderr}`),
        );
        return false;
      }
      return true;
    });
  }

  /** Line number `index` (0-based) of stdout, once printed. */
  line(index: number): Promise<string> {
    return new Promise((resolve, reject) => {
      this.waiters.push({ index, resolve, reject });
      this.wake();
    });
  }

  /** The first JSON line whose `event` is `event`. */
  async json<T = Record<string, string>>(event: string): Promise<T> {
    for (let i = 0; ; i++) {
      const l = await this.line(i);
      if (!l.startsWith('{')) continue;
      const v = JSON.parse(l) as { event?: string };
      if (v.event === event) return v as T;
    }
  }

  get alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** Sends `signal` (by pid, to this child only) and waits for it to exit. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (this.alive) this.proc.kill(signal);
    return this.exited;
  }
}

/** The campaigner fixture: campaigns in a child process, prints JSON lines, waits. */
export function startCampaigner(endpoints: string[], name: string, value: string, ttl: number): Child {
  return new Child(process.execPath, ['--import', 'tsx', 'test/fixtures/campaigner.ts', endpoints.join(','), name, value, String(ttl)]);
}

/** `etcdctl` (API v3) with the given arguments. */
export function etcdctl(endpoints: string[], args: string[]): Child {
  return new Child('etcdctl', [`--endpoints=${endpoints.join(',')}`, ...args], { ETCDCTL_API: '3' });
}

/**
 * Everything a test opens, closed in reverse order at the end (also when the test failed):
 * children killed, sessions closed, clients closed, leftover leases revoked.
 */
export class Scope {
  private readonly clients: Client[] = [];
  private readonly sessions: Session[] = [];
  private readonly children: Child[] = [];
  private readonly cleanups: Array<() => unknown> = [];

  constructor(readonly endpoints: string[]) {}

  client(options: ClientOptions = {}): Client {
    const c = new Client({ endpoints: this.endpoints, ...options });
    this.clients.push(c);
    return c;
  }

  async session(client: Client, options: SessionOptions = {}): Promise<Session> {
    const s = await Session.create(client, { ttl: 10, ...options });
    this.sessions.push(s);
    return s;
  }

  child(c: Child): Child {
    this.children.push(c);
    return c;
  }

  defer(fn: () => unknown): void {
    this.cleanups.push(fn);
  }

  async close(): Promise<void> {
    for (const c of this.children) await c.kill('SIGKILL');
    for (const fn of this.cleanups.reverse()) await fn();
    for (const s of this.sessions) await s.close().catch(() => {});
    for (const c of this.clients) await c.close();
  }
}

/**
 * Asserts that nothing of election `name` is left and no lease exists, then (whatever the outcome)
 * removes leftovers so one failing test does not fail the next ones.
 */
export async function assertClean(endpoints: string[], name: string): Promise<void> {
  const admin = new Client({ endpoints });
  try {
    const keys = await admin.getPrefix(`${name}/`);
    const leases = await admin.leaseLeases();
    try {
      assert.deepEqual(
        keys.kvs.map((kv) => kv.key.toString()),
        [],
        `keys left under ${name}/`,
      );
      assert.deepEqual(
        leases.map((l) => l.toString(16)),
        [],
        'leases left',
      );
    } finally {
      for (const l of leases) await admin.leaseRevoke(l).catch(() => {});
      await admin.delete(`${name}/`, { prefix: true }).catch(() => {});
    }
  } finally {
    await admin.close();
  }
}

/**
 * Runs `fn` with a fresh election name and a Scope, closes the scope, then asserts that nothing is
 * left: no key under the name, no lease (each test file owns its etcd).
 */
export async function withScope(endpoints: string[], tag: string, fn: (s: Scope, name: string) => Promise<void>): Promise<void> {
  const name = uniqueName(tag);
  const s = new Scope(endpoints);
  let failed = true;
  try {
    await fn(s, name);
    failed = false;
  } finally {
    await s.close();
    // After a failure, still clean up (so later tests start clean) but report the first error.
    if (failed) await assertClean(endpoints, name).catch(() => {});
  }
  await assertClean(endpoints, name);
}

/** Resolves once `key` exists: a read, then a watch from just after that read (no polling). */
export async function awaitKey(client: Client, key: string): Promise<void> {
  const r = await client.range({ key: Buffer.from(key) });
  if (r.kvs.length > 0) return;
  const w = client.watch(key, { startRevision: r.header.revision + 1n, noDelete: true });
  try {
    for await (const batch of w) if (batch.events.length > 0) return;
  } finally {
    w.cancel();
  }
}

/** Current store revision. */
export async function storeRevision(client: Client): Promise<bigint> {
  const r = await client.range({ key: Buffer.from('\0') });
  return r.header.revision;
}

export function ms(n: number): string {
  return `${n.toFixed(1)} ms`;
}

/** A candidate: its own client, session and Election. */
export async function candidate(s: Scope, name: string, ttl = 10): Promise<{ client: Client; session: Session; election: Election }> {
  const client = s.client();
  const session = await s.session(client, { ttl });
  return { client, session, election: new Election(session, name) };
}

/** An observed event as `<key>=<value>`, or `none`. */
export const leaderOf = (e: LeaderEvent): string => (e.type === 'leader' ? `${e.leader.key}=${e.leader.value}` : 'none');

/** A test file's own single-member etcd and `scoped` over it (see electionFixture). */
export interface ElectionFixture {
  /** The file's etcd, once `before` has started it. */
  readonly etcd: EtcdCluster;
  /** withScope on the file's etcd. */
  scoped(tag: string, fn: (s: Scope, name: string) => Promise<void>): Promise<void>;
}

/** Starts a single-member etcd before the file's tests and stops it after them. */
export function electionFixture(): ElectionFixture {
  let etcd: EtcdCluster | undefined;
  before(async () => {
    etcd = await startEtcd();
  });
  after(async () => {
    await etcd?.stop();
  });
  const started = (): EtcdCluster => etcd ?? assert.fail('the election fixture has no etcd yet: use it inside a test');
  return {
    get etcd() {
      return started();
    },
    scoped: (tag, fn) => withScope(started().endpoints, tag, fn),
  };
}

/** An admin client and a Recorder of everything under election `name` (closed with the scope), once its watch is confirmed. */
export async function recorded(s: Scope, name: string): Promise<{ admin: Client; rec: Recorder }> {
  const admin = s.client();
  const rec = new Recorder(admin, `${name}/`);
  s.defer(() => rec.close());
  await rec.created;
  return { admin, rec };
}
