// The fenced role's second resource: a counter in etcd itself, incremented in a Txn guarded by the
// lock's ownerCompare() alone (two holders passing it would lose increments: the checker counts them).
import { compare, op, type Client, type LockHandle } from '../src/index.js';
import { emit } from './worker-io.js';
import { counterKey, now, opKey, type WorkerConfig } from './common.js';

/**
 * One increment of the etcd counter under `handle`'s ownerCompare(), with a ledger key per token
 * (opKey()) so that the parent can settle an increment whose outcome was unknown.
 */
export async function etcdIncrement(
  client: Client,
  cfg: Pick<WorkerConfig, 'dataPrefix' | 'id' | 'incarnation'>,
  handle: LockHandle,
  token: bigint,
): Promise<void> {
  const ck = counterKey(cfg.dataPrefix);
  const ok = opKey(cfg.dataPrefix, token);
  let value = -1;
  let outcome: 'accepted' | 'rejected' | 'unknown' = 'unknown';
  let error: string | undefined;
  // Invoke and return times, for Porcupine (chaos/porcupine.ts).
  let txn: { call: number; ret?: number } | undefined;
  try {
    const readCall = now();
    const cur = await client.get(ck);
    const read = { call: readCall, ret: now(), value: cur ? Number(cur.value.toString()) : 0 };
    value = read.value + 1;
    txn = { call: now() };
    // Before the Txn goes out (stdout to a pipe is written synchronously): if this process is killed
    // before its outcome, the parent still knows an increment to `value` may have been applied.
    emit({ t: 'etcd-inc-call', token: token.toString(), opKey: ok, value, read, at: txn.call });
    const t = await client.txn(
      {
        // Guarded by ownership alone: if two processes could both pass ownerCompare, increments are lost.
        // The ledger key's absence makes the Txn safe to retry after an ambiguous failure.
        compare: [handle.ownerCompare(), compare.createRevision(ok, '=', 0n)],
        success: [op.put(ck, String(value)), op.put(ok, `${cfg.id}#${cfg.incarnation}:${value}`)],
        failure: [],
      },
      { idempotent: true },
    );
    if (t.succeeded) outcome = 'accepted';
    else outcome = (await client.get(ok)) ? 'accepted' : 'rejected';
    txn.ret = now();
  } catch (err) {
    error = `${(err as Error).name}: ${(err as Error).message}`.slice(0, 200);
  }
  emit({ t: 'etcd-inc', token: token.toString(), opKey: ok, value, outcome, error, at: now(), txn });
}
