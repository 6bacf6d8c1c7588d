// What a set of sequences exercised, counted from their steps and a transcript: each kind of call,
// each error etcd gave, each kind of watch and what its batches held. The differential test
// requires every feature of REQUIRED, so that a generator change cannot quietly stop covering one.
import type { Entry, Json } from './run.js';
import type { Step, StepKind, TxnSpec } from './steps.js';

const KINDS: readonly StepKind[] = [
  'put',
  'get',
  'getPrefix',
  'range',
  'delete',
  'txn',
  'bigTxn',
  'leaseGrant',
  'leaseRevoke',
  'keepAliveOnce',
  'keepAlive',
  'timeToLive',
  'leases',
  'compact',
  'watch',
  'cancel',
  'status',
];

/** Features every run of the differential test must reach at least once (each call kind: MIN_CALLS times). */
export const REQUIRED: readonly string[] = [
  ...KINDS.map((k) => `call ${k}`),
  'txn nested',
  'txn took its failure branch',
  'txn read after a put of the same key',
  'range sorted',
  'range keys only',
  'range count only',
  'range at a past revision',
  'range with a min or max revision filter',
  'lease granted with a chosen id',
  'lease granted with an id granted before',
  'error etcdserver: mvcc: required revision has been compacted',
  'error etcdserver: mvcc: required revision is a future revision',
  'error etcdserver: duplicate key given in txn request',
  'error etcdserver: too many operations in txn request',
  'error etcdserver: requested lease not found',
  'error etcdserver: key not found',
  'error etcdserver: value is provided',
  'error etcdserver: lease is provided',
  'error etcdserver: too large lease TTL',
  'watch from now',
  'watch from the past',
  'watch from the future',
  'watch with a filter',
  'watch ended by compaction',
  'watch batch of several events',
  'watch event with its previous value',
  'watch delete event',
  'watch cancelled',
];
export const MIN_CALLS = 3;

/** Adds what `steps` and their `transcript` exercised to `counts`. */
export function countFeatures(steps: readonly Step[], transcript: readonly Entry[], counts: Map<string, number>): void {
  const add = (f: string): void => void counts.set(f, (counts.get(f) ?? 0) + 1);
  const chosen = new Set<number>();
  for (const s of steps) {
    add(`call ${s.kind}`);
    if (s.kind === 'txn') txnFeatures(s.txn, add);
    if (s.kind === 'range') {
      const r = s.range;
      if (r.sortOrder || r.sortTarget) add('range sorted');
      if (r.keysOnly) add('range keys only');
      if (r.countOnly) add('range count only');
      if (r.revision) add('range at a past revision');
      if (r.minCreate !== undefined || r.maxCreate !== undefined || r.minMod !== undefined || r.maxMod !== undefined) {
        add('range with a min or max revision filter');
      }
    }
    if (s.kind === 'leaseGrant' && s.id !== undefined) {
      add(chosen.has(s.id) ? 'lease granted with an id granted before' : 'lease granted with a chosen id');
      chosen.add(s.id);
    }
    if (s.kind === 'watch') {
      const w = s.watch;
      add(
        w.start === undefined
          ? 'watch from now'
          : w.start !== 0 && w.start.at === 'future'
            ? 'watch from the future'
            : 'watch from the past',
      );
      if (w.noPut || w.noDelete) add('watch with a filter');
    }
  }
  for (const e of transcript) {
    const a = e.answer;
    if (!isObject(a)) continue;
    if (typeof a.etcd === 'string') add(`error ${a.etcd}`);
    if (a.succeeded === false && !Array.isArray(e.call) && isObject(e.call) && 'txn' in e.call) add('txn took its failure branch');
    if (Array.isArray(a.batches)) {
      for (const b of a.batches) {
        const events = isObject(b) && Array.isArray(b.events) ? b.events : [];
        if (events.length > 1) add('watch batch of several events');
        for (const ev of events) {
          if (isObject(ev) && ev.prevKv !== undefined) add('watch event with its previous value');
          if (isObject(ev) && ev.type === 'delete') add('watch delete event');
        }
      }
      if (a.end === 'cancelled') add('watch cancelled');
      if (isObject(a.end) && a.end.error === 'CompactedError') add('watch ended by compaction');
    }
  }
}

/** What `counts` lacks of REQUIRED (a call kind counts only from MIN_CALLS). */
export function missingFeatures(counts: ReadonlyMap<string, number>): string[] {
  return REQUIRED.filter((f) => (counts.get(f) ?? 0) < (f.startsWith('call ') ? MIN_CALLS : 1));
}

function txnFeatures(txn: TxnSpec, add: (f: string) => void): void {
  for (const branch of [txn.success, txn.failure]) {
    const put = new Set<string>();
    for (const o of branch) {
      if ('txn' in o) {
        add('txn nested');
        txnFeatures(o.txn, add);
      } else if ('put' in o) put.add(o.put.key);
      else if ('range' in o && o.range.end === undefined && put.has(o.range.key)) add('txn read after a put of the same key');
    }
  }
}

function isObject(v: Json | undefined): v is { [key: string]: Json } {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
