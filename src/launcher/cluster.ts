// A 1- or 3-member etcd cluster on loopback: start it, wait for health and a leader, and control
// its members (kill, restart, pause) for tests and for `etcd-concurrency dev`.

import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { resolveEtcd } from './binary.js';
import { checkExtraArgs, memberArgs } from './flags.js';
import { loadClientTls, type ClientTls } from './http.js';
import { disownDataDir, MemberProcess, ownDataDir, type EtcdMember, type Probe } from './member.js';
import { fixedPorts, freePorts } from './ports.js';

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
  /**
   * etcd version to run: `3.7` (the newest cached 3.7.x) or `3.7.3`. Default: the `ETCD_VERSION`
   * environment variable, else the newest version in the cache (`npm run etcd -- install`), else
   * `etcd` on PATH. Throws {@link EtcdNotFoundError} saying what to install when it is missing.
   */
  version?: string;
  /** Path to the etcd binary; overrides the cache and PATH (and `ETCD_VERSION`). */
  etcdBinary?: string;
  /**
   * Fixed ports instead of free ones chosen by the OS: member i listens for clients on
   * `basePort + 2i` and for peers on `basePort + 2i + 1` (so 2 or 6 ports). Fails with
   * {@link EtcdPortError} if one is taken.
   */
  basePort?: number;
  /**
   * Parent directory for member data dirs (`<dataDir>/m0`, ...), which are wiped at start (etcd 3.6
   * refuses a data dir written by a newer version). Default: a fresh temp dir, removed on stop.
   */
  dataDir?: string;
  /**
   * Appended to every member's etcd command line. Flags the chosen version removed (3.7: every
   * `--experimental-*`; 3.6: `--enable-v2`) throw {@link EtcdFlagError} naming the replacement.
   */
  extraArgs?: string[];
  tls?: EtcdTlsOptions;
  /** `--heartbeat-interval`; default etcd's (100 ms). */
  heartbeatMs?: number;
  /** `--election-timeout`; default etcd's (1000 ms). */
  electionMs?: number;
  /**
   * How often the server sends progress notifications to watches that asked for them. The flag is
   * `--experimental-watch-progress-notify-interval` before 3.6, `--watch-progress-notify-interval` from 3.6.
   */
  watchProgressNotifyIntervalMs?: number;
  /** Budget for the cluster (and for later waitHealthy/leaderIndex calls) to become ready. Default 20000. */
  startTimeoutMs?: number;
  /** Where member logs (`m0.log`, ...) go. Default: the data dir. */
  logDir?: string;
}

/** A running etcd cluster started by {@link startEtcd}. */
export interface EtcdCluster extends AsyncDisposable {
  /** `127.0.0.1:port` per member, in member order. */
  readonly endpoints: string[];
  /** Client URLs with scheme, in member order. */
  readonly clientUrls: string[];
  readonly members: EtcdMember[];
  readonly dataDir: string;
  /** The server's version as `etcd --version` reports it, e.g. `3.7.3`. */
  readonly version: string;
  /** The etcd binary the members run. */
  readonly etcdBinary: string;
  /** The `etcdctl` next to that binary (same version), if there is one. */
  readonly etcdctlBinary: string | undefined;
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

const POLL_MS = 50;
const STOP_GRACE_MS = 5000;
const START_ATTEMPTS = 3;

/** The live members of one cluster and the polling built on their probes. */
class Members {
  list: MemberProcess[] = [];
  constructor(
    private readonly tls: ClientTls | undefined,
    private readonly timeoutMs: number,
  ) {}

  active(): MemberProcess[] {
    return this.list.filter((m) => m.member.running && !m.member.paused);
  }

  at(i: number): MemberProcess {
    const m = this.list[i];
    if (!m) throw new RangeError(`etcd: no member ${i} (cluster has ${this.list.length})`);
    return m;
  }

  probeAll(list: MemberProcess[], withHealth = true): Promise<Probe[]> {
    return Promise.all(list.map((m) => m.probe(this.tls, withHealth)));
  }

  private indexOfId(id: string | undefined, among: MemberProcess[]): number | undefined {
    return among.find((m) => id && m.id === id)?.index;
  }

