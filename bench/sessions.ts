// Sessions: many leases kept alive by one process. They should share one LeaseKeepAlive stream and
// cost little CPU.
import { Client, Session } from '../dist/index.js';
import type { BenchContext } from './context.js';
import { RpcCounter, pool, sleep } from './stats.js';

export interface SessionsResult {
  sessions: number;
  ttl: number;
  createMs: number;
  /** LeaseKeepAlive streams this client opened (counted on its gRPC channel). */
  keepAliveStreamsOpened: number;
  /** LeaseKeepAlive streams opened and still open according to etcd's own /metrics (started - handled, delta over the phase), if readable. */
  serverKeepAliveStreams: number | null;
  /** Leases registered on the client's shared hub (`client.keepAlives.size`). */
  hubLeases: number;
  windowMs: number;
  renewalsPerSec: number;
  /** Process CPU (user + system) per wall-clock second over the window, in ms. */
  cpuMsPerSec: number;
  /** The same with no session at all, measured just before. */
  idleCpuMsPerSec: number;
  /** CPU per renewal, in µs: (cpu - idle) / renewals. */
  cpuUsPerRenewal: number;
  /** Sessions that were lost during the window: must be 0. */
  lost: number;
}

export async function runSessions(ctx: BenchContext, count = 1000): Promise<SessionsResult> {
  // A short TTL so that the window sees renewals (every ttl/3); CPU scales with renewals per second.
  const ttl = 6;
  const windowMs = ctx.quick ? 2500 : 6000;
  const idleMs = ctx.quick ? 500 : 1500;
  const client = new Client({ endpoints: ctx.endpoints });
  const counter = new RpcCounter(client);
  let sessions: Session[] = [];
  try {
    let cpu = process.cpuUsage();
    let t = performance.now();
    await sleep(idleMs);
    const idleCpuMsPerSec = cpuMs(process.cpuUsage(cpu)) / ((performance.now() - t) / 1000);

    const streamsBefore = await serverStreams(ctx.endpoints, 'LeaseKeepAlive');
    t = performance.now();
    sessions = await pool(
      Array.from({ length: count }, (_, i) => i),
      128,
      () => Session.create(client, { ttl }),
    );
    const createMs = performance.now() - t;
    // Let the first renewals (sent at once by every session) settle before the window.
    await sleep(300);
    const renewals0 = counter.keepAliveResponses;
    cpu = process.cpuUsage();
    t = performance.now();
    await sleep(windowMs);
    const wall = performance.now() - t;
    const used = cpuMs(process.cpuUsage(cpu));
    const renewals = counter.keepAliveResponses - renewals0;
    const lost = sessions.filter((s) => s.signal.aborted || s.remainingMs() <= 0).length;
    const streamsAfter = await serverStreams(ctx.endpoints, 'LeaseKeepAlive');
    const serverKeepAliveStreams = streamsBefore === null || streamsAfter === null ? null : streamsAfter - streamsBefore;
    const cpuMsPerSec = used / (wall / 1000);
    return {
      sessions: count,
      ttl,
      createMs,
      keepAliveStreamsOpened: counter.streamsOpened.get('LeaseKeepAlive') ?? 0,
      serverKeepAliveStreams,
      hubLeases: client.keepAlives.size,
      windowMs: wall,
      renewalsPerSec: renewals / (wall / 1000),
      cpuMsPerSec,
      idleCpuMsPerSec,
      cpuUsPerRenewal: renewals > 0 ? ((used - (idleCpuMsPerSec * wall) / 1000) * 1000) / renewals : NaN,
      lost,
    };
  } finally {
    await pool(sessions, 128, (s) => s.close().catch(() => {}));
    await client.close();
  }
}

function cpuMs(u: NodeJS.CpuUsage): number {
  return (u.user + u.system) / 1000;
}

/** Open gRPC streams of `method` on every member, from etcd's Prometheus metrics (started - handled). */
export async function serverStreams(endpoints: string[], method: string): Promise<number | null> {
  try {
    let open = 0;
    for (const e of endpoints) {
      const url = `${e.includes('://') ? e : `http://${e}`}/metrics`;
      const text = await (await fetch(url, { signal: AbortSignal.timeout(2000) })).text();
      const sum = (metric: string): number =>
        text
          .split('\n')
          .filter((l) => l.startsWith(metric) && l.includes(`grpc_method="${method}"`))
          .reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
      open += sum('grpc_server_started_total') - sum('grpc_server_handled_total');
    }
    return open;
  } catch {
    return null;
  }
}
