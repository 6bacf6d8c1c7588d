// The RW lock's resource: a writer alone, readers among themselves.
import type { FencedRW, RWEntry } from '../fenced-store.js';
import type { Violation } from './history.js';
import { spans, type Span } from './spans.js';

export interface RWReport {
  readHolds: number;
  writeHolds: number;
  readsAccepted: number;
  readsRefused: number;
  writesAccepted: number;
  writesRefused: number;
  /** Careful requests (assertHeld just before sending: a reader's second read, a writer's write) refused. */
  carefulRefused: number;
  finalValue: number;
  violations: Violation[];
}

/**
 * The RW lock's resource: a write is never accepted while another holder's window is open (a
 * holder's window runs from its first to its last accepted request: a writer's may not interleave
 * with anyone's, readers' may with each other's), every accepted write writes the value before it
 * plus one (no increment lost or applied twice) and the final value counts them, and no careful
 * request (sent right after assertHeld() passed) is refused: the resource refuses a reader only
 * after a newer writer, and a writer only after any newer holder, which a correct RW lock lets in
 * only once the older key is gone.
 */
export function checkRW(res: Pick<FencedRW, 'log' | 'value'>): RWReport {
  const violations: Violation[] = [];
  let readHolds = 0;
  let writeHolds = 0;
  let readsAccepted = 0;
  let readsRefused = 0;
  let writesAccepted = 0;
  let writesRefused = 0;
  let carefulRefused = 0;
  let expected = 0;
  const opIds = new Set<string>();
  for (const e of res.log) {
    if (e.op === 'enter') {
      if (e.mode === 'read') readHolds++;
      else writeHolds++;
    }
    if (e.op !== 'write') {
      if (e.ok) readsAccepted++;
      else readsRefused++;
    } else if (e.ok) {
      writesAccepted++;
      expected++;
      if (e.value !== e.before + 1) {
        violations.push({
          check: 'rw-lost-update',
          detail: `write #${e.seq} by ${e.worker} (token ${e.token}) wrote ${e.value} over ${e.before}: an increment was lost or applied twice`,
        });
      }
      if (e.opId !== undefined) {
        if (opIds.has(e.opId)) violations.push({ check: 'rw-double-apply', detail: `operation ${e.opId} was applied twice` });
        opIds.add(e.opId);
      }
    } else writesRefused++;
    if (!e.ok && e.careful && e.op !== 'enter') {
      carefulRefused++;
      const by = e.mode === 'write' ? `holder token ${e.highestBefore}` : `writer token ${e.highestWriteBefore}`;
      violations.push({
        check: 'rw-careful-refused',
        detail: `${e.op} #${e.seq} by ${e.mode === 'write' ? 'writer' : 'reader'} ${e.worker} (token ${e.token}) passed assertHeld() but was refused: ${by} had been seen`,
      });
    }
  }
  if (res.value !== expected)
    violations.push({ check: 'rw-count', detail: `the RW register holds ${res.value} but ${expected} increments were accepted` });
  // Windows of accepted requests: a writer's may not interleave with any other holder's.
  const open: Span<RWEntry>[] = [];
  const who = (m: RWEntry['mode']): string => (m === 'write' ? 'writer' : 'reader');
  for (const s of spans(res.log, () => true)) {
    for (let i = open.length - 1; i >= 0; i--) if (open[i]!.last < s.first) open.splice(i, 1);
    for (const o of open) {
      if (o.entry.mode === 'read' && s.entry.mode === 'read') continue;
      violations.push({
        check: 'rw-fence-conflict',
        detail: `${who(s.entry.mode)} ${s.worker} (token ${s.token}, #${s.first}..#${s.last}) was served inside the window of ${who(o.entry.mode)} ${o.worker} (token ${o.token}, #${o.first}..#${o.last})`,
      });
    }
    open.push(s);
  }
  return {
    readHolds,
    writeHolds,
    readsAccepted,
    readsRefused,
    writesAccepted,
    writesRefused,
    carefulRefused,
    finalValue: res.value,
    violations,
  };
}