  /**
   * Poll until `check` returns a value. `abortIf` lets startup fail fast when a member dies instead
   * of waiting out the timeout; on timeout the error carries the last probe of every member.
   */
  private async pollUntil<T>(
    what: string,
    timeout: number,
    withHealth: boolean,
    check: (probes: Probe[], active: MemberProcess[]) => T | undefined,
    abortIf?: () => Error | undefined,
  ): Promise<T> {
    const deadline = Date.now() + timeout;
    let last: Probe[] = [];
    for (;;) {
      const active = this.active();
      last = await this.probeAll(active, withHealth);
      const abort = abortIf?.();
      if (abort) throw abort;
      const result = active.length > 0 ? check(last, active) : undefined;
      if (result !== undefined) return result;
      if (Date.now() >= deadline) break;
      await sleep(POLL_MS);
    }
    const details = last.length
      ? last.map((p) => `${this.list[p.index]!.member.name}: ${p.error ?? `healthy=${p.healthy} leader=${p.leader ?? 'none'}`}`).join('; ')
      : 'no running members';
    throw new Error(`etcd: timed out after ${timeout} ms waiting for ${what} (${details})`);
  }

  async waitHealthy(timeout = this.timeoutMs, abortIf?: () => Error | undefined): Promise<void> {
    await this.pollUntil(
      'a healthy cluster',
      timeout,
      true,
      (probes, active) => {
        const leader = probes[0]?.leader;
        const ok = probes.every((p) => p.healthy && p.leader === leader) && this.indexOfId(leader, active) !== undefined;
        return ok ? true : undefined;
      },
      abortIf,
    );
  }

  leaderIndex(timeout = this.timeoutMs): Promise<number> {
    return this.pollUntil('a leader', timeout, false, (probes, active) => {
      const quorum = Math.floor(this.list.length / 2) + 1;
      const votes = new Map<string, number>();
      for (const p of probes) if (p.leader) votes.set(p.leader, (votes.get(p.leader) ?? 0) + 1);
      for (const [id, n] of votes) {
        const index = this.indexOfId(id, active);
        if (n >= quorum && index !== undefined) return index;
      }
      return undefined;
    });
  }

