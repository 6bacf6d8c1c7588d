// One etcd member process: spawn it with its log file as stdout/stderr, signal it, learn when it
// exits, and probe its health and leader over HTTP. Also the process-wide safety net that kills
// members (and removes temp data dirs) when the test process ends abruptly.

import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { open, readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { requestJson, type ClientTls } from './http.js';

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

/** One member's answer to a health/status probe. */
export interface Probe {
  index: number;
  healthy: boolean;
  id?: string;
  leader?: string;
  error?: string;
}

const LOG_TAIL_LINES = 50;

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

/** Remove `dir` if the process ends before {@link disownDataDir} is called. */
export function ownDataDir(dir: string): void {
  ownedDataDirs.add(dir);
}
export function disownDataDir(dir: string): void {
  ownedDataDirs.delete(dir);
}

/** ETCD_* variables in the caller's environment would silently reconfigure our members. */
export function etcdFreeEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCD_')));
}

/** A member's process across restarts: same name, ports, data dir, log and command line. */
export class MemberProcess {
  readonly member: EtcdMember;
  child?: ChildProcess;
  exited?: Promise<void>;
  /** How the last process ended, e.g. `exited with code 1`. */
  exitInfo?: string;
  /** Raft member id (decimal string), learned from the first status answer; stable across restarts. */
  id?: string;

  constructor(
    readonly index: number,
    member: Omit<EtcdMember, 'running' | 'paused' | 'pid'>,
    readonly dataDir: string,
    readonly logFile: string,
    /** Fixed for the member's life so restarts re-run the exact same command. */
    readonly binary: string,
    readonly args: readonly string[],
  ) {
    this.member = { ...member, running: false, paused: false };
  }

  async spawn(): Promise<void> {
    const log = await open(this.logFile, 'a');
    let child: ChildProcess;
    try {
      // The log file is the child's stdout/stderr: no pipes for the test process to drain or leak.
      child = spawn(this.binary, this.args, { stdio: ['ignore', log.fd, log.fd], env: etcdFreeEnv() });
    } catch (err) {
      await log.close();
      throw err;
    }
    // Listeners go on before any await: a failed spawn emits 'error' on the next tick.
    const m = this.member;
    this.child = child;
    this.exitInfo = undefined;
    m.pid = child.pid;
    m.running = true;
    m.paused = false;
    track(child);
    // Unref'd so a test that forgets stop() still lets node exit (the 'exit' hook then kills the member).
    child.unref();
    this.exited = new Promise<void>((resolve) => {
      let finished = false;
      const done = (info: string) => {
        if (finished) return;
        finished = true;
        if (this.child === child) {
          m.running = false;
          m.paused = false;
          m.pid = undefined;
          this.exitInfo = info;
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
  }

  /** Signal the process and wait until it is gone (SIGKILL after `graceMs`); keeps node alive only while waiting. */
  async kill(signal: NodeJS.Signals, graceMs?: number): Promise<void> {
    const child = this.child;
    if (!child || !this.member.running) return;
    child.ref();
    child.kill(signal);
    // A stopped process would hold a catchable signal until continued.
    if (this.member.paused) child.kill('SIGCONT');
    if (graceMs === undefined) return this.exited;
    const ac = new AbortController();
    const forced = sleep(graceMs, undefined, { signal: ac.signal }).then(
      () => child.kill('SIGKILL'),
      () => undefined,
    );
    await this.exited;
    ac.abort();
    await forced;
  }

  pause(): void {
    if (!this.member.running || this.member.paused) return;
    this.child!.kill('SIGSTOP');
    this.member.paused = true;
  }

  resume(): void {
    if (!this.member.running || !this.member.paused) return;
    this.child!.kill('SIGCONT');
    this.member.paused = false;
  }

  /** `withHealth: false` for leader lookups: /health blocks while a member has no leader, status does not. */
  async probe(tls: ClientTls | undefined, withHealth = true): Promise<Probe> {
    const url = this.member.clientUrl;
    try {
      const health = withHealth ? ((await requestJson(`${url}/health`, 'GET', tls)) as { health?: string }) : undefined;
      const status = (await requestJson(`${url}/v3/maintenance/status`, 'POST', tls)) as {
        header?: { member_id?: string };
        leader?: string;
      };
      this.id ??= status.header?.member_id;
      // uint64s arrive as decimal strings; proto3 JSON omits a zero (no leader).
      const leader = status.leader && status.leader !== '0' ? status.leader : undefined;
      return { index: this.index, healthy: health?.health === 'true', id: this.id, leader };
    } catch (err) {
      return { index: this.index, healthy: false, id: this.id, error: (err as Error).message.split('\n')[0] };
    }
  }

  async logTail(): Promise<string> {
    try {
      const lines = (await readFile(this.logFile, 'utf8')).trimEnd().split('\n');
      return lines.slice(-LOG_TAIL_LINES).join('\n');
    } catch (err) {
      return `(no log: ${(err as Error).message})`;
    }
  }
}
