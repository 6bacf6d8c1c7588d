// Small helpers shared by the test files. Nothing here mocks etcd: every helper reads real state.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import path from 'node:path';
import { createServer } from 'node:net';
import { constants, tmpdir } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Client, Session } from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';

/** A key prefix no other test uses: `test/<scope>/<random>/`. Names passed to locks live under it. */
export function uniquePrefix(scope: string): string {
  return `test/${scope.replace(/[^A-Za-z0-9_.-]+/g, '-')}/${randomBytes(4).toString('hex')}/`;
}

/**
 * Polls `predicate` until it returns a truthy value, which is returned. For etcd state that no event
 * announces. The `limitMs` is a hang guard that fails the test with `what`, not a timing assertion.
 * A predicate that throws fails the wait at once. The one `waitFor` of the test suite
 * (election-helpers.ts re-exports it).
 */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  what: string,
  { intervalMs = 20, limitMs = 30_000 }: { intervalMs?: number; limitMs?: number } = {},
): Promise<NonNullable<T>> {
  const start = performance.now();
  for (;;) {
    const v = await predicate();
    if (v) return v as NonNullable<T>;
    if (performance.now() - start > limitMs) throw new Error(`waitFor: gave up waiting for ${what}`);
    await delay(intervalMs);
  }
}

/**
 * One single-member etcd for a test file and a client on it, handed to `ready` before the tests run.
 * After them: `beforeChecks` (for example killing child processes), then the checks every file
 * makes (no key left under `root`, no lease left), then everything is stopped. Returns `fresh`,
 * which gives each test its own prefix under `root`.
 */
export function etcdForFile(
  root: string,
  ready: (etcd: EtcdCluster, client: Client) => void,
  options: { beforeChecks?: () => Promise<void> } = {},
): (scope: string) => string {
  let etcd: EtcdCluster | undefined;
  let client: Client | undefined;
  before(async () => {
    etcd = await startEtcd();
    client = new Client({ endpoints: etcd.endpoints });
    ready(etcd, client);
  });
  after(async () => {
    try {
      await options.beforeChecks?.();
    } finally {
      await assertCleanAndStop(client, etcd, root);
    }
  });
  return (scope) => `${root}${uniquePrefix(scope).slice('test/'.length)}`;
}

/**
 * The end of a file's etcd: no key left under `roots` and no lease (as `client` sees them), then
 * the client closed and etcd stopped, also when a check fails.
 */
export async function assertCleanAndStop(client: Client | undefined, etcd: EtcdCluster | undefined, roots: string | readonly string[]): Promise<void> {
  try {
    for (const root of typeof roots === 'string' ? [roots] : roots) await assertNoKeys(client!, root);
    await assertNoLeases(client!);
  } finally {
    await client?.close();
    await etcd?.stop();
  }
}

/** A loopback TCP port that nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Asserts that nothing is stored under `prefix`. */
export async function assertNoKeys(client: Client, prefix: string): Promise<void> {
  const r = await client.getPrefix(prefix);
  assert.deepEqual(
    r.kvs.map((kv) => kv.key.toString()),
    [],
    `keys left under ${prefix}`,
  );
}

/** Asserts that etcd holds no lease at all (each test file owns its etcd). */
export async function assertNoLeases(client: Client): Promise<void> {
  const leases = await client.leaseLeases();
  assert.deepEqual(
    leases.map((l) => l.toString(16)),
    [],
    'leases left behind',
  );
}

/**
 * Resolves with the signal's reason once it aborts. Keeps the process alive meanwhile: the library
 * deliberately unrefs its deadline timers (an orphaned session must not hold a process open), so
 * a test awaiting only such a timer would otherwise end with "Promise resolution is still pending".
 */
export function aborted(signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.resolve(signal.reason);
  const keepAlive = setInterval(() => {}, 1 << 30);
  return new Promise((resolve) =>
    signal.addEventListener(
      'abort',
      () => {
        clearInterval(keepAlive);
        resolve(signal.reason);
      },
      { once: true },
    ),
  );
}