  /** The leader's index from one round of probes, if the members name one. */
  async leaderNow(): Promise<number | undefined> {
    if (this.list.length < 2) return undefined;
    const probes = await this.probeAll(this.active(), false);
    return probes.find((p) => p.leader !== undefined && p.leader === p.id)?.index;
  }
}

/**
 * Start a 1- or 3-member etcd cluster on loopback ports and wait until it has a leader.
 *
 * @example
 * ```ts
 * await using etcd = await startEtcd({ members: 3, version: '3.7' });
 * console.log(etcd.version); // e.g. '3.7.3'
 * // give etcd.endpoints to the client under test, then:
 * await etcd.kill(await etcd.leaderIndex());
 * await etcd.leaderIndex(); // a new leader among the survivors
 * ```
 */
export async function startEtcd(options: StartEtcdOptions = {}): Promise<EtcdCluster> {
  const size = options.members ?? 1;
  if (size !== 1 && size !== 3) throw new RangeError(`etcd: members must be 1 or 3, got ${size}`);
  const timeoutMs = options.startTimeoutMs ?? 20000;
  const install = await resolveEtcd({ version: options.version, etcdBinary: options.etcdBinary });
  checkExtraArgs(install.version, options.extraArgs);

  const ownsDataDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), 'etcd-concurrency-')));
  if (ownsDataDir) ownDataDir(dataDir);
  const removeDataDir = async () => {
    if (!ownsDataDir) return;
    disownDataDir(dataDir);
    await rm(dataDir, { recursive: true, force: true });
  };
  const logDir = options.logDir ?? dataDir;
  const members = new Members(options.tls ? await loadClientTls(options.tls) : undefined, timeoutMs);

  /** Start every member and wait for health; on failure, kill them and throw with the failing member's log tail. */
  const startAll = async (): Promise<void> => {
    const ports =
      options.basePort !== undefined
        ? await fixedPorts(options.basePort, size * 2, (i) => `${i % 2 ? 'peer' : 'client'} port of m${Math.floor(i / 2)}`)
        : await freePorts(size * 2);
    const token = `etcd-concurrency-${process.pid}-${randomBytes(6).toString('hex')}`;
    const scheme = options.tls ? 'https' : 'http';
    const urls = Array.from({ length: size }, (_, i) => ({
      name: `m${i}`,
      endpoint: `127.0.0.1:${ports[i * 2]}`,
      peerUrl: `http://127.0.0.1:${ports[i * 2 + 1]}`,
    }));
    const initialCluster = urls.map((u) => `${u.name}=${u.peerUrl}`).join(',');
    members.list = [];
    for (const [i, u] of urls.entries()) {
      const memberDir = join(dataDir, u.name);
      const logFile = join(logDir, `${u.name}.log`);
      const clientUrl = `${scheme}://${u.endpoint}`;
      // A member dir from an earlier attempt/run would carry stale peer URLs (or a newer version's
      // data, which 3.6 refuses); logs restart too.
      await rm(memberDir, { recursive: true, force: true });
      await rm(logFile, { force: true });
      const args = memberArgs(install.version, {
        ...options,
        name: u.name,
        dataDir: memberDir,
        clientUrl,
        peerUrl: u.peerUrl,
        initialCluster,
        clusterToken: token,
      });
      members.list.push(
        new MemberProcess(i, { name: u.name, endpoint: u.endpoint, clientUrl, peerUrl: u.peerUrl }, memberDir, logFile, install.etcd, args),
      );
    }
    await Promise.all(members.list.map((m) => m.spawn()));

    // A member that exits during startup will never become healthy: stop waiting right away.
    const dead = () => members.list.find((m) => !m.member.running);
    try {
      await members.waitHealthy(timeoutMs, () => {
        const m = dead();
        return m && new Error(`member ${m.member.name} ${m.exitInfo} during startup`);
      });
    } catch (err) {
      const probes = await members.probeAll(members.list);
      const failed = dead() ?? members.list[probes.find((p) => !p.healthy)?.index ?? 0]!;
      await Promise.all(members.list.map((m) => m.kill('SIGKILL')));
      const tail = await failed.logTail();
      throw new StartFailure(
        `etcd: cluster (etcd ${install.version}, ${install.etcd}) failed to start: ${(err as Error).message}\n` +
          `--- ${failed.member.name} log tail (${failed.logFile}) ---\n${tail}`,
        // etcd says so only in its log.
        /address already in use/.test(tail),
      );
    }
  };

  try {
    await mkdir(dataDir, { recursive: true });
    await mkdir(logDir, { recursive: true });
    for (let attempt = 1; ; attempt++) {
      try {
        await startAll();
        break;
      } catch (err) {
        // OS-chosen ports are probed then released, so another process can grab one in between:
        // retry that case only (fixed ports would just collide again).
        const portRace = options.basePort === undefined && err instanceof StartFailure && err.portInUse;
        if (!portRace || attempt >= START_ATTEMPTS) throw err;
      }
    }
  } catch (err) {
    await removeDataDir();
    throw err;
  }

  let stopping: Promise<void> | undefined;
  const list = members.list;
  const cluster: EtcdCluster = {
    endpoints: list.map((m) => m.member.endpoint),
    clientUrls: list.map((m) => m.member.clientUrl),
    members: list.map((m) => m.member),
    dataDir,
    version: install.version,
    etcdBinary: install.etcd,
    etcdctlBinary: install.etcdctl,
    stop() {
      stopping ??= (async () => {
        // On SIGTERM a leader first hands leadership to a connected follower; if that follower is
        // shutting down too, etcd waits ~7 s for the transfer. With followers gone first, it skips it.
        const leader = await members.leaderNow();
        const stopAll = (some: MemberProcess[]) => Promise.all(some.map((m) => m.kill('SIGTERM', STOP_GRACE_MS)));
        await stopAll(list.filter((m) => m.index !== leader));
        await stopAll(list.filter((m) => m.index === leader));
        await removeDataDir();
      })();
      return stopping;
    },
    async kill(i, signal = 'SIGKILL') {
      if (signal === 'SIGSTOP' || signal === 'SIGCONT') throw new Error('etcd: use pause()/resume() for SIGSTOP/SIGCONT');
      await members.at(i).kill(signal);
    },
    async restart(i) {
      if (stopping) throw new Error('etcd: cluster is stopped');
      const m = members.at(i);
      await m.kill('SIGKILL');
      await m.spawn();
      await members.waitHealthy(timeoutMs, () => {
        if (m.member.running) return undefined;
        return new Error(`etcd: restarted member ${m.member.name} ${m.exitInfo} (log: ${m.logFile})`);
      });
    },
    pause: (i) => members.at(i).pause(),
    resume: (i) => members.at(i).resume(),
    leaderIndex: (timeout) => members.leaderIndex(timeout),
    waitHealthy: (timeout) => members.waitHealthy(timeout),
    [Symbol.asyncDispose]() {
      return cluster.stop();
    },
  };
  return cluster;
}

/** The cluster did not start; `portInUse` when a member's log says one of its ports was taken. */
class StartFailure extends Error {
  constructor(
    message: string,
    readonly portInUse: boolean,
  ) {
    super(message);
  }
}
