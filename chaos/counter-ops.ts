// The etcd counter's operations for Porcupine (chaos/porcupine.ts), from one worker incarnation's
// reports (worker-counter.ts), on the parent's clock.
import type { EtcdIncrementReport } from './checker/index.js';
import type { WorkerEvent } from './common.js';
import type { LinearOp } from './porcupine.js';

/** The counter's part of the History: settled operations, and increments whose outcome was unknown. */
export interface CounterOps {
  counter: LinearOp[];
  /** Increments whose outcome the worker did not learn; settled against etcd's ledger (settleCounterOps()). */
  unknownIncs: { op: LinearOp; opKey: string }[];
}

type Call = Extract<WorkerEvent, { t: 'etcd-inc-call' }>;
type Done = Extract<WorkerEvent, { t: 'etcd-inc' }>;

/**
 * One worker incarnation's counter operations. The worker reports each read and the Txn it is about
 * to send before sending it, so that an incarnation killed before its outcome came leaves an
 * increment of unknown outcome (never returning), which etcd's ledger settles: a Txn applied by a
 * process that died before saying so is in the history Porcupine checks.
 */
export class CounterRecorder {
  private pending?: { op: LinearOp; opKey: string; token: string };

  /**
   * @param toParent maps the worker's clock onto the parent's.
   * @param errMs a bound on that mapping's error: every interval is widened by it on both sides.
   */
  constructor(
    private readonly client: number,
    private readonly toParent: (at: number) => number,
    private readonly errMs: number,
    private readonly out: CounterOps,
  ) {}

  /** The read, and the increment now in flight (until done() or died()). */
  called(e: Call): void {
    this.out.counter.push({ ...this.interval(e.read.call, e.read.ret), op: 'read', value: e.read.value, ok: true });
    this.pending = { op: { ...this.interval(e.at, Infinity), op: 'inc', value: e.value, ok: true }, opKey: e.opKey, token: e.token };
  }

  /** The increment's outcome: accepted (returned), unknown (never returning, settled later) or rejected (no effect). */
  done(e: Done): void {
    const p = this.pending;
    this.pending = undefined;
    if (p === undefined || p.opKey !== e.opKey || e.outcome === 'rejected') return;
    const op = e.txn?.ret !== undefined ? { ...p.op, ret: this.toParent(e.txn.ret) + this.errMs } : p.op;
    if (e.outcome === 'accepted') this.out.counter.push(op);
    else this.out.unknownIncs.push({ op, opKey: p.opKey });
  }

  /**
   * The incarnation ended (killed, or exited) with an increment in flight: its outcome is unknown.
   * Returns its report for checkEtcdCounter, if there was one.
   */
  died(worker: string): EtcdIncrementReport | undefined {
    const p = this.pending;
    this.pending = undefined;
    if (p === undefined) return undefined;
    this.out.unknownIncs.push({ op: p.op, opKey: p.opKey });
    return { worker, token: BigInt(p.token), opKey: p.opKey, value: p.op.value, outcome: 'unknown' };
  }

  private interval(call: number, ret: number): Pick<LinearOp, 'client' | 'call' | 'ret'> {
    return { client: this.client, call: this.toParent(call) - this.errMs, ret: this.toParent(ret) + this.errMs };
  }
}

/** The counter's history for Porcupine: its operations, and the unknown increments that etcd's ledger shows applied. */
export function settleCounterOps(ops: CounterOps, appliedOpKeys: ReadonlySet<string>): LinearOp[] {
  return [...ops.counter, ...ops.unknownIncs.filter((u) => appliedOpKeys.has(u.opKey)).map((u) => u.op)];
}
