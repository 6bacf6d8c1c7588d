// A 3-member etcd cluster whose members talk to each other through proxies in this process: each
// member's peer URL, as advertised to the others, is a proxy that knows which member each of its
// connections carries messages for, so a test can hold everything Raft sends to one member
// (`lag(i, true)`) and make that follower fall behind the others while it still serves its clients.
//
// etcd's rafthttp carries a member's messages to a peer on two kinds of connection: streams that the
// receiving member dialed (GET /raft/stream/<type>/<receiver id>, the messages flow back on it) and
// pipelines that the sender dialed to the receiver's peer URL (POST /raft...). So the messages for
// member B travel on every stream whose path names B, whatever proxy it went through, and on every
// connection to B's own peer URL.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '../../src/index.js';
import { resolveEtcd } from '../../src/testing/index.js';
import { etcdFreeEnv } from '../../src/launcher/index.js';
import { waitFor } from './waiting.js';

export interface PeerProxiedCluster {
  /** Each member's own client endpoint (no proxy), in member order. */
  endpoints: string[];
  /**
   * Holds (on) or lets flow again, in order (off), everything the other members send to member `i`:
   * it stops applying new entries (a lagging follower) but still answers its clients from what it has.
   */
  lag(i: number, on: boolean): void;
  /** The index of the Raft leader, as the members' Status says. */
  leaderIndex(): Promise<number>;
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

/**
 * Starts the cluster (the tests' etcd version: ETCD_VERSION, else the newest cached). A long
 * election timeout (5 s) keeps a follower whose peer traffic a test holds for a moment from calling
 * an election meanwhile.
 */
export async function startPeerProxiedCluster(): Promise<PeerProxiedCluster> {
  const install = await resolveEtcd({});
  const ports = await freePorts(6);
  const clientPorts = ports.slice(0, 3);
  const peerPorts = ports.slice(3);
  const net = new PeerNet();
  const peerProxies = await Promise.all(peerPorts.map((p, i) => net.proxy(i, p)));
  const dir = await mkdtemp(join(tmpdir(), 'peer-proxied-'));
  const initialCluster = peerProxies.map((p, i) => `m${i}=http://${p}`).join(',');
  const token = `peer-proxied-${process.pid}-${ports[0]}`;
  const members: ChildProcess[] = clientPorts.map((cp, i) => {
    const log = createWriteStream(join(dir, `m${i}.log`));
    const child = spawn(
      install.etcd,
      [
        ...['--name', `m${i}`, '--data-dir', join(dir, `m${i}`)],
        ...['--listen-client-urls', `http://127.0.0.1:${cp}`, '--advertise-client-urls', `http://127.0.0.1:${cp}`],
        ...['--listen-peer-urls', `http://127.0.0.1:${peerPorts[i]}`, '--initial-advertise-peer-urls', `http://${peerProxies[i]!}`],
        ...['--initial-cluster', initialCluster, '--initial-cluster-state', 'new', '--initial-cluster-token', token],
        ...['--heartbeat-interval', '500', '--election-timeout', '5000'],
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], env: etcdFreeEnv() },
    );
    child.stderr!.pipe(log);
    return child;
  });
  const endpoints = clientPorts.map((p) => `127.0.0.1:${p}`);
  const stop = async (): Promise<void> => {
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
    net.close();
    await rm(dir, { recursive: true, force: true });
  };
  const status = async (i: number) => {
    const c = new Client({ endpoints: [endpoints[i]!], dialTimeoutMs: 1000 });
    try {
      return await c.status({ timeoutMs: 2000 });
    } finally {
      await c.close();
    }
  };
  const leaderIndex = async (): Promise<number> => {
    const s = await status(0);
    const ids = await Promise.all([0, 1, 2].map(async (i) => (await status(i)).header.memberId));
    const i = ids.indexOf(s.leader);
    if (i < 0) throw new Error('no leader among the members');
    return i;
  };
  const ids = new Map<string, number>();
  try {
    await waitFor(
      async () => {
        if (members.some((m) => m.exitCode !== null)) throw new Error(`an etcd member exited; logs in ${dir}`);
        return leaderIndex().then(
          () => true,
          () => false,
        );
      },
      'the peer-proxied cluster to elect a leader',
      { limitMs: 60_000, intervalMs: 100 },
    );
    for (let i = 0; i < 3; i++) ids.set((await status(i)).header.memberId.toString(16), i);
  } catch (err) {
    await stop();
    throw err;
  }
  net.memberOf = (id) => ids.get(id);
  return { endpoints, lag: (i, on) => net.hold(i, on), leaderIndex, stop };
}

/** One direction of a proxied connection, which can be held (bytes kept, in order) and let go. */
class Flow {
  private held: Buffer[] = [];
  /** The member id (hex) a stream's path names, resolved to an index once the members are known. */
  forId: string | undefined;
  constructor(
    readonly to: Socket,
    private readonly net: PeerNet,
    /** The member this direction carries messages for, when known from the proxy it went through. */
    private readonly member: number | undefined,
  ) {}
  get forMember(): number | undefined {
    return this.member ?? (this.forId === undefined ? undefined : this.net.memberOf(this.forId));
  }
  write(chunk: Buffer, holding: boolean): void {
    if (holding || this.held.length > 0) this.held.push(chunk);
    else this.to.write(chunk);
  }
  release(): void {
    for (const c of this.held.splice(0)) this.to.write(c);
  }
}

/** The peer proxies of one cluster. */
class PeerNet {
  private readonly servers: Server[] = [];
  private readonly flows = new Set<Flow>();
  private readonly holding = new Set<number>();
  private readonly sockets = new Set<Socket>();
  memberOf: (hexId: string) => number | undefined = () => undefined;

  /** A proxy in front of member `member`'s peer port; resolves with its `127.0.0.1:port`. */
  proxy(member: number, port: number): Promise<string> {
    const server = createServer({ noDelay: true }, (client) => {
      const upstream = connect({ host: '127.0.0.1', port, noDelay: true });
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('error', () => {});
        s.on('close', () => {
          this.sockets.delete(s);
          client.destroy();
          upstream.destroy();
        });
      }
      // What the dialer sends goes to `member`; what comes back goes to the dialer, which a stream's
      // path names (GET /raft/stream/<type>/<dialer id>); a pipeline's answers carry no message.
      const toMember = new Flow(upstream, this, member);
      const back = new Flow(client, this, undefined);
      this.flows.add(toMember);
      this.flows.add(back);
      let sniffed = false;
      client.on('data', (chunk: Buffer) => {
        if (!sniffed) {
          sniffed = true;
          const m = /^GET \/raft\/stream\/[a-z0-9]+\/([0-9a-f]+) /.exec(chunk.toString('latin1', 0, 200));
          if (m) back.forId = m[1];
        }
        toMember.write(chunk, this.holding.has(member));
      });
      upstream.on('data', (chunk: Buffer) => back.write(chunk, back.forMember !== undefined && this.holding.has(back.forMember)));
      client.on('close', () => {
        this.flows.delete(toMember);
        this.flows.delete(back);
      });
    });
    this.servers.push(server);
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve(`127.0.0.1:${(server.address() as { port: number }).port}`));
    });
  }

  hold(member: number, on: boolean): void {
    if (on) this.holding.add(member);
    else {
      this.holding.delete(member);
      for (const f of this.flows) if (f.forMember === member) f.release();
    }
  }

  close(): void {
    for (const s of this.servers) s.close();
    for (const s of this.sockets) s.destroy();
  }
}
