// One process of the independent-locks phase (bench/locks.ts): one Client, S sessions, each looping
// on its own over random names. Mode `lock`: Mutex.lock() -> one event-loop turn -> unlock(), each
// held lock recorded for the cross-process exclusion check. Mode `txn` (the floor): the same
// sessions issue Txns of a lock's shape without locking: a put of a key of their own on the lease,
// guarded on its absence, then its delete, on random names (no two sessions share a key).
// Prints "ready" once the sessions exist, then runs the commands read from stdin (so that every
// process of a run starts together), printing one JSON line (LocksWorkerResult) for each.
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Client, Mutex, Session } from '../dist/index.js';
import { compare, op } from '../dist/client/kv.js';
import { RpcCounter, summarize, type Summary } from './stats.js';

/** What one worker prints; `records` are [name index, fencing token, held from ns, held to ns]. */
export interface LocksWorkerResult {
  impl: 'ours' | 'go';
  client?: string;
  /** Lock cycles (mode lock) or Txns (mode txn) completed. */
  cycles: number;
  elapsedMs: number;
  /** Unary requests sent during the loop (Txns, and Ranges if any). */
  requests: number;
  /** Txn requests during the loop, and the Txns they carried (more when Txns shared a request). */
  txnRequests?: number;
  txns?: number;
  /** Watches created during the loop (ours; Go's watch creates are not counted). */
  watchCreates?: number;
  /** This process's CPU (user + system) during the loop. */
  cpuMs: number;
  wait?: Summary;
  records?: [number, string | number, number | string, number | string][];
}

const { values } = parseArgs({
  options: {
    endpoints: { type: 'string' },
    names: { type: 'string', default: '1000' },
    sessions: { type: 'string', default: '50' },
    /** Session i always locks name i, rather than a random name each cycle. */
    distinct: { type: 'boolean', default: false },
  },
  strict: true,
});
const names = Number(values.names);

// Twenty processes starting at once on a busy machine: give the first connection time.
const client = new Client({ endpoints: values.endpoints!.split(','), dialTimeoutMs: 15_000 });
const counter = new RpcCounter(client);
const sessions = await Promise.all(Array.from({ length: Number(values.sessions) }, () => Session.create(client, { ttl: 60 })));
process.stdout.write('ready\n');

/** Runs `mode` for `durationMs` on every session at once. */
async function loop(mode: 'lock' | 'txn', prefix: string, durationMs: number): Promise<LocksWorkerResult> {
  const records: NonNullable<LocksWorkerResult['records']> = [];
  const waits: number[] = [];
  let txns = 0;
  const before = {
    requests: counter.unary,
    txnRequests: counter.txnRequests,
    txns: counter.txns,
    watches: counter.watchCreateRequests,
    cpu: process.cpuUsage(),
  };
  const start = performance.now();
  const end = start + durationMs;
  await Promise.all(
    sessions.map(async (session, s) => {
      while (performance.now() < end) {
        const k = values.distinct ? s : Math.floor(Math.random() * names);
        if (mode === 'txn') {
          const key = `${prefix}${k}/floor-${process.pid}-${s}`;
          await client.txn({
            compare: [compare.createRevision(key, '=', 0n)],
            success: [op.put(key, '', session.leaseId)],
            failure: [op.get(key)],
          });
          await client.txn({ compare: [compare.createRevision(key, '>', 0n)], success: [op.delete(key)], failure: [] });
          txns += 2;
          continue;
        }
        const t = performance.now();
        const h = await new Mutex(session, `${prefix}${k}`).lock();
        const held = process.hrtime.bigint();
        waits.push(performance.now() - t);
        // The critical section: one event-loop turn, as in the contended phase.
        await nextTurn();
        records.push([k, h.fencingToken.toString(), held.toString(), process.hrtime.bigint().toString()]);
        await h.unlock();
      }
    }),
  );
  const elapsedMs = performance.now() - start;
  const cpu = process.cpuUsage(before.cpu);
  return {
    impl: 'ours',
    cycles: mode === 'txn' ? txns : records.length,
    elapsedMs,
    requests: counter.unary - before.requests,
    txnRequests: counter.txnRequests - before.txnRequests,
    txns: counter.txns - before.txns,
    watchCreates: counter.watchCreateRequests - before.watches,
    cpuMs: (cpu.user + cpu.system) / 1000,
    ...(mode === 'lock' ? { wait: summarize(waits), records } : {}),
  };
}

// Commands, one a line: `lock <prefix> <ms>`, `txn <prefix> <ms>`, `exit`.
for await (const line of createInterface({ input: process.stdin })) {
  const [cmd, prefix, ms] = line.trim().split(' ');
  if (cmd === 'exit') break;
  if (cmd !== 'lock' && cmd !== 'txn') throw new Error(`locks-worker: unknown command ${JSON.stringify(line)}`);
  process.stdout.write(`${JSON.stringify(await loop(cmd, prefix!, Number(ms)))}\n`);
}
await Promise.all(sessions.map((s) => s.close()));
await client.close();
