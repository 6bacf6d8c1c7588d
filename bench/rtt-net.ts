// A 3-member etcd cluster on a slow network: every path, each client's to its member and each
// member's to the others (the peer URLs, so every Raft message and thus every commit pays it),
// goes through a TCP proxy of `etcd-concurrency/testing` holding each chunk `rttMs / 2` in each
// direction. This machine's kernel has no netem qdisc, hence proxies. A member listens on its own
// ports and advertises the proxies' (clients are given the client proxies).
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { resolveEtcd } from '../src/testing/index.js';
import { sleep } from './stats.js';

/** ETCD_* variables (ETCD_VERSION, set by `scripts/etcd.mjs exec`) would reconfigure the members, as etcd reads them as flags. */
const etcdFreeEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCD_')));

export interface DelayedCluster {
  /** The client proxies, one per member. */
  endpoints: string[];
  /** The server's version as `etcd --version` reports it. */
  version: string;
  /** The round-trip time set on every path (each proxy holds a chunk half of it, each way). */
  rttMs: number;
  stop(): Promise<void>;
}

async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
          const s = createServer();
          s.once('error', reject);
          s.listen(0, '127.0.0.1', () => resolve(s));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}

/** Starts the proxies' process: one proxy per target, in order. */
async function startProxies(delayMs: number, targets: string[]): Promise<{ endpoints: string[]; child: ChildProcess }> {
  const script = fileURLToPath(new URL('./rtt-proxies.ts', import.meta.url));
  const child = spawn(process.execPath, ['--import', 'tsx', script, String(delayMs), ...targets], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await Promise.race([once(lines, 'line'), once(child, 'exit').then(() => [undefined])])) as [string | undefined];
  if (line === undefined) throw new Error('bench: the proxies process exited before listing its endpoints');
  lines.close();
  return { endpoints: JSON.parse(line) as string[], child };
}

/** Starts 3 members of `version` (as the tests pick: ETCD_VERSION, else the newest cached) behind proxies of `rttMs`. */
export async function startDelayedCluster(rttMs: number, version?: string): Promise<DelayedCluster> {
  const install = await resolveEtcd(version ? { version } : {});
  const ports = await freePorts(6);
  const clientPorts = ports.slice(0, 3);
  const peerPorts = ports.slice(3);
  const { endpoints: proxied, child: proxies } = await startProxies(
    rttMs / 2,
    [...clientPorts, ...peerPorts].map((p) => `127.0.0.1:${p}`),
  );
  const clientProxies = proxied.slice(0, 3);
  const peerProxies = proxied.slice(3);
  const dir = await mkdtemp(join(tmpdir(), 'bench-rtt-'));
  const token = `rtt-${process.pid}-${Date.now()}`;
  const initialCluster = peerProxies.map((p, i) => `m${i}=http://${p}`).join(',');
  const members = clientPorts.map((cp, i) => {
    const log = createWriteStream(join(dir, `m${i}.log`));
    const p = spawn(
      install.etcd,
      [
        '--name',
        `m${i}`,
        '--data-dir',
        join(dir, `m${i}`),
        '--listen-client-urls',
        `http://127.0.0.1:${cp}`,
        '--advertise-client-urls',
        `http://${clientProxies[i]}`,
        '--listen-peer-urls',
        `http://127.0.0.1:${peerPorts[i]}`,
        '--initial-advertise-peer-urls',
        `http://${peerProxies[i]}`,
        '--initial-cluster',
        initialCluster,
        '--initial-cluster-state',
        'new',
        '--initial-cluster-token',
        token,
        '--logger',
        'zap',
        '--log-outputs',
        'stderr',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], env: etcdFreeEnv },
    );
    p.stderr!.pipe(log);
    return p;
  });
  const stop = async (keepLogs = false): Promise<void> => {
    await Promise.all(
      members.map(async (m) => {
        if (m.exitCode !== null || m.signalCode !== null) return;
        const exited = once(m, 'exit');
        m.kill('SIGTERM');
        const timer = setTimeout(() => m.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }),
    );
    proxies.stdin!.end();
    await once(proxies, 'exit').catch(() => {});
    if (!keepLogs) await rm(dir, { recursive: true, force: true });
  };
  try {
    // Healthy (a leader, and a write committed through Raft) on every member, asked directly.
    const deadline = performance.now() + 30_000;
    for (const cp of clientPorts) {
      for (;;) {
        const dead = members.find((m) => m.exitCode !== null);
        if (dead) throw new Error(`bench: an etcd member exited (${dead.exitCode}); logs in ${dir}`);
        // Not up yet, or (a port taken meanwhile by another process) not an etcd: not healthy yet.
        const ok = await fetch(`http://127.0.0.1:${cp}/health`)
          .then((r) => r.json() as Promise<{ health: string }>)
          .catch(() => undefined);
        if (ok?.health === 'true') break;
        if (performance.now() > deadline) throw new Error(`bench: the delayed cluster did not become healthy in 30 s; logs in ${dir}`);
        await sleep(100);
      }
    }
  } catch (err) {
    await stop(true); // the logs stay for the error's reader
    throw err;
  }
  return { endpoints: clientProxies, version: install.version, rttMs, stop: () => stop() };
}
