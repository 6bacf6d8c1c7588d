// A 3-member etcd cluster whose members each live in their own Linux network namespace, wired to a
// bridge in a fourth namespace, so that a real network partition can cut one member off from the
// others (`partition(i)`: its bridge port goes down; packets are dropped, no connection is reset).
//
// Addresses: link-local 169.254.77.0/24, assigned only inside namespaces created here; nothing is
// routed anywhere else. Clients in the root namespace (the chaos parent and workers) reach each
// member through a relay: a TCP listener on 127.0.0.1 in the root namespace forwards to a Unix
// socket served by a small relay process inside the member's namespace, which forwards to the
// member's 127.0.0.1:2379. So a partition separates the members from each other (Raft traffic),
// while clients keep reaching whichever member they talk to, as a client on the minority side
// would: that member then has no leader and refuses (`hasleader`).
//
// Needs root and iproute2 (`ip netns`, veth, bridge). `netnsAvailable()` checks; main.ts falls back
// to proxy-only partitions where it is not.
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdir, open, rm } from 'node:fs/promises';
import * as http from 'node:http';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { etcdFreeEnv } from '../src/launcher/index.js';

const execFileAsync = promisify(execFile);
const SUBNET = '169.254.77';
const PREFIX = 'ecc';

async function ip(...args: string[]): Promise<string> {
  const { stdout } = await execFileAsync('ip', args);
  return stdout;
}

/** True when this process may create network namespaces, veth pairs and bridges. */
export async function netnsAvailable(): Promise<{ ok: boolean; why?: string }> {
  if (process.platform !== 'linux') return { ok: false, why: 'not Linux' };
  if (process.getuid?.() !== 0) return { ok: false, why: 'not root' };
  const probe = `${PREFIX}-${process.pid}-probe`;
  try {
    await ip('netns', 'add', probe);
    try {
      await ip('-n', probe, 'link', 'add', 'br0', 'type', 'bridge');
      await ip('-n', probe, 'link', 'add', 'pa', 'type', 'veth', 'peer', 'name', 'pb');
    } finally {
      await ip('netns', 'del', probe);
    }
    return { ok: true };
  } catch (err) {
    return { ok: false, why: `ip netns failed: ${((err as { stderr?: string }).stderr ?? (err as Error).message).trim()}` };
  }
}

/** Removes namespaces left by earlier runs whose process is gone (a run killed with SIGKILL). */
export async function removeStaleNamespaces(): Promise<string[]> {
  let list: string;
  try {
    list = await ip('netns', 'list');
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const line of list.split('\n')) {
    const name = line.split(' ')[0] ?? '';
    const m = new RegExp(`^${PREFIX}-(\\d+)-`).exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    let alive = true;
    try {
      process.kill(pid, 0);
    } catch {
      alive = false;
    }
    if (alive) continue;
    await ip('netns', 'del', name).catch(() => {});
    removed.push(name);
  }
  return removed;
}

// The relay that runs inside a member's namespace: Unix socket -> 127.0.0.1:2379. Plain JS, run with
// `node -e`, so it starts fast and needs no file of its own.
const RELAY_SOURCE = `
const net = require('node:net');
const fs = require('node:fs');
const [sock, port] = process.argv.slice(1);
try { fs.unlinkSync(sock); } catch {}
const srv = net.createServer((c) => {
  const u = net.connect({ host: '127.0.0.1', port: Number(port) });
  const kill = () => { c.destroy(); u.destroy(); };
  c.on('error', kill); u.on('error', kill); c.on('close', kill); u.on('close', kill);
  c.pipe(u); u.pipe(c);
});
srv.listen(sock, () => process.stdout.write('ready\\n'));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
`;

export interface NetnsMember {
  name: string;
  ns: string;
  address: string;
  /** `127.0.0.1:port` in the root namespace, relayed to the member. */
  endpoint: string;
  pid?: number;
  running: boolean;
  paused: boolean;
  partitioned: boolean;
}