/** A promise's state, readable synchronously (see track). */
export interface Tracked<T> {
  promise: Promise<T>;
  settled: boolean;
  value?: T;
  error?: unknown;
  /** performance.now() when it settled. */
  at?: number;
}

/**
 * Tracks whether a promise has settled, without changing it: `settled`, `value`, `error` and `at`
 * are plain properties, updated when it settles. The one `track` of the test suite
 * (election-helpers.ts re-exports it).
 */
export function track<T>(p: Promise<T>): Tracked<T> {
  const t: Tracked<T> = { promise: p, settled: false };
  p.then(
    (v) => Object.assign(t, { settled: true, value: v, at: performance.now() }),
    (e: unknown) => Object.assign(t, { settled: true, error: e, at: performance.now() }),
  );
  return t;
}

/** Lets every already-queued microtask and I/O callback run (used before asserting "still pending"). */
export async function settle(): Promise<void> {
  await new Promise((r) => setImmediate(r));
}

/** The built `etcd-concurrency` CLI: `npm run build` first. */
export const CLI_MAIN = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url));

/**
 * Starts the built CLI with `args`, stdout and stderr piped (stdin too with `stdin: true`). The
 * caller's ETCDCTL_* variables are left out, so that they never leak into a test: each test says
 * what it means, in `args` or in `env`.
 */
