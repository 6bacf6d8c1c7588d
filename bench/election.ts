// Election handover: from the leader's resign() to the next candidate's campaign() resolving, with
// the follower queued long before, and queued only 5 ms before the resign. The implementations
// take turns round by round, and each round also samples the floor (a put, a linearizable get, a
// watch notification), so that the goal's bound is measured under the same conditions.
import { Etcd3 } from 'etcd3';
import { Client, Election, Session } from '../dist/index.js';
import { endpointsFor, etcd3Hosts, type BenchContext } from './context.js';
import { watchNotification } from './floor.js';
import { runGoBench } from './go.js';
import { GoStyleQueue } from './reference.js';
import { RpcCounter, sleep, summarize, within, type Summary } from './stats.js';

/** `go` is etcd's own Go package (interop/go), `reference` our re-implementation of its algorithm. */
export type ElectionImpl = 'ours' | 'go' | 'reference' | 'etcd3';
export type Queued = 'long-before' | '5ms-before';

/** What `go-interop bench-election` prints. */
export interface GoElectionRun {
  client: string;
  results: (Pick<ElectionResult, 'queued' | 'handover' | 'violations' | 'keysLeft'> & { impl: 'go' })[];
}

export interface ElectionResult {
  impl: ElectionImpl;
  queued: Queued;
  /** resign() called -> the follower's campaign() resolved. */
  handover: Summary;
  /** The follower led before the leader resigned (two leaders): must be 0. */
  violations: number;
  /** Keys left under the election's prefix afterwards (must be 0). */
  keysLeft: number;
  /** go only: the go.etcd.io/etcd/client/v3 module version. */
  client?: string;
  /**
   * Where the handover's time goes (ours and the reference; rounds where the follower was woken
   * by its watch): the resign RPC, resign() call -> the follower's watch event, event -> its read
   * starting, the read, the read's answer -> campaign() resolving.
   */
  breakdown?: { rounds: number; resignRpc: Summary; notify: Summary; toRead: Summary; read: Summary; toResolved: Summary };
}

export interface FloorSample {
  put: Summary;
  get: Summary;
  watchNotify: Summary;
}

export interface ElectionPhase {
  results: ElectionResult[];
  /** Floor samples taken back to back between the rounds: the bound "1 put + 1 notification + 1 read". */
  floor: FloorSample;
  /** The same, each operation after LONG_BEFORE_MS of quiet: the bound for the long-before case. */
  coldFloor: FloorSample;
}

interface Candidate {
  campaign(value: string): Promise<{ resign(): Promise<unknown> }>;
  close(): Promise<void>;
  /** Traces the candidate's RPCs and watch events (our Client only). */
  counter?: RpcCounter;
}

interface Parts {
  resignRpc: number[];
  notify: number[];
  toRead: number[];
  read: number[];
  toResolved: number[];
}

export const LONG_BEFORE_MS = 250; // well past etcd's 100 ms catch-up loop: every watch is synced by then
/**
 * A random pause before each round, so that each round starts at a random phase of etcd's 100 ms
 * catch-up loop. Without it, an implementation caught by that loop ends its round just after a tick,
 * and the next one's round, taking about as long each time, starts at the same phase: in the 5 ms
 * case the implementations after it then measured 85-90 ms every round instead of anywhere between
 * 0 and 100 ms.
 */
const PHASE_JITTER_MS = 100;

type Samples = { handover: number[]; violations: number; keysLeft: number; client?: string; parts: Parts };

/**
 * Every implementation takes turns round by round; with several etcd versions (one context each,
 * every server running), the versions take turns too. Returns one phase per context. The Go
 * package runs as a fresh go-interop process per round (`--rounds=1`), timed inside the process.
 */