export interface NetnsCluster {
  readonly endpoints: string[];
  readonly members: NetnsMember[];
  kill(i: number, signal?: NodeJS.Signals): Promise<void>;
  restart(i: number): Promise<void>;
  pause(i: number): void;
  resume(i: number): void;
  /** Cuts member i off from the other members (its bridge port goes down). */
  partition(i: number): Promise<void>;
  /** Restores every member's link. */
  heal(): Promise<void>;
  leaderIndex(timeoutMs?: number): Promise<number>;
  waitHealthy(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

interface MemberState {
  m: NetnsMember;
  index: number;
  args: string[];
  logFile: string;
  dataDir: string;
  sock: string;
  etcd?: ChildProcess;
  exited?: Promise<void>;
  relay?: ChildProcess;
  front?: Server;
  frontConns: Set<Socket>;
  id?: string;
}

/** Starts three etcd members in fresh network namespaces under `dir` (data and logs). */
export async function startNetnsCluster(dir: string, options: { electionMs?: number; heartbeatMs?: number } = {}): Promise<NetnsCluster> {
  const tag = `${PREFIX}-${process.pid}-${Math.floor(Math.random() * 0xffff).toString(16)}`;
  const bridgeNs = `${tag}-br`;
  const size = 3;
  await mkdir(dir, { recursive: true });
  const states: MemberState[] = [];
  const created: string[] = [];
  let stopped = false;

  const cleanupNamespaces = async (): Promise<void> => {
    for (const ns of created.reverse()) await ip('netns', 'del', ns).catch(() => {});
    created.length = 0;
  };

  try {
    await ip('netns', 'add', bridgeNs);
    created.push(bridgeNs);
    await ip('-n', bridgeNs, 'link', 'set', 'lo', 'up');
    await ip('-n', bridgeNs, 'link', 'add', 'br0', 'type', 'bridge');
    await ip('-n', bridgeNs, 'link', 'set', 'br0', 'up');
    for (let i = 0; i < size; i++) {
      const ns = `${tag}-m${i}`;
      await ip('netns', 'add', ns);
      created.push(ns);
      const address = `${SUBNET}.${10 + i}`;
      await ip('link', 'add', `p${i}`, 'netns', bridgeNs, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
      await ip('-n', bridgeNs, 'link', 'set', `p${i}`, 'master', 'br0');
      await ip('-n', bridgeNs, 'link', 'set', `p${i}`, 'up');
      await ip('-n', ns, 'link', 'set', 'lo', 'up');
      await ip('-n', ns, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
      await ip('-n', ns, 'link', 'set', 'eth0', 'up');
      const dataDir = join(dir, `m${i}`);
      await rm(dataDir, { recursive: true, force: true });
      states.push({
        index: i,
        m: { name: `m${i}`, ns, address, endpoint: '', running: false, paused: false, partitioned: false },
        args: [],
        logFile: join(dir, `m${i}.log`),
        dataDir,
        sock: join(dir, `m${i}.sock`),
        frontConns: new Set(),
      });
    }
  } catch (err) {
    await cleanupNamespaces();
    throw err;
  }

  const initialCluster = states.map((s) => `${s.m.name}=http://${s.m.address}:2380`).join(',');
  for (const s of states) {
    s.args = [
      'netns',
      'exec',
      s.m.ns,
      'etcd',
      '--name',
      s.m.name,
      '--data-dir',
      s.dataDir,
      '--listen-client-urls',
      `http://127.0.0.1:2379,http://${s.m.address}:2379`,
      '--advertise-client-urls',
      `http://${s.m.address}:2379`,
      '--listen-peer-urls',
      `http://${s.m.address}:2380`,
      '--initial-advertise-peer-urls',
      `http://${s.m.address}:2380`,
      '--initial-cluster',
      initialCluster,
      '--initial-cluster-state',
      'new',
      '--initial-cluster-token',
      tag,
      '--logger',
      'zap',
      '--log-outputs',
      'stderr',
      ...(options.heartbeatMs ? ['--heartbeat-interval', String(options.heartbeatMs)] : []),
      ...(options.electionMs ? ['--election-timeout', String(options.electionMs)] : []),
    ];
  }

  const spawnEtcd = async (s: MemberState): Promise<void> => {
    const log = await open(s.logFile, 'a');
    try {
      // `ip netns exec` execs etcd in place: the child's pid is etcd's, so signals reach it.
      s.etcd = spawn('ip', s.args, { stdio: ['ignore', log.fd, log.fd], env: etcdFreeEnv() });
    } finally {
      await log.close();
    }
    const child = s.etcd;
    s.m.pid = child.pid;
    s.m.running = true;
    s.m.paused = false;
    s.exited = new Promise((resolve) => {
      const done = (): void => {
        if (s.etcd === child) {
          s.m.running = false;
          s.m.paused = false;
          s.m.pid = undefined;
        }
        resolve();
      };
      child.once('exit', done);
      child.once('error', done);
    });
  };

  const spawnRelay = async (s: MemberState): Promise<void> => {
    const relay = spawn('ip', ['netns', 'exec', s.m.ns, process.execPath, '-e', RELAY_SOURCE, s.sock, '2379'], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    s.relay = relay;
    await new Promise<void>((resolve, reject) => {
      relay.stdout!.once('data', () => resolve());
      relay.once('exit', (code) => reject(new Error(`relay for ${s.m.name} exited with ${code}`)));
    });
    // The front door in the root namespace: a loopback port per member.
    const front = createServer((c) => {
      const u = connect(s.sock);
      s.frontConns.add(c);
      const kill = (): void => {
        c.destroy();
        u.destroy();
        s.frontConns.delete(c);
      };
      c.on('error', kill);
      u.on('error', kill);
      c.on('close', kill);
      u.on('close', kill);
      c.pipe(u);
      u.pipe(c);
    });
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
    s.front = front;
    s.m.endpoint = `127.0.0.1:${(front.address() as { port: number }).port}`;
  };

  const killState = async (s: MemberState, signal: NodeJS.Signals): Promise<void> => {
    if (!s.etcd || !s.m.running) return;
    s.etcd.kill(signal);
    if (s.m.paused) s.etcd.kill('SIGCONT');
    await s.exited;
  };

  const probe = async (s: MemberState): Promise<{ healthy: boolean; leader?: string; id?: string }> => {
    try {
      const h = (await requestJson(`http://${s.m.endpoint}/health`, 'GET')) as { health?: string };
      const st = (await requestJson(`http://${s.m.endpoint}/v3/maintenance/status`, 'POST')) as {
        header?: { member_id?: string };
        leader?: string;
      };
      s.id ??= st.header?.member_id;
      const leader = st.leader && st.leader !== '0' ? st.leader : undefined;
      return { healthy: h.health === 'true', leader, id: s.id };
    } catch {
      return { healthy: false };
    }
  };

  const active = (): MemberState[] => states.filter((s) => s.m.running && !s.m.paused);

  const leaderIndex = async (timeoutMs = 20_000): Promise<number> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const act = active().filter((s) => !s.m.partitioned);
      const probes = await Promise.all(act.map(probe));
      const votes = new Map<string, number>();
      for (const p of probes) if (p.leader) votes.set(p.leader, (votes.get(p.leader) ?? 0) + 1);
      for (const [id, n] of votes) {
        const idx = act.find((s) => s.id === id)?.index;
        if (n >= 2 && idx !== undefined) return idx;
      }
      if (Date.now() >= deadline) throw new Error(`netns etcd: no leader within ${timeoutMs} ms`);
      await sleep(50);
    }
  };

  const waitHealthy = async (timeoutMs = 20_000): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const act = active().filter((s) => !s.m.partitioned);
      const probes = await Promise.all(act.map(probe));
      const leader = probes[0]?.leader;
      if (act.length > 0 && probes.every((p) => p.healthy && p.leader === leader) && act.some((s) => s.id === leader)) return;
      if (Date.now() >= deadline) throw new Error(`netns etcd: not healthy within ${timeoutMs} ms (see ${dir}/m*.log)`);
      await sleep(50);
    }
  };

  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    await Promise.all(states.map((s) => killState(s, 'SIGKILL')));
    for (const s of states) {
      s.relay?.stdin?.end();
      s.relay?.kill('SIGKILL');
      for (const c of s.frontConns) c.destroy();
      await new Promise<void>((resolve) => (s.front ? s.front.close(() => resolve()) : resolve()));
    }
    await cleanupNamespaces();
  };
  // Never leave namespaces or members behind, even when the parent dies of an exception.
  const onExit = (): void => {
    for (const s of states) {
      s.etcd?.kill('SIGKILL');
      s.relay?.kill('SIGKILL');
    }
    for (const ns of created) {
      try {
        // Synchronous: 'exit' handlers cannot wait.
        execFileSync('ip', ['netns', 'del', ns]);
      } catch {
        // already gone
      }
    }
  };
  process.once('exit', onExit);