export function spawnCli(args: string[], options: { env?: NodeJS.ProcessEnv; stdin?: boolean } = {}): ChildProcess {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCDCTL_')));
  return spawn(process.execPath, [CLI_MAIN, ...args], {
    env: { ...env, ...options.env },
    stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
}

/** A CLI child started by {@link runCli}: its output is collected and can be awaited line by line, in order. */
export interface CliProc {
  readonly child: ChildProcess;
  /** Everything printed on stdout so far. */
  stdout(): string;
  /** Everything printed on stderr so far. */
  stderr(): string;
  /** stdout and stderr together, in the order their chunks arrived. */
  output(): string;
  /**
   * The next line of `stream` (after those already taken from it by `next` or `match`) that matches
   * `re`; rejects if the child ends first. Calls on one stream are served in the order they are made.
   */
  next(re: RegExp, stream?: 'stdout' | 'stderr'): Promise<string>;
  /** The same as `next`, resolving with the match instead of the line. */
  match(re: RegExp, stream?: 'stdout' | 'stderr'): Promise<RegExpExecArray>;
  /** Exit code, or 128 + n for a death by signal n (as a shell reports it). */
  readonly exited: Promise<number>;
  /** Sends `sig`, without waiting. */
  signal(sig: NodeJS.Signals): void;
  /** Sends `sig` (SIGTERM) if the child still runs; resolves with `exited`. */
  kill(sig?: NodeJS.Signals): Promise<number>;
}

/** The children of runCli that have not ended yet (for killClis). */
const clis = new Set<CliProc>();

/**
 * Starts the built CLI with `args` (through spawnCli, so `env` and `stdin` mean the same) and
 * collects its output. The child has ended (`exited` resolves, `next` stops waiting) on its 'close'
 * event, once its pipes are closed too; `exitEvent: 'exit'` ends it when the process exits, for a
 * child that may leave a process behind holding its pipes (a command under `lock -- cmd` whose lock
 * process was SIGKILLed). Every child is registered until it ends, so that killClis can end leftovers.
 */
export function runCli(
  args: string[],
  options: { env?: NodeJS.ProcessEnv; stdin?: boolean; exitEvent?: 'close' | 'exit' } = {},
): CliProc {
  const child = spawnCli(args, options);
  const text = { stdout: '', stderr: '' };
  let all = '';
  const taken = { stdout: 0, stderr: 0 }; // complete lines already returned by next() or match()
  let ended = false;
  type Waiter = { re: RegExp; resolve: (m: RegExpExecArray) => void; reject: (e: Error) => void };
  const waiters: Record<'stdout' | 'stderr', Waiter[]> = { stdout: [], stderr: [] };
  const check = (stream: 'stdout' | 'stderr'): void => {
    const lines = text[stream].split('\n');
    if (!ended) lines.pop(); // only complete lines, unless the child has ended
    const queue = waiters[stream];
    while (queue.length > 0) {
      const w = queue[0]!;
      let hit: RegExpExecArray | null = null;
      let i = taken[stream];
      for (; i < lines.length && !hit; i++) hit = w.re.exec(lines[i]!);
      if (hit) {
        taken[stream] = i;
        w.resolve(hit);
      } else if (ended) {
        w.reject(new Error(`exited before printing ${w.re} on ${stream}; stdout: ${text.stdout}; stderr: ${text.stderr}`));
      } else return;
      queue.shift();
    }
  };
  for (const stream of ['stdout', 'stderr'] as const) {
    child[stream]!.setEncoding('utf8').on('data', (d: string) => {
      text[stream] += d;
      all += d;
      check(stream);
    });
  }
  const exited = once(child, options.exitEvent ?? 'close').then((a) => {
    const [code, sig] = a as [number | null, NodeJS.Signals | null];
    ended = true;
    check('stdout');
    check('stderr');
    clis.delete(p);
    return code ?? 128 + constants.signals[sig!];
  });
  const match = (re: RegExp, stream: 'stdout' | 'stderr' = 'stdout'): Promise<RegExpExecArray> =>
    new Promise((resolve, reject) => {
      waiters[stream].push({ re, resolve, reject });
      check(stream);
    });
  const p: CliProc = {
    child,
    stdout: () => text.stdout,
    stderr: () => text.stderr,
    output: () => all,
    next: async (re, stream) => (await match(re, stream)).input,
    match,
    exited,
    signal: (sig) => child.kill(sig),
    kill(sig = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(sig);
      return exited;
    },
  };
  clis.add(p);
  return p;
}

/** Runs the CLI to its end: its exit code (as {@link CliProc.exited}), stdout and stderr. */
export async function runCliToEnd(args: string[], env?: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = runCli(args, { env });
  const code = await p.exited;
  return { code, stdout: p.stdout(), stderr: p.stderr() };
}

/**
 * Ends every child of runCli still running (for `after`): `signal` (SIGKILL) to each, and with
 * `killAfterMs`, SIGKILL to those still running that long after. Resolves once all have ended.
 */
export async function killClis(signal: NodeJS.Signals = 'SIGKILL', killAfterMs?: number): Promise<void> {
  const guard = killAfterMs === undefined ? undefined : setTimeout(() => [...clis].forEach((p) => p.child.kill('SIGKILL')), killAfterMs);
  try {
    await Promise.all([...clis].map((p) => p.kill(signal)));
  } finally {
    clearTimeout(guard);
  }
}

/** The CLI's stderr is exactly one `etcd-concurrency: ...` line (no stack trace), and that line matches `re`. */
export function assertOneErrorLine(stderr: string, re: RegExp): void {
  const lines = stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, `expected one line on stderr, got: ${stderr}`);
  assert.match(lines[0]!, /^etcd-concurrency: /);
  assert.match(lines[0]!, re);
}

/**
 * etcdForFile for a file that runs the built CLI: first checks that it is built; after the tests,
 * `beforeChecks`, then every child of runCli and every etcdctl still running is killed (SIGKILL),
 * then the checks of etcdForFile.
 */
export function etcdForCliFile(
  root: string,
  ready: (etcd: EtcdCluster, client: Client) => void,
  options: { beforeChecks?: () => Promise<void> } = {},
): (scope: string) => string {
  before(() => assert.ok(existsSync(CLI_MAIN), `${CLI_MAIN} is missing: run \`npm run build\` first`));
  return etcdForFile(root, ready, {
    beforeChecks: async () => {
      await options.beforeChecks?.();
      await killClis();
      await killEtcdctls();
    },
  });
}

const installed = new Map<string, boolean>();

/** Whether `etcdctl` (v3 API) runs here (asked once), for a test's `skip`. */
export function hasEtcdctl(): boolean {
  if (!installed.has('etcdctl')) installed.set('etcdctl', spawnSync('etcdctl', ['version'], { env: { ...process.env, ETCDCTL_API: '3' } }).status === 0);
  return installed.get('etcdctl')!;
}

/** Whether `openssl` runs here (asked once), for a test's `skip`. */
export function hasOpenssl(): boolean {
  if (!installed.has('openssl')) installed.set('openssl', spawnSync('openssl', ['version']).status === 0);
  return installed.get('openssl')!;
}

/** Throwaway certificates in a temporary directory (see testCerts). */
export interface TestCerts {
  dir: string;
  /** A file's path in `dir`. */
  file(name: string): string;
  /** Runs openssl in `dir`; fails the test on a non-zero exit. */
  openssl(args: string[]): void;
  /** The `tls` option of startEtcd: `node.pem` as server certificate, client certificates required. */
  etcdTls: { certFile: string; keyFile: string; trustedCaFile: string; clientCertAuth: true };
}

/**
 * A throwaway CA (`ca.pem`) and one certificate for 127.0.0.1 that it signed (`node.pem`,
 * `node.key`), good as both server and client certificate, in a new temporary directory; plus one
 * more CA per name in `otherCas` (`<name>.pem`, `<name>.key`) that signed nothing. Needs openssl.
 */
export async function testCerts(scope: string, otherCas: string[] = []): Promise<TestCerts> {
  const dir = await mkdtemp(path.join(tmpdir(), `${scope}-`));
  const file = (f: string): string => path.join(dir, f);
  const openssl = (args: string[]): void => {
    const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
  };
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  openssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', `/CN=${scope}-ca`]);
  for (const other of otherCas) openssl(['req', '-x509', ...ec, '-keyout', `${other}.key`, '-out', `${other}.pem`, '-days', '1', '-subj', `/CN=${scope}-${other}-ca`]);
  openssl(['req', ...ec, '-keyout', 'node.key', '-out', 'node.csr', '-subj', '/CN=127.0.0.1',
    '-addext', 'subjectAltName=IP:127.0.0.1', '-addext', 'extendedKeyUsage=serverAuth,clientAuth']);
  openssl(['x509', '-req', '-in', 'node.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'node.pem', '-days', '1', '-copy_extensions', 'copy']);
  return { dir, file, openssl, etcdTls: { certFile: file('node.pem'), keyFile: file('node.key'), trustedCaFile: file('ca.pem'), clientCertAuth: true } };
}

/** An `etcdctl` child (v3 API) whose output is collected and can be awaited line by line. */
export interface Etcdctl {
  readonly child: ChildProcess;
  /** Everything printed on stdout so far. */
  stdout(): string;
  stderr(): string;
  /** Resolves with the first stdout line matching `re` (immediately if already printed). */
  line(re: RegExp): Promise<string>;
  /** Resolves with the exit code (or the signal name). */
  readonly exited: Promise<number | string>;
  /** Kills the child (SIGTERM) if still running and waits for it to exit. */
  kill(): Promise<void>;
}

const children = new Set<Etcdctl>();

export function spawnEtcdctl(endpoint: string, args: string[]): Etcdctl {
  const child = spawn('etcdctl', [`--endpoints=${endpoint}`, ...args], {
    env: { ...process.env, ETCDCTL_API: '3' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const waiters: { re: RegExp; resolve: (l: string) => void }[] = [];
  const check = (final = false): void => {
    const lines = out.split('\n');
    if (!final) lines.pop(); // only complete lines, unless the child has exited
    for (const w of [...waiters]) {
      const hit = lines.find((l) => w.re.test(l));
      if (hit !== undefined) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(hit);
      }
    }
  };
  child.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    check();
  });
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = once(child, 'close').then(([code, signal]) => (code ?? signal) as number | string);
  const ctl: Etcdctl = {
    child,
    stdout: () => out,
    stderr: () => err,
    line(re) {
      return new Promise((resolve, reject) => {
        waiters.push({ re, resolve });
        check();
        void exited.then(() => {
          check(true);
          const i = waiters.findIndex((w) => w.re === re);
          if (i >= 0) {
            waiters.splice(i, 1);
            reject(new Error(`etcdctl exited before printing ${re}; stdout: ${out}; stderr: ${err}`));
          }
        });
      });
    },
    exited,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      children.delete(ctl);
    },
  };
  children.add(ctl);
  void exited.then(() => children.delete(ctl));
  return ctl;
}

/** Kills every etcdctl child still running (for `after`). */
export async function killEtcdctls(): Promise<void> {
  await Promise.all([...children].map((c) => c.kill()));
}

/**
 * The value of one of etcd's Prometheus counters (`<clientUrl>/metrics`), summed over the lines whose
 * labels contain every `labels` pair; 0 when etcd has not exported it yet.
 */
export async function metric(clientUrl: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${clientUrl}/metrics`)).text();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!(line.startsWith(`${name}{`) || line.startsWith(`${name} `))) continue;
    if (!want.every((w) => line.includes(w))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** How many calls (or streams) of a gRPC method etcd has started: `grpc_server_started_total`. */
export function grpcStarted(clientUrl: string, method: string): Promise<number> {
  return metric(clientUrl, 'grpc_server_started_total', { grpc_method: method, grpc_type: method === 'Watch' || method === 'LeaseKeepAlive' ? 'bidi_stream' : 'unary' });
}

/** How many messages etcd has received on a gRPC method's streams (e.g. keepalive renewals). */
export function grpcReceived(clientUrl: string, method: string): Promise<number> {
  return metric(clientUrl, 'grpc_server_msg_received_total', { grpc_method: method });
}

/** One event as the log records it. */
export interface LoggedEvent {
  type: 'put' | 'delete';
  key: string;
  /** ModRevision of the event (for a put: its CreateRevision when version is 1). */
  rev: bigint;
  createRevision: bigint;
  lease: bigint;
}

/**
 * Records every event under a prefix, from the revision after `created`, and lets a test await the
 * first event matching a predicate: the event-driven way to know "that key now exists".
 */
export class EventLog {
  readonly events: LoggedEvent[] = [];
  private readonly ac = new AbortController();
  private waiters: { pred: (e: LoggedEvent) => boolean; from: number; resolve: (e: LoggedEvent) => void }[] = [];
  readonly ready: Promise<bigint>;
  private readonly loop: Promise<void>;

  constructor(client: Client, prefix: string) {
    const w = client.watch(prefix, { prefix: true, signal: this.ac.signal });
    this.ready = w.created;
    this.loop = (async () => {
      for await (const batch of w) {
        for (const e of batch.events) {
          const ev: LoggedEvent = {
            type: e.type,
            key: e.kv.key.toString(),
            rev: e.kv.modRevision,
            createRevision: e.kv.createRevision,
            lease: e.kv.lease,
          };
          this.events.push(ev);
          for (const wt of [...this.waiters]) {
            if (this.events.length - 1 >= wt.from && wt.pred(ev)) {
              this.waiters.splice(this.waiters.indexOf(wt), 1);
              wt.resolve(ev);
            }
          }
        }
      }
    })();
    this.loop.catch(() => {});
  }

  /** Resolves with the first event at index >= `from` that matches. */
  next(pred: (e: LoggedEvent) => boolean, from = 0): Promise<LoggedEvent> {
    const hit = this.events.slice(from).find(pred);
    if (hit) return Promise.resolve(hit);
    return new Promise((resolve) => this.waiters.push({ pred, from, resolve }));
  }

  put(key: string, from = 0): Promise<LoggedEvent> {
    return this.next((e) => e.type === 'put' && e.key === key, from);
  }

  deleted(key: string, from = 0): Promise<LoggedEvent> {
    return this.next((e) => e.type === 'delete' && e.key === key, from);
  }

  async close(): Promise<void> {
    this.ac.abort();
    await this.loop.catch(() => {});
  }
}

/**
 * One scrape of etcd's metrics: watchers open (`etcd_debugging_mvcc_watcher_total`), unary calls
 * started and not yet answered, and Txns answered.
 */
export async function serverState(clientUrl: string): Promise<{ watchers: number; inFlight: number; txns: number }> {
  const text = await (await fetch(`${clientUrl}/metrics`)).text();
  let watchers = 0;
  let inFlight = 0;
  let txns = 0;
  for (const line of text.split('\n')) {
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (line.startsWith('etcd_debugging_mvcc_watcher_total')) watchers += v;
    else if (!line.includes('grpc_type="unary"')) continue;
    else if (line.startsWith('grpc_server_started_total{')) inFlight += v;
    else if (line.startsWith('grpc_server_handled_total{')) {
      inFlight -= v;
      if (line.includes('grpc_method="Txn"')) txns += v;
    }
  }
  return { watchers, inFlight, txns };
}

/**
 * Resolves once etcd has at least `n` more watchers open than `base` and no unary call in flight:
 * `n` waiters blocked on their watch, with whatever they sent before (enqueue, look-up, check)
 * answered. How many calls a waiter makes first is the library's business (a short queue's look-up
 * rides on the enqueue, a watch kept from the last wait needs no check), so tests wait on this.
 */
export async function waitersBlocked(clientUrl: string, base: number, n: number, what = `${n} waiter(s) blocked on a watch`): Promise<void> {
  // Twice in a row: one scrape could fall between a watch being confirmed and the check it leads to.
  let quiet = 0;
  await waitFor(async () => {
    const s = await serverState(clientUrl);
    quiet = s.watchers >= base + n && s.inFlight === 0 ? quiet + 1 : 0;
    return quiet >= 2;
  }, what);
}

/** How many calls of a unary gRPC method etcd has answered: `grpc_server_handled_total`. */
export function grpcHandled(clientUrl: string, method: string): Promise<number> {
  return metric(clientUrl, 'grpc_server_handled_total', { grpc_method: method, grpc_type: 'unary' });
}

/** `n` sessions on `client`, each with its own lease; a test closes them with {@link closeAll}. */
export function openSessions(client: Client, n: number, ttl = 30): Promise<Session[]> {
  return Promise.all(Array.from({ length: n }, () => Session.create(client, { ttl })));
}

/** Closes every session (closing revokes its lease: nothing is left); missing ones are skipped. */
export function closeAll(ss: readonly (Session | undefined)[]): Promise<unknown> {
  return Promise.all(ss.map((s) => s?.close()));
}

/** The keys under `prefix`, in key order. */
export async function keysUnder(client: Client, prefix: string): Promise<string[]> {
  return (await client.getPrefix(prefix)).kvs.map((kv) => kv.key.toString());
}

/**
 * Runs `body` with `n` new sessions on `client` (TTL 30 s unless given), closes them whatever
 * happens, then checks that nothing is left under `prefix`.
 */
export async function withSessions<T>(
  client: Client,
  prefix: string,
  sessions: number | { n: number; ttl: number },
  body: (sessions: Session[]) => Promise<T>,
): Promise<T> {
  const { n, ttl } = typeof sessions === 'number' ? { n: sessions, ttl: 30 } : sessions;
  const ss = await openSessions(client, n, ttl);
  let result: T;
  try {
    result = await body(ss);
  } finally {
    await closeAll(ss);
  }
  await assertNoKeys(client, prefix);
  return result;
}

/** Settles every tracked call (those still waiting are expected to fail once their session closes). */
export function settleAll(ts: readonly Tracked<unknown>[]): Promise<unknown> {
  return Promise.allSettled(ts.map((t) => t.promise));
}

/**
 * Waits for a tracked call to settle. The limit is a hang guard (a failure, then the test's own
 * clean-up runs) set below a waiter's periodic re-check (every max(10 s, TTL); tests that rely on
 * it give the waiter a long TTL): only the event under test can end the wait in time.
 */
export async function settledOrHang<T>(t: Tracked<T>, what: string, limitMs = 10_000): Promise<T> {
  await waitFor(() => t.settled, what, { limitMs });
  return t.promise;
}
