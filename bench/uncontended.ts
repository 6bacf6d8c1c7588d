// Uncontended lock + unlock on one session: the cost of a lock nobody else wants.
// Ours, etcd3 and a plain Put are measured in interleaved blocks, so that the ratios between them
// hold even when the machine's background load drifts during the run.
import { Etcd3 } from 'etcd3';
import { Client, Mutex, Session } from '../src/index.js';
import { etcd3Hosts, type BenchContext } from './context.js';
import { RpcCounter, summarize, type Summary } from './stats.js';

export interface CycleResult {
  cycles: number;
  cyclesPerSec: number;
  latency: Summary;
  /** Unary RPCs per cycle (ours only: counted on our Client). */
  rpcsPerCycle?: number;
}

export interface UncontendedResult {
  ours: CycleResult;
  etcd3: CycleResult;
  /** A sequential Put measured in the same interleaved blocks (the goal's yardstick). */
  put: CycleResult;
}

const BLOCK = 25;

export async function runUncontended(ctx: BenchContext): Promise<UncontendedResult> {
  const budgetMs = ctx.quick ? 2400 : 9000;
  const maxPerImpl = ctx.quick ? 600 : 5000;
  const client = new Client({ endpoints: ctx.endpoints });
  const e3 = new Etcd3({ hosts: etcd3Hosts(ctx.endpoints) });
  let session: Session | undefined;
  try {
    session = await Session.create(client);
    const m = new Mutex(session, `${ctx.prefix}uncontended/ours`);
    const e3name = `${ctx.prefix}uncontended/etcd3`;
    const putKey = `${ctx.prefix}uncontended/put`;
    const impls = {
      ours: async () => {
        const h = await m.lock();
        await h.unlock();
      },
      etcd3: async () => {
        const lock = await e3.lock(e3name).acquire();
        await lock.release();
      },
      put: () => client.put(putKey, 'v'),
    };
    type Impl = keyof typeof impls;
    const names = Object.keys(impls) as Impl[];
    for (const n of names) for (let i = 0; i < 20; i++) await impls[n]();
    const samples: Record<Impl, number[]> = { ours: [], etcd3: [], put: [] };
    const spent: Record<Impl, number> = { ours: 0, etcd3: 0, put: 0 };
    const counter = new RpcCounter(client);
    let oursRpcs = 0;
    const start = performance.now();
    while (performance.now() - start < budgetMs && names.some((n) => samples[n].length < maxPerImpl)) {
      for (const n of names) {
        if (samples[n].length >= maxPerImpl) continue;
        const before = counter.unary;
        const t0 = performance.now();
        for (let i = 0; i < BLOCK; i++) {
          const t = performance.now();
          await impls[n]();
          samples[n].push(performance.now() - t);
        }
        spent[n] += performance.now() - t0;
        if (n === 'ours') oursRpcs += counter.unary - before;
      }
    }
    const result = (n: Impl): CycleResult => ({
      cycles: samples[n].length,
      cyclesPerSec: (samples[n].length * 1000) / spent[n],
      latency: summarize(samples[n]),
    });
    const ours = result('ours');
    ours.rpcsPerCycle = oursRpcs / ours.cycles;
    await client.delete(putKey);
    return { ours, etcd3: result('etcd3'), put: result('put') };
  } finally {
    await session?.close();
    await client.close();
    e3.close();
  }
}
