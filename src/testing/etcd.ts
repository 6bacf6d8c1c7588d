// Starts real etcd servers on free loopback ports, for this library's tests and for users' tests.
// Deliberately dependency-free: health and leader checks use etcd's HTTP endpoints (/health and the
// grpc-gateway JSON API), so a broken gRPC client can never make the test harness itself misbehave.

import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { access, constants as fsConstants, mkdir, mkdtemp, open, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import * as http from 'node:http';
import * as https from 'node:https';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';

/** TLS for the client URLs (peer traffic stays plain HTTP on loopback). */
export interface EtcdTlsOptions {
  /** Server certificate; must carry an IP SAN for 127.0.0.1. */
  certFile: string;
  keyFile: string;
  /**
   * CA that signed the server and client certificates. Note that etcd 3.4 then asks every client
   * for a certificate even without `clientCertAuth`; the harness's own health checks present
   * `certFile`/`keyFile`, so that certificate must also allow client auth (EKU clientAuth).
   */
  trustedCaFile: string;
  /** Pass `--client-cert-auth`. */
  clientCertAuth?: boolean;
}

/** Options for {@link startEtcd}. */
export interface StartEtcdOptions {
  /** Cluster size. Default 1. */
  members?: 1 | 3;
  /** Parent directory for member data dirs (`<dataDir>/m0`, ...). Default: a fresh temp dir, removed on stop. */
  dataDir?: string;
  /** Appended to every member's etcd command line. */
  extraArgs?: string[];
  tls?: EtcdTlsOptions;
  /** `--heartbeat-interval`; default etcd's (100 ms). */
  heartbeatMs?: number;
  /** `--election-timeout`; default etcd's (1000 ms). */
  electionMs?: number;
  /** Budget for the cluster (and for later waitHealthy/leaderIndex calls) to become ready. Default 20000. */
  startTimeoutMs?: number;
  /** Path to the etcd binary. Default: `etcd` on PATH, then /usr/bin/etcd. */
  etcdBinary?: string;
  /** Where member logs (`m0.log`, ...) go. Default: the data dir. */
  logDir?: string;
}

/** One etcd process. Fields are live: they change as members are killed, paused and restarted. */
export interface EtcdMember {
  readonly name: string;
  readonly clientUrl: string;
  readonly peerUrl: string;
  /** `127.0.0.1:port`, no scheme. */
  readonly endpoint: string;
  pid?: number;
  running: boolean;
  /** Stopped with SIGSTOP; treated as unreachable by waitHealthy/leaderIndex. */
  paused: boolean;
}

/** A running etcd cluster started by {@link startEtcd}. */
export interface EtcdCluster extends AsyncDisposable {
  /** `127.0.0.1:port` per member, in member order. */
  readonly endpoints: string[];
  /** Client URLs with scheme, in member order. */
  readonly clientUrls: string[];
  readonly members: EtcdMember[];
  readonly dataDir: string;
  /** SIGTERM every member (SIGKILL after 5 s), wait for exit, remove an owned data dir. Idempotent. */
  stop(): Promise<void>;
  /** Signal one member and wait for its process to exit. No-op if it is not running. */
  kill(member: number, signal?: NodeJS.Signals): Promise<void>;
  /** Start a member again with its old data dir and ports (killing it first if running), and wait until healthy. */
  restart(member: number): Promise<void>;
  /** SIGSTOP: the process keeps its sockets but stops answering, like a hung or partitioned node. */
  pause(member: number): void;
  /** SIGCONT after {@link EtcdCluster.pause}. */
  resume(member: number): void;
  /**
   * Index of the Raft leader, as agreed by a quorum of running, unpaused members; the leader itself
   * must be running and unpaused. Polls until there is one or the timeout passes.
   */
  leaderIndex(timeoutMs?: number): Promise<number>;
  /** Wait until every running, unpaused member is healthy and they all agree on a leader among them. */
  waitHealthy(timeoutMs?: number): Promise<void>;
}

const execFileAsync = promisify(execFile);
const POLL_MS = 50;
// etcd accepts client connections before it is ready to answer them: never hang on one, and keep it
// short because a request stuck on a not-yet-ready member delays noticing that it became ready.
const REQUEST_TIMEOUT_MS = 500;
const STOP_GRACE_MS = 5000;
const LOG_TAIL_LINES = 50;
const START_ATTEMPTS = 3;

/**
 * Children that are still alive, across all clusters. Shared process hooks SIGKILL them so members
 * never outlive an aborted test run (and we never pile up listeners per cluster). 'exit' covers
 * normal ends and process.exit(); the signal hooks cover Ctrl-C and test-runner timeouts.
 */
const liveChildren = new Set<ChildProcess>();
/** Temp data dirs of clusters not yet stopped, removed on abrupt exit too. */
const ownedDataDirs = new Set<string>();
const FATAL_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
function killLiveChildren(): void {
  for (const child of liveChildren) child.kill('SIGKILL');
  for (const dir of ownedDataDirs) rmSync(dir, { recursive: true, force: true });
}
function onFatalSignal(signal: NodeJS.Signals): void {
  killLiveChildren();
  // Our listener suppressed the default action; if nobody else handles the signal, die as we would have.
  if (process.listenerCount(signal) === 1) {
    setHooks(false);
    process.kill(process.pid, signal);
  }
}
function setHooks(on: boolean): void {
  const method = on ? 'on' : 'off';
  process[method]('exit', killLiveChildren);
  for (const signal of FATAL_SIGNALS) process[method](signal, onFatalSignal);
}
function track(child: ChildProcess): void {
  if (liveChildren.size === 0) setHooks(true);
  liveChildren.add(child);
}
function untrack(child: ChildProcess): void {
  if (liveChildren.delete(child) && liveChildren.size === 0) setHooks(false);
}

interface MemberState {
  member: EtcdMember;
  index: number;
  dataDir: string;
  logFile: string;
  child?: ChildProcess;
  exited?: Promise<void>;
  exitInfo?: string;
  /** Raft member id (decimal string), learned from the first status answer; stable across restarts. */
  id?: string;
}

interface Probe {
  index: number;
  healthy: boolean;
  id?: string;
  leader?: string;
  error?: string;
}

/**
 * Start a 1- or 3-member etcd cluster on free loopback ports and wait until it has a leader.
 *
 * @example
 * ```ts
 * await using etcd = await startEtcd({ members: 3 });
 * // give etcd.endpoints to the client under test, then:
 * await etcd.kill(await etcd.leaderIndex());
 * await etcd.leaderIndex(); // a new leader among the survivors
 * ```
 */
export async function startEtcd(options: StartEtcdOptions = {}): Promise<EtcdCluster> {
  const size = options.members ?? 1;
  if (size !== 1 && size !== 3) throw new RangeError(`etcd: members must be 1 or 3, got ${size}`);
  const timeoutMs = options.startTimeoutMs ?? 20000;
  const binary = await resolveEtcdBinary(options.etcdBinary);
  const ownsDataDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), 'etcd-concurrency-')));
  if (ownsDataDir) ownedDataDirs.add(dataDir);
  const removeDataDir = async () => {
    if (!ownsDataDir) return;
    ownedDataDirs.delete(dataDir);
    await rm(dataDir, { recursive: true, force: true });
  };
  const logDir = options.logDir ?? dataDir;
  await mkdir(dataDir, { recursive: true });
  await mkdir(logDir, { recursive: true });
  const scheme = options.tls ? 'https' : 'http';
  const requestTls = options.tls ? await loadClientTls(options.tls) : undefined;

  let states: MemberState[] = [];
  let stopping: Promise<void> | undefined;

  const argsFor = (s: MemberState, initialCluster: string, token: string): string[] => {
    const tls = options.tls;
    return [
      '--name', s.member.name,
      '--data-dir', s.dataDir,
      '--listen-client-urls', s.member.clientUrl,
      '--advertise-client-urls', s.member.clientUrl,
      '--listen-peer-urls', s.member.peerUrl,
      '--initial-advertise-peer-urls', s.member.peerUrl,
      '--initial-cluster', initialCluster,
      '--initial-cluster-state', 'new',
      '--initial-cluster-token', token,
      // stderr (not a file path) so Go panics and flag errors land in the same per-member log.
      '--logger', 'zap',
      '--log-outputs', 'stderr',
      ...(options.heartbeatMs !== undefined ? ['--heartbeat-interval', String(options.heartbeatMs)] : []),
      ...(options.electionMs !== undefined ? ['--election-timeout', String(options.electionMs)] : []),
      ...(tls
        ? ['--cert-file', tls.certFile, '--key-file', tls.keyFile, '--trusted-ca-file', tls.trustedCaFile,
           ...(tls.clientCertAuth ? ['--client-cert-auth'] : [])]
        : []),
      ...(options.extraArgs ?? []),
    ];
  };
  // Fixed per cluster so restart() re-runs the exact same command line.
  const memberArgs = new Map<MemberState, string[]>();

  const spawnMember = async (s: MemberState): Promise<void> => {
    const log = await open(s.logFile, 'a');
    let child: ChildProcess;
    try {
      // The log file is the child's stdout/stderr: no pipes for the test process to drain or leak.
      child = spawn(binary, memberArgs.get(s)!, { stdio: ['ignore', log.fd, log.fd], env: etcdFreeEnv() });
    } catch (err) {
      await log.close();
      throw err;
    }
    // Listeners go on before any await: a failed spawn emits 'error' on the next tick.
    s.child = child;
    s.exitInfo = undefined;
    s.member.pid = child.pid;
    s.member.running = true;
    s.member.paused = false;
    track(child);
    // Unref'd so a test that forgets stop() still lets node exit (the 'exit' hook then kills the member).
    child.unref();
    s.exited = new Promise<void>((resolve) => {
      let finished = false;
      const done = (info: string) => {
        if (finished) return;
        finished = true;
        if (s.child === child) {
          s.member.running = false;
          s.member.paused = false;
          s.member.pid = undefined;
          s.exitInfo = info;
        }
        untrack(child);
        resolve();
      };
      child.once('exit', (code, signal) => done(signal ? `killed by ${signal}` : `exited with code ${code}`));
      // A failed spawn (e.g. ENOENT) emits 'error' and no 'exit'. Later 'error's (a failed kill)
      // must still have a listener, or they would crash the test process.
      child.on('error', (err) => {
        if (child.pid === undefined) done(`failed to spawn: ${err.message}`);
      });
    });
    await log.close(); // the child has its own copy of the descriptor
  };

  /** Signal a member and wait until it is gone; keeps node alive only while waiting. */
  const killState = async (s: MemberState, signal: NodeJS.Signals, graceMs?: number): Promise<void> => {
    const child = s.child;
    if (!child || !s.member.running) return;
    child.ref();
    child.kill(signal);
    // A stopped process would hold a catchable signal until continued.
    if (s.member.paused) child.kill('SIGCONT');
    if (graceMs !== undefined) {
      const ac = new AbortController();
      const forced = sleep(graceMs, undefined, { signal: ac.signal }).then(
        () => child.kill('SIGKILL'),
        () => undefined,
      );
      await s.exited;
      ac.abort();
      await forced;
    } else {
      await s.exited;
    }
  };

  /** `withHealth: false` for leader lookups: /health blocks while a member has no leader, status does not. */
  const probe = async (s: MemberState, withHealth = true): Promise<Probe> => {
    const url = s.member.clientUrl;
    try {
      const health = withHealth ? ((await requestJson(`${url}/health`, 'GET', requestTls)) as { health?: string }) : undefined;
      const status = (await requestJson(`${url}/v3/maintenance/status`, 'POST', requestTls)) as {
        header?: { member_id?: string };
        leader?: string;
      };
      s.id ??= status.header?.member_id;
      // uint64s arrive as decimal strings; proto3 JSON omits a zero (no leader).
      const leader = status.leader && status.leader !== '0' ? status.leader : undefined;
      return { index: s.index, healthy: health?.health === 'true', id: s.id, leader };
    } catch (err) {
      return { index: s.index, healthy: false, id: s.id, error: (err as Error).message.split('\n')[0] };
    }
  };

  const activeStates = () => states.filter((s) => s.member.running && !s.member.paused);
  const indexOfId = (id: string | undefined, among: MemberState[]) => among.find((s) => id && s.id === id)?.index;

  /**
   * Poll until `check` returns a value. `abortIf` lets startup fail fast when a member dies instead
   * of waiting out the timeout; on timeout the error carries the last probe of every member.
   */
  const pollUntil = async <T>(
    what: string,
    timeout: number,
    withHealth: boolean,
    check: (probes: Probe[], active: MemberState[]) => T | undefined,
    abortIf?: () => Error | undefined,
  ): Promise<T> => {
    const deadline = Date.now() + timeout;
    let last: Probe[] = [];
    for (;;) {
      const active = activeStates();
      last = await Promise.all(active.map((s) => probe(s, withHealth)));
      const abort = abortIf?.();
      if (abort) throw abort;
      const result = active.length > 0 ? check(last, active) : undefined;
      if (result !== undefined) return result;
      if (Date.now() >= deadline) break;
      await sleep(POLL_MS);
    }
    const details = last.length
      ? last.map((p) => `${states[p.index]!.member.name}: ${p.error ?? `healthy=${p.healthy} leader=${p.leader ?? 'none'}`}`).join('; ')
      : 'no running members';
    throw new Error(`etcd: timed out after ${timeout} ms waiting for ${what} (${details})`);
  };

  const waitHealthy = async (timeout = timeoutMs, abortIf?: () => Error | undefined): Promise<void> => {
    await pollUntil('a healthy cluster', timeout, true, (probes, active) => {
      const leader = probes[0]?.leader;
      const ok = probes.every((p) => p.healthy && p.leader === leader) && indexOfId(leader, active) !== undefined;
      return ok ? true : undefined;
    }, abortIf);
  };

  const leaderIndex = (timeout = timeoutMs): Promise<number> =>
    pollUntil('a leader', timeout, false, (probes, active) => {
      const quorum = Math.floor(states.length / 2) + 1;
      const votes = new Map<string, number>();
      for (const p of probes) if (p.leader) votes.set(p.leader, (votes.get(p.leader) ?? 0) + 1);
      for (const [id, n] of votes) {
        const index = indexOfId(id, active);
        if (n >= quorum && index !== undefined) return index;
      }
      return undefined;
    });

  /** Start every member and wait for health; on failure, kill them and throw with the failing member's log tail. */
  const startAll = async (): Promise<void> => {
    const ports = await freePorts(size * 2);
    const token = `etcd-concurrency-${process.pid}-${randomBytes(6).toString('hex')}`;
    states = Array.from({ length: size }, (_, index) => {
      const name = `m${index}`;
      const clientPort = ports[index * 2]!;
      const peerPort = ports[index * 2 + 1]!;
      const endpoint = `127.0.0.1:${clientPort}`;
      return {
        index,
        dataDir: join(dataDir, name),
        logFile: join(logDir, `${name}.log`),
        member: { name, endpoint, clientUrl: `${scheme}://${endpoint}`, peerUrl: `http://127.0.0.1:${peerPort}`, running: false, paused: false },
      };
    });
    const initialCluster = states.map((s) => `${s.member.name}=${s.member.peerUrl}`).join(',');
    for (const s of states) {
      // A member dir from an earlier attempt/run would carry stale peer URLs; logs restart too.
      await rm(s.dataDir, { recursive: true, force: true });
      await rm(s.logFile, { force: true });
      memberArgs.set(s, argsFor(s, initialCluster, token));
    }
    await Promise.all(states.map(spawnMember));

    // A member that exits during startup will never become healthy: stop waiting right away.
    const dead = () => states.find((s) => !s.member.running);
    try {
      await waitHealthy(timeoutMs, () => {
        const s = dead();
        return s && new Error(`member ${s.member.name} ${s.exitInfo} during startup`);
      });
      return;
    } catch (err) {
      const probes = await Promise.all(states.map((s) => probe(s)));
      const failed = dead() ?? states[probes.find((p) => !p.healthy)?.index ?? 0]!;
      await Promise.all(states.map((s) => killState(s, 'SIGKILL')));
      const tail = await logTail(failed.logFile);
      throw new Error(
        `etcd: cluster failed to start: ${(err as Error).message}\n--- ${failed.member.name} log tail (${failed.logFile}) ---\n${tail}`,
      );
    }
  };

  try {
    for (let attempt = 1; ; attempt++) {
      try {
        await startAll();
        break;
      } catch (err) {
        // Ports are probed then released, so another process can grab one in between: retry that case only.
        const portRace = /address already in use/.test((err as Error).message);
        if (!portRace || attempt >= START_ATTEMPTS) throw err;
      }
    }
  } catch (err) {
    await removeDataDir();
    throw err;
  }

  const stateAt = (i: number): MemberState => {
    const s = states[i];
    if (!s) throw new RangeError(`etcd: no member ${i} (cluster has ${states.length})`);
    return s;
  };
  const members = states.map((s) => s.member);

  const cluster: EtcdCluster = {
    endpoints: members.map((m) => m.endpoint),
    clientUrls: members.map((m) => m.clientUrl),
    members,
    dataDir,
    stop() {
      stopping ??= (async () => {
        // On SIGTERM a leader first hands leadership to a connected follower; if that follower is
        // shutting down too, etcd waits ~7 s for the transfer. With followers gone first, it skips it.
        const probes = states.length > 1 ? await Promise.all(activeStates().map((s) => probe(s, false))) : [];
        const isLeader = (s: MemberState) => probes.some((p) => p.index === s.index && p.leader !== undefined && p.leader === p.id);
        const stopAll = (list: MemberState[]) => Promise.all(list.map((s) => killState(s, 'SIGTERM', STOP_GRACE_MS)));
        await stopAll(states.filter((s) => !isLeader(s)));
        await stopAll(states.filter(isLeader));
        await removeDataDir();
      })();
      return stopping;
    },
    async kill(i, signal = 'SIGKILL') {
      if (signal === 'SIGSTOP' || signal === 'SIGCONT') throw new Error('etcd: use pause()/resume() for SIGSTOP/SIGCONT');
      await killState(stateAt(i), signal);
    },
    async restart(i) {
      if (stopping) throw new Error('etcd: cluster is stopped');
      const s = stateAt(i);
      await killState(s, 'SIGKILL');
      await spawnMember(s);
      await waitHealthy(timeoutMs, () => {
        if (s.member.running) return undefined;
        return new Error(`etcd: restarted member ${s.member.name} ${s.exitInfo} (log: ${s.logFile})`);
      });
    },
    pause(i) {
      const s = stateAt(i);
      if (!s.member.running || s.member.paused) return;
      s.child!.kill('SIGSTOP');
      s.member.paused = true;
    },
    resume(i) {
      const s = stateAt(i);
      if (!s.member.running || !s.member.paused) return;
      s.child!.kill('SIGCONT');
      s.member.paused = false;
    },
    leaderIndex: (timeout) => leaderIndex(timeout),
    waitHealthy: (timeout) => waitHealthy(timeout),
    [Symbol.asyncDispose]() {
      return cluster.stop();
    },
  };
  return cluster;
}

