// A lock wait past the worker's watchdog, described for the log and the report: the queue as etcd
// had it (each key's owner and lease TTL) and what every worker said last.
import type { WorkerEvent } from './common.js';

/** One line for a 'stuck' report of worker `label`; `leaseOwner` maps a lease (hex) to its worker. */
export function stuckLine(
  e: Extract<WorkerEvent, { t: 'stuck' }>,
  label: string,
  leaseOwner: ReadonlyMap<string, string>,
  workers: readonly { label: string; lastEvent?: string }[],
): string {
  const owners = e.queue.map(
    (q) => `${q.key.slice(q.key.lastIndexOf('/') + 1)}@${q.createRevision}(${leaseOwner.get(q.lease) ?? '?'}, ttl ${q.leaseTtl})`,
  );
  const what = workers.map((w) => `${w.label}:${w.lastEvent ?? '-'}`).join(' ');
  // One session with two keys in one queue (an RWMutex's read and write keys): one of them is
  // not a wait in progress but a key re-created after its release, by a stale attempt of an
  // enqueue that had been retried on another member (see docs/reliability.md).
  const perLease = new Map<string, number>();
  for (const q of e.queue) perLease.set(q.lease, (perLease.get(q.lease) ?? 0) + 1);
  const twice = [...perLease].filter(([, n]) => n > 1).map(([l]) => `${leaseOwner.get(l) ?? l} has ${perLease.get(l)} keys`);
  const note = twice.length > 0 ? ` [${twice.join(', ')}: a stale enqueue re-created a released key?]` : '';
  return `${label} waited ${e.waitedMs} ms for ${e.key}; queue: ${owners.join(' < ')}${note}; workers: ${what}`;
}