export async function runElection(ctxs: BenchContext[], impls: ElectionImpl[]): Promise<ElectionPhase[]> {
  const rounds = ctxs[0]!.quick ? 5 : 20;
  const perCtx = ctxs.map((ctx) => ({
    ctx,
    names: Object.fromEntries(impls.map((i) => [i, `${ctx.prefix}election/${i}`])) as Record<ElectionImpl, string>,
    floorClient: new Client({ endpoints: ctx.endpoints }),
    candidates: new Map<ElectionImpl, Candidate[]>(),
    samples: new Map<string, Samples>(),
    hot: { put: [] as number[], get: [] as number[], notify: [] as number[] },
    cold: { put: [] as number[], get: [] as number[], notify: [] as number[] },
    floorKey: `${ctx.prefix}election/floor`,
  }));
  const phases: ElectionPhase[] = [];
  try {
    try {
      for (const c of perCtx) {
        for (const impl of impls) {
          if (impl !== 'go') c.candidates.set(impl, await Promise.all([0, 1].map((i) => candidate(c.ctx, impl, c.names[impl], i))));
        }
      }
      for (let r = 0; r < rounds; r++) {
        for (const queued of ['long-before', '5ms-before'] as const) {
          for (const { ctx, names, candidates, samples, hot, cold, floorClient, floorKey } of perCtx) {
            for (const impl of impls) {
              const s: Samples = samples.get(`${impl}/${queued}`) ?? {
                handover: [],
                violations: 0,
                keysLeft: 0,
                parts: { resignRpc: [], notify: [], toRead: [], read: [], toResolved: [] },
              };
              samples.set(`${impl}/${queued}`, s);
              await sleep(Math.random() * PHASE_JITTER_MS);
              if (impl === 'go') {
                const g = await runGoBench<GoElectionRun>(ctx, [
                  'bench-election',
                  `--name=${names.go}`,
                  '--rounds=1',
                  `--queued=${queued}`,
                ]);
                const x = g.results[0]!;
                s.handover.push(x.handover.p50); // one round: its only sample
                s.violations += x.violations;
                s.keysLeft += x.keysLeft;
                s.client = g.client;
                continue;
              }
              const cs = candidates.get(impl)!;
              const [a, b] = r % 2 === 0 ? cs : [cs[1]!, cs[0]!];
              const leader = await within(a!.campaign('leader'), 10_000, `${impl} campaign`);
              let resignedAt = Infinity;
              let ledEarly = false;
              const follower = b!.campaign('follower').then((h) => {
                if (performance.now() < resignedAt) ledEarly = true;
                return h;
              });
              await sleep(queued === 'long-before' ? LONG_BEFORE_MS : 5);
              for (const c of cs) c.counter?.clearTrace();
              resignedAt = performance.now();
              await leader.resign();
              const next = await within(follower, 10_000, `${impl} follower campaign`);
              const resolvedAt = performance.now();
              s.handover.push(resolvedAt - resignedAt);
              if (ledEarly) s.violations++;
              if (a!.counter && b!.counter) explain(s.parts, a!.counter, b!.counter, resignedAt, resolvedAt);
              await next.resign();
            }
            // The floor, back to back (as the 5 ms case runs) and after LONG_BEFORE_MS of quiet (as the
            // long-before case's resign does: a machine idle for a while answers its first request slower).
            for (const idle of [0, LONG_BEFORE_MS]) {
              const f = idle === 0 ? hot : cold;
              await sleep(idle);
              let t = performance.now();
              await floorClient.put(floorKey, 'v');
              f.put.push(performance.now() - t);
              await sleep(idle);
              t = performance.now();
              await floorClient.get(floorKey);
              f.get.push(performance.now() - t);
              f.notify.push((await watchNotification(floorClient, floorKey, 'now', idle)).notify);
            }
          }
        }
      }
    } finally {
      for (const c of perCtx) for (const cs of c.candidates.values()) await Promise.all(cs.map((x) => x.close().catch(() => {})));
    }
    for (const { names, samples, hot, cold, floorClient } of perCtx) {
      const results: ElectionResult[] = [];
      for (const impl of impls) {
        const prefix = impl === 'etcd3' ? `election/${names[impl]}/` : `${names[impl]}/`;
        const keysLeft = (await floorClient.getPrefix(prefix)).kvs.length;
        for (const queued of ['long-before', '5ms-before'] as const) {
          const s = samples.get(`${impl}/${queued}`)!;
          const r: ElectionResult = {
            impl,
            queued,
            handover: summarize(s.handover),
            violations: s.violations,
            keysLeft: keysLeft + s.keysLeft,
          };
          if (s.client) r.client = s.client;
          const p = s.parts;
          if (p.notify.length > 0) {
            r.breakdown = {
              rounds: p.notify.length,
              resignRpc: summarize(p.resignRpc),
              notify: summarize(p.notify),
              toRead: summarize(p.toRead),
              read: summarize(p.read),
              toResolved: summarize(p.toResolved),
            };
          }
          results.push(r);
        }
      }
      const floor = (f: typeof hot): FloorSample => ({ put: summarize(f.put), get: summarize(f.get), watchNotify: summarize(f.notify) });
      phases.push({ results, floor: floor(hot), coldFloor: floor(cold) });
    }
  } finally {
    for (const c of perCtx) await c.floorClient.close();
  }
  return phases;
}

async function candidate(ctx: BenchContext, impl: Exclude<ElectionImpl, 'go'>, name: string, i: number): Promise<Candidate> {
  if (impl === 'etcd3') {
    const client = new Etcd3({ hosts: etcd3Hosts(endpointsFor(ctx, i)) });
    return {
      async campaign(value) {
        // etcd3's Campaign grants a fresh lease per campaign (60 s by default; we pass 30 like ours).
        const c = client.election(name, 30).campaign(value);
        await c.wait();
        return { resign: () => c.resign() };
      },
      async close() {
        client.close();
      },
    };
  }
  const client = new Client({ endpoints: endpointsFor(ctx, i) });
  const counter = new RpcCounter(client);
  counter.tracing = true;
  const session = await Session.create(client);
  const close = async (): Promise<void> => {
    await session.close();
    await client.close();
  };
  if (impl === 'ours') {
    const e = new Election(session, name);
    return { campaign: (value) => e.campaign(value), close, counter };
  }
  return {
    async campaign(value) {
      const q = new GoStyleQueue(session, name, false);
      await q.acquire(value);
      return { resign: () => q.resign() };
    },
    close,
    counter,
  };
}

/** Splits one handover along the leader's and the follower's traced RPCs and watch events. */
function explain(parts: Parts, leader: RpcCounter, follower: RpcCounter, resignedAt: number, resolvedAt: number): void {
  const resign = leader.unaryLog.find((u) => u.start >= resignedAt);
  const event = follower.watchEventLog.find((t) => t >= resignedAt);
  if (!resign || event === undefined) return; // the follower was not waiting on a watch
  const read = follower.unaryLog.find((u) => u.start >= event);
  if (!read) return;
  parts.resignRpc.push(resign.end - resign.start);
  parts.notify.push(event - resignedAt);
  parts.toRead.push(read.start - event);
  parts.read.push(read.end - read.start);
  parts.toResolved.push(resolvedAt - read.end);
}