/** Ask the OS for `n` distinct free ports: hold all listeners open until every port is known. */
async function freePorts(n: number): Promise<number[]> {
  const servers = Array.from({ length: n }, () => createServer());
  try {
    return await Promise.all(
      servers.map(
        (server) =>
          new Promise<number>((resolve, reject) => {
            server.once('error', reject);
            server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port));
          }),
      ),
    );
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => (s.listening ? s.close(() => resolve()) : resolve()))));
  }
}

type ClientTls = Pick<https.RequestOptions, 'ca' | 'cert' | 'key'>;

async function loadClientTls(tls: EtcdTlsOptions): Promise<ClientTls> {
  const [ca, cert, key] = await Promise.all([tls.trustedCaFile, tls.certFile, tls.keyFile].map((f) => readFile(f)));
  return { ca, cert, key };
}

/**
 * One JSON request with a hard timeout. node:http with agent:false rather than fetch: it takes a
 * custom CA for https, and leaves no pooled keep-alive sockets behind after stop().
 */
function requestJson(url: string, method: 'GET' | 'POST', tls: ClientTls | undefined): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const body = method === 'POST' ? '{}' : undefined;
    const lib = url.startsWith('https:') ? https : http;
    const req = lib.request(
      url,
      {
        method,
        agent: false,
        timeout: REQUEST_TIMEOUT_MS,
        headers: body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {},
        ...tls,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          try {
            resolve(JSON.parse(text));
          } catch {
            reject(new Error(`HTTP ${res.statusCode} from ${url}: ${text.slice(0, 200)}`));
          }
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer from ${url} within ${REQUEST_TIMEOUT_MS} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

async function logTail(file: string): Promise<string> {
  try {
    const lines = (await readFile(file, 'utf8')).trimEnd().split('\n');
    return lines.slice(-LOG_TAIL_LINES).join('\n');
  } catch (err) {
    return `(no log: ${(err as Error).message})`;
  }
}

/** ETCD_* variables in the caller's environment would silently reconfigure our members. */
function etcdFreeEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCD_')));
}

async function isExecutable(path: string): Promise<boolean> {
  try {
    await access(path, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

async function findOnPath(name: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && (await isExecutable(join(dir, name)))) return join(dir, name);
  }
  return (await isExecutable(`/usr/bin/${name}`)) ? `/usr/bin/${name}` : undefined;
}

/** Find etcd; as root on Debian/Ubuntu, install it once rather than failing a fresh CI box. */
async function resolveEtcdBinary(explicit: string | undefined): Promise<string> {
  if (explicit) return explicit;
  const found = await findOnPath('etcd');
  if (found) return found;
  const howTo = 'install Debian\'s etcd-server and etcd-client (`sudo apt-get install etcd-server etcd-client`) or pass `etcdBinary`';
  const aptGet = await findOnPath('apt-get');
  if (process.getuid?.() !== 0 || !aptGet) throw new Error(`etcd: binary not found on PATH or at /usr/bin/etcd; ${howTo}`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  try {
    await execFileAsync(aptGet, ['update'], { env, maxBuffer: 64 << 20 });
    await execFileAsync(aptGet, ['install', '-y', 'etcd-server', 'etcd-client'], { env, maxBuffer: 64 << 20 });
  } catch (err) {
    const e = err as { message: string; stderr?: string };
    throw new Error(`etcd: not found, and apt-get install failed: ${e.message}\n${e.stderr ?? ''}\n${howTo}`);
  }
  const installed = await findOnPath('etcd');
  if (!installed) throw new Error(`etcd: apt-get install succeeded but no etcd binary was found; ${howTo}`);
  return installed;
}