  try {
    for (const s of states) await spawnRelay(s);
    await Promise.all(states.map(spawnEtcd));
    await waitHealthy(30_000);
  } catch (err) {
    await stop();
    process.off('exit', onExit);
    throw err;
  }

  return {
    endpoints: states.map((s) => s.m.endpoint),
    members: states.map((s) => s.m),
    kill: (i, signal = 'SIGKILL') => killState(states[i]!, signal),
    async restart(i) {
      const s = states[i]!;
      await killState(s, 'SIGKILL');
      await spawnEtcd(s);
      await waitHealthy(30_000);
    },
    pause(i) {
      const s = states[i]!;
      if (!s.m.running || s.m.paused) return;
      s.etcd!.kill('SIGSTOP');
      s.m.paused = true;
    },
    resume(i) {
      const s = states[i]!;
      if (!s.m.running || !s.m.paused) return;
      s.etcd!.kill('SIGCONT');
      s.m.paused = false;
    },
    async partition(i) {
      const s = states[i]!;
      await ip('-n', bridgeNs, 'link', 'set', `p${i}`, 'down');
      s.m.partitioned = true;
    },
    async heal() {
      for (const s of states) {
        if (!s.m.partitioned) continue;
        await ip('-n', bridgeNs, 'link', 'set', `p${s.index}`, 'up');
        s.m.partitioned = false;
      }
    },
    leaderIndex,
    waitHealthy,
    async stop() {
      await stop();
      process.off('exit', onExit);
    },
  };
}

function requestJson(url: string, method: 'GET' | 'POST'): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const body = method === 'POST' ? '{}' : undefined;
    const req = http.request(
      url,
      { method, agent: false, timeout: 1000, headers: body ? { 'content-type': 'application/json', 'content-length': body.length } : {} },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          try {
            resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
          } catch (err) {
            reject(err);
          }
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(body);
  });
}
