// The semaphore's resource: admitted tokens, writes by admitted holders only.
import type { FencedPermits, PermitEntry } from '../fenced-store.js';
import type { Violation } from './history.js';
import { spans, type Span } from './spans.js';

export interface PermitsReport {
  capacity: number;
  enters: number;
  entersRefused: number;
  /** Admitted tokens pushed out by a newer one (their holders had stopped holding without leaving). */
  evicted: number;
  writesAccepted: number;
  writesRefused: number;
  /** Careful writers (assertHeld just before sending) that the resource still refused. */
  carefulRefused: number;
  leaves: number;
  /** The most holders whose accepted requests interleaved at the resource. */
  maxAccepted: number;
  violations: Violation[];
}

/**
 * The semaphore's resource: never more than `capacity` holders served at once, judged on its log
 * (a holder's window runs from its first to its last accepted request; windows of more than
 * `capacity` tokens may not interleave), no operation applied twice, and no careful write (sent
 * right after assertHeld() passed) refused: the resource refuses only a token pushed out by newer
 * ones, which a correct semaphore grants only once that holder's key is gone.
 */
export function checkPermits(res: Pick<FencedPermits, 'capacity' | 'log'>): PermitsReport {
  const violations: Violation[] = [];
  let enters = 0;
  let entersRefused = 0;
  let evicted = 0;
  let writesAccepted = 0;
  let writesRefused = 0;
  let carefulRefused = 0;
  let leaves = 0;
  const opIds = new Set<string>();
  for (const e of res.log) {
    if (e.op === 'enter') {
      enters++;
      if (!e.ok) entersRefused++;
      evicted += e.evicted?.filter((t) => t !== e.token).length ?? 0;
    } else if (e.op === 'leave') leaves++;
    else if (e.ok) {
      writesAccepted++;
      if (e.opId !== undefined) {
        if (opIds.has(e.opId)) violations.push({ check: 'semaphore-double-apply', detail: `operation ${e.opId} was applied twice` });
        opIds.add(e.opId);
      }
    } else {
      writesRefused++;
      if (e.careful) {
        carefulRefused++;
        violations.push({
          check: 'semaphore-careful-refused',
          detail: `write #${e.seq} by ${e.worker} (token ${e.token}) passed assertHeld() but was refused: ${res.capacity} newer holders had entered`,
        });
      }
    }
  }
  // Windows of accepted requests: more than `capacity` open at one request is too many at once.
  let maxAccepted = 0;
  const open: Span<PermitEntry>[] = [];
  let over = false;
  for (const s of spans(res.log, (e) => e.op !== 'leave')) {
    for (let i = open.length - 1; i >= 0; i--) if (open[i]!.last < s.first) open.splice(i, 1);
    open.push(s);
    maxAccepted = Math.max(maxAccepted, open.length);
    if (open.length > res.capacity && !over) {
      violations.push({
        check: 'semaphore-fence-capacity',
        detail: `request #${s.first}: ${open.length} holders served at once by a resource of ${res.capacity}: ${open.map((o) => `${o.worker} (token ${o.token}, #${o.first}..#${o.last})`).join(', ')}`,
      });
    }
    over = open.length > res.capacity;
  }
  return {
    capacity: res.capacity,
    enters,
    entersRefused,
    evicted,
    writesAccepted,
    writesRefused,
    carefulRefused,
    leaves,
    maxAccepted,
    violations,
  };
}
