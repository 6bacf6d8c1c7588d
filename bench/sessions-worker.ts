// One process of the sessions-scale phase (bench/sessions-scale.ts): one Client holding N sessions.
// Prints "ready" once they exist (after measuring its idle CPU with none), then answers commands,
// one a line, each with one JSON line:
//   window <ms>           renewals answered, CPU and sessions lost over a window
//   down <refNs> <ms>     etcd is about to be killed: when each session learned it (its renewal
//                         unanswered: the late-renewal diagnostic), ms after refNs
//   up <refNs> <ms>       etcd was restarted at refNs: when each session's lease was renewed again
// Times are process.hrtime (CLOCK_MONOTONIC, shared by every process of the machine).
import { subscribe } from 'node:diagnostics_channel';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { Client, Session } from '../dist/index.js';
import { RpcCounter, pool, sleep } from './stats.js';

export interface SessionsWindow {
  sessions: number;
  renewals: number;
  wallMs: number;
  cpuMs: number;
  idleCpuMsPerSec: number;
  keepAliveStreamsOpened: number;
  hubLeases: number;
  lost: number;
  createMs: number;
}

/** Per session, ms after the reference when it learned (null: it did not within the time given). */
export interface SessionsLearned {
  learnedMs: (number | null)[];
  lost: number;
  keepAliveStreamsOpened: number;
}

const { values } = parseArgs({
  options: {
    endpoints: { type: 'string' },
    sessions: { type: 'string' },
    ttl: { type: 'string' },
    idle: { type: 'string', default: '1000' },
  },
  strict: true,
});
const count = Number(values.sessions);
// Twenty processes starting at once on a busy machine: give the first connection time.
const client = new Client({ endpoints: values.endpoints!.split(','), dialTimeoutMs: 15_000 });
const counter = new RpcCounter(client);
const now = (): bigint => process.hrtime.bigint();

// Bench-only instrumentation of this instance: when each lease's renewal was last answered.
const renewedAt = new Map<bigint, bigint>();
// biome-ignore lint/suspicious/noExplicitAny: the bench counts renewals by wrapping an internal method
const hub = client.keepAlives as any;
const register = hub.register.bind(hub);
hub.register = (id: bigint, l: { onRenewed: (ttl: bigint, sentAt: number) => void }) =>
  register(id, {
    ...l,
    onRenewed: (ttl: bigint, sentAt: number) => {
      renewedAt.set(id, now());
      l.onRenewed(ttl, sentAt);
    },
  });
const lateAt = new Map<bigint, bigint>();
subscribe('etcd-concurrency:session:late-renewal', (e) => {
  const id = (e as { leaseId: bigint }).leaseId;
  if (!lateAt.has(id)) lateAt.set(id, now());
});

const idleMs = Number(values.idle);
// The idle baseline after start-up's own work (module loading, the first GC) has settled.
await sleep(300);
let cpu = process.cpuUsage();
let t = performance.now();
await sleep(idleMs);
const idleCpuMsPerSec = ms(process.cpuUsage(cpu)) / ((performance.now() - t) / 1000);
t = performance.now();
const sessions = await pool(
  Array.from({ length: count }, (_, i) => i),
  128,
  () => Session.create(client, { ttl: Number(values.ttl) }),
);
const createMs = performance.now() - t;
process.stdout.write('ready\n');

function ms(u: NodeJS.CpuUsage): number {
  return (u.user + u.system) / 1000;
}

const lost = (): number => sessions.filter((s) => s.signal.aborted).length;

/** Waits until `learned(session)` holds for every session still alive, or `timeoutMs` passes. */
async function until(learned: (s: Session) => bigint | undefined, ref: bigint, timeoutMs: number): Promise<SessionsLearned> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline && sessions.some((s) => !s.signal.aborted && learned(s) === undefined)) await sleep(20);
  return {
    learnedMs: sessions.map((s) => {
      const at = learned(s);
      return at === undefined ? null : Number(at - ref) / 1e6;
    }),
    lost: lost(),
    keepAliveStreamsOpened: counter.streamsOpened.get('LeaseKeepAlive') ?? 0,
  };
}

let downAt = 0n;
for await (const line of createInterface({ input: process.stdin })) {
  const [cmd, a, b] = line.trim().split(' ');
  if (cmd === 'window') {
    const renewals0 = counter.keepAliveResponses;
    cpu = process.cpuUsage();
    t = performance.now();
    await sleep(Number(a));
    const w: SessionsWindow = {
      sessions: count,
      renewals: counter.keepAliveResponses - renewals0,
      wallMs: performance.now() - t,
      cpuMs: ms(process.cpuUsage(cpu)),
      idleCpuMsPerSec,
      keepAliveStreamsOpened: counter.streamsOpened.get('LeaseKeepAlive') ?? 0,
      hubLeases: client.keepAlives.size,
      lost: lost(),
      createMs,
    };
    process.stdout.write(`${JSON.stringify(w)}\n`);
  } else if (cmd === 'down') {
    downAt = BigInt(a!);
    lateAt.clear();
    const r = await until((s) => lateAt.get(s.leaseId), downAt, Number(b));
    process.stdout.write(`${JSON.stringify(r)}\n`);
  } else if (cmd === 'up') {
    const r = await until(
      (s) => {
        const at = renewedAt.get(s.leaseId);
        return at !== undefined && at > downAt ? at : undefined;
      },
      BigInt(a!),
      Number(b),
    );
    process.stdout.write(`${JSON.stringify(r)}\n`);
  } else {
    throw new Error(`sessions-worker: unknown command ${JSON.stringify(line)}`);
  }
}
await pool(sessions, 128, (s) => s.close().catch(() => {}));
await client.close();
