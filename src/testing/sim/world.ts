// One simulated world: the virtual clock, a cluster, the network, client processes and the seed's
// random streams. Installing it fakes the process's clock and chance (Math.random, the library's
// lease ids); disposing it restores them. Only one world can be installed at a time.
import { Client, type ClientOptions } from '../../client/client.js';
import { suffixes } from '../../primitives/double-barrier.js';
import { leaseIds } from '../../session.js';
import { Cluster } from './cluster.js';
import { listened } from './heard.js';
import { Network } from './net.js';
import { Rng } from './rng.js';
import { PROFILES, type Profile } from './store.js';
import { Proc, VirtualTime } from './time.js';
import { Trace } from './trace.js';

export interface WorldOptions {
  seed: number;
  /** etcd version profile; default '3.7'. */
  profile?: '3.4' | '3.7';
  /** Members of the cluster; default 3. */
  members?: number;
  /** Keep every trace line (for --trace); the hash is kept either way. */
  keepTrace?: boolean;
}

let installed: World | undefined;

export class World {
  readonly time = new VirtualTime();
  readonly rng: Rng;
  readonly trace: Trace;
  readonly cluster: Cluster;
  readonly net: Network;
  readonly profile: Profile;
  readonly procs: Proc[] = [];
  readonly clients: Client[] = [];
  private readonly savedLeaseIds = leaseIds.next;

  constructor(readonly options: WorldOptions) {
    this.rng = new Rng(options.seed);
    this.profile = PROFILES[options.profile ?? '3.7'];
    this.trace = new Trace(options.keepTrace ?? false, () => Math.round(this.time.now));
    this.cluster = new Cluster({
      members: options.members ?? 3,
      profile: this.profile,
      rng: this.rng.fork('cluster'),
      time: this.time,
      trace: this.trace,
    });
    this.net = new Network(this.cluster, this.time, this.rng.fork('net'), this.trace);
  }

  get endpoints(): string[] {
    return this.cluster.members.map((m) => m.endpoint);
  }

  /** Fakes the clock and chance; the cluster's loops start. */
  install(): void {
    if (installed) throw new Error('another simulated world is installed; dispose it first');
    installed = this;
    const random = this.rng.fork('math-random');
    const ids = this.rng.fork('lease-ids');
    this.time.install(() => random.next());
    leaseIds.next = () => ids.int63();
    // Module state that would carry one run into the next: as a fresh process has it.
    suffixes.last = 0n;
    this.cluster.start();
  }

  dispose(): void {
    if (installed !== this) return;
    this.cluster.stop();
    this.time.uninstall();
    leaseIds.next = this.savedLeaseIds;
    installed = undefined;
  }

  /** A new client process. */
  proc(name: string): Proc {
    const p = new Proc(name, this.time);
    this.procs.push(p);
    return p;
  }

  /** A Client of `proc` on the simulated cluster, trying member `first` first. */
  client(proc: Proc, options: Omit<ClientOptions, 'endpoints' | 'transport'> = {}, first = 0): Client {
    const all = this.endpoints;
    const endpoints = all.map((_, i) => all[(first + i) % all.length]!);
    const c = proc.run(() => new Client({ ...options, endpoints, transport: listened(this.net.transportFor(proc), proc) }));
    this.clients.push(c);
    return c;
  }

  /** Pauses `proc`: its timers and deliveries wait until resume. */
  pause(proc: Proc): void {
    this.trace.add(`pause ${proc.name}`);
    proc.pause();
  }

  resume(proc: Proc): void {
    this.trace.add(`resume ${proc.name}`);
    proc.resume();
  }

  /** Crashes `proc` for good: its connections drop, its leases expire after their TTL. */
  crash(proc: Proc): void {
    this.trace.add(`crash ${proc.name}`);
    proc.crash();
    this.net.dropProc(proc);
  }
}
