// Renders one run's results as plain-text tables (stdout) or Markdown (docs/performance.md).
import { locksSection } from './locks.js';
import type { Results } from './results.js';
import { sessionsScaleSection } from './sessions-scale.js';
import type { ScaleResult } from './scale.js';
import { holdLabel } from './semaphore.js';
import { markdownTable, ms, num, table, type Summary } from './stats.js';

export interface Section {
  title: string;
  header: string[];
  rows: string[][];
}

const IMPL: Record<string, string> = {
  ours: 'ours',
  go: 'Go concurrency',
  reference: "Go's algorithm in TS (bench/reference.ts)",
  etcd3: 'etcd3 1.1.2',
};

/** A row's implementation as shown in tables and charts (the Go rows with their client version). */
export function implLabel(x: { impl: string; client?: string }): string {
  if (x.impl === 'go') return `Go concurrency ${x.client ?? ''}`.trim();
  return IMPL[x.impl] ?? x.impl;
}

const lat = (s: Summary): string[] => [ms(s.p50), ms(s.p99), ms(s.mean)];

export function sections(r: Results): Section[] {
  const out: Section[] = [];
  if (r.floor) {
    const f = r.floor;
    out.push({
      title: 'Floor (ms)',
      header: ['operation', 'p50', 'p99', 'mean', 'n'],
      rows: [
        ['sequential Put (1 Raft write)', ...lat(f.put), String(f.put.n)],
        ['linearizable Get', ...lat(f.get), String(f.get.n)],
        ['watch notification: Delete call -> event (watch from now, synced)', ...lat(f.watchNotify), String(f.watchNotify.n)],
        ['  of which after the Delete response', ...lat(f.watchAfterResponse), String(f.watchAfterResponse.n)],
        [
          '  same, our Watch with startRevision = put revision + 1',
          ...lat(f.watchNotifyFromNextRevision),
          String(f.watchNotifyFromNextRevision.n),
        ],
        [
          '  same, startRevision = put revision (Go: the 100 ms trap, random phase)',
          ...lat(f.watchNotifyFromReadRevision),
          String(f.watchNotifyFromReadRevision.n),
        ],
      ],
    });
  }
  if (r.uncontended) {
    const u = r.uncontended;
    out.push({
      title: 'Uncontended lock + unlock, one session',
      header: ['implementation', 'cycles/s', 'p50 ms', 'p99 ms', 'mean ms', 'RPCs/cycle'],
      rows: [
        ['ours (Mutex.lock + unlock)', num(u.ours.cyclesPerSec), ...lat(u.ours.latency), u.ours.rpcsPerCycle?.toFixed(2) ?? '-'],
        ['etcd3 (Lock acquire + release)', num(u.etcd3.cyclesPerSec), ...lat(u.etcd3.latency), '3 + a keepalive stream'],
        ['sequential Put, interleaved (yardstick)', num(u.put.cyclesPerSec), ...lat(u.put.latency), '1'],
        ...(u.txns ? [["our cycle's two Txns alone (the floor)", num(u.txns.cyclesPerSec), ...lat(u.txns.latency), '2']] : []),
        ...(u.go
          ? [
              [
                `Go concurrency ${u.go.client} (Mutex.Lock + Unlock)`,
                num(u.go.cyclesPerSec),
                ...lat(u.go.latency),
                u.go.rpcsPerCycle?.toFixed(2) ?? '-',
              ],
            ]
          : []),
        ...(u.goPut ? [['Go sequential Put (yardstick)', num(u.goPut.cyclesPerSec), ...lat(u.goPut.latency), '1']] : []),
      ],
    });
  }
  if (r.contended) {
    out.push({
      title: `Contended: ${r.meta.contenders} contenders, own client + session each, one lock`,
      header: [
        'implementation',
        'acq/s',
        'wait p50 ms',
        'wait p99 ms',
        'per contender',
        'spread',
        'mutual exclusion',
        'failed tries',
        'requests per acquisition (RPCs + watch creates + cancels)',
      ],
      rows: r.contended.map((c) => [
        implLabel(c) + (c.waitMerged ? ' *' : ''),
        num(c.acquisitionsPerSec),
        ms(c.wait.p50),
        ms(c.wait.p99),
        `${Math.min(...c.perContender)}..${Math.max(...c.perContender)}`,
        `${(c.spread * 100).toFixed(1)}%`,
        c.mutualExclusion ? `held (${c.acquisitions})` : `VIOLATED (${c.violations})`,
        c.failedAttempts === undefined ? '-' : num(c.failedAttempts),
        c.requests
          ? `${c.requests.perAcquisition.toFixed(2)} (${c.requests.unary.toFixed(2)} + ${c.requests.watchCreates.toFixed(2)} + ${c.requests.watchCancels.toFixed(2)})`
          : '-',
      ]),
    });
  }
  if (r.election) {
    out.push({
      title: "Election: leader's resign() -> next candidate's campaign() resolves (ms)",
      header: ['implementation', 'follower queued', 'p50', 'p99', 'mean', 'max', 'rounds'],
      rows: r.election.map((e) => [
        implLabel(e),
        e.queued === 'long-before' ? 'long before' : '5 ms before',
        ...lat(e.handover),
        ms(e.handover.max),
        String(e.handover.n),
      ]),
    });
    const parts = r.election.filter((e) => e.breakdown);
    if (parts.length > 0) {
      out.push({
        title: 'Election handover, where the time goes (p50 ms; rounds where the follower was woken by its watch)',
        header: [
          'implementation',
          'follower queued',
          'rounds',
          'resign RPC',
          'resign -> watch event',
          'event -> read sent',
          'read',
          'read -> resolved',
        ],
        rows: parts.map((e) => {
          const b = e.breakdown!;
          return [
            implLabel(e),
            e.queued === 'long-before' ? 'long before' : '5 ms before',
            String(b.rounds),
            ms(b.resignRpc.p50),
            ms(b.notify.p50),
            ms(b.toRead.p50),
            ms(b.read.p50),
            ms(b.toResolved.p50),
          ];
        }),
      });
    }
    const f = r.electionFloor;
    const c = r.electionColdFloor;
    if (f) {
      const row = (name: string, hot: Summary, cold: Summary | undefined): string[] => [
        name,
        ...lat(hot),
        ...(cold ? lat(cold) : ['-', '-', '-']),
      ];
      const bound = (x: typeof f): string => ms(x.put.p50 + x.watchNotify.p50 + x.get.p50);
      out.push({
        title:
          'Floor sampled between the election rounds (ms), back to back and each after 250 ms idle; the goal bound is put + notification + get (p50s)',
        header: ['operation', 'p50', 'p99', 'mean', 'after idle: p50', 'p99', 'mean'],
        rows: [
          row('Put', f.put, c?.put),
          row('linearizable Get', f.get, c?.get),
          row('watch notification (Delete call -> event)', f.watchNotify, c?.watchNotify),
          ['bound: put + notification + get', bound(f), '', '', c ? bound(c) : '-', '', ''],
        ],
      });
    }
  }
  if (r.scale) {
    const row = (s: ScaleResult): string[] => {
      if (s.incomplete) {
        const i = s.incomplete;
        const note = `${s.keysLeft} (${i.sessionsLost} sessions lost, ${i.failures} waiters failed)`;
        return [num(s.waiters), `${num(i.queued)} queued in ${num(s.enqueueMs)}`, '-', '-', '-', '-', '-', '-', '-', '-', note];
      }
      return [
        num(s.waiters),
        num(s.enqueueMs),
        num(s.bytesPerWaiter),
        num(s.bufferBytesPerWaiter),
        s.waiters >= 1000 ? num(s.bytesPerSession) : '-', // too few sessions to rise above GC noise
        s.rpcsPerRelease.toFixed(2),
        Number.isFinite(s.recheckTxnsPerSecond) ? `${s.recheckTxnsPerSecond.toFixed(1)} (${num(s.recheckReadsPerSecond)} reads)` : '-', // results from before the split: none
        s.watchEventsPerRelease.toFixed(2),
        ms(s.handover.p50),
        num(s.abortMs),
        String(s.keysLeft),
      ];
    };
    const inc = r.scale.find((s) => s.incomplete?.firstFailure);
    out.push({
      title:
        'Scale: N waiters on one lock in one process (one client, a session each, at most 32 taking a ticket at once)' +
        (inc ? `\n  first failure at ${num(inc.waiters)}: ${inc.incomplete!.firstFailure}` : ''),
      header: [
        'waiters',
        'enqueue all ms',
        'heap B/waiter',
        '+ Buffer B/waiter',
        'B/session',
        'RPCs/release',
        're-check Txns/s (reads/s)',
        'events/release',
        'handover p50 ms',
        'abort all ms',
        'keys left',
      ],
      rows: r.scale.map(row),
    });
  }
  if (r.semaphore) {
    const p = r.semaphore;
    out.push({
      title:
        `Semaphore: ${p.contenders} contenders, own client + session each, on one semaphore of N permits, and on our Mutex ` +
        `(the configurations taking turns, ${p.rounds} x ${(p.roundMs / 1000).toFixed(1)} s each; "vs Mutex": the Mutex with the same critical section)`,
      header: [
        'lock',
        'critical section',
        'acq/s',
        'vs Mutex',
        'wait p50 ms',
        'wait p99 ms',
        'per contender',
        'spread',
        'holders mean / max',
        'at most N',
        'tokens',
        'keys left',
      ],
      rows: p.results.map((x) => {
        const mutex = p.results.find((m) => m.impl === 'mutex' && m.holdMs === x.holdMs);
        return [
          x.impl === 'mutex' ? 'Mutex' : `semaphore N=${x.permits}`,
          holdLabel(x.holdMs),
          num(x.acquisitionsPerSec),
          mutex ? `${(x.acquisitionsPerSec / mutex.acquisitionsPerSec).toFixed(2)}x` : '-',
          ms(x.wait.p50),
          ms(x.wait.p99),
          `${Math.min(...x.perContender)}..${Math.max(...x.perContender)}`,
          `${(x.spread * 100).toFixed(1)}%`,
          `${x.meanHolders.toFixed(2)} / ${x.maxHolders}`,
          x.violations === 0 ? `held (${x.acquisitions})` : `VIOLATED (${x.violations})`,
          x.tokenViolations === 0 ? 'ok' : `VIOLATED (${x.tokenViolations})`,
          String(x.keysLeft),
        ];
      }),
    });
  }
  if (r.rwlock) {
    const p = r.rwlock;
    out.push({
      title:
        `RWLock: ${p.contenders} contenders, own client + session each, ${Math.round((1 - p.writeShare) * 100)}% reads ` +
        `(rLock) and ${Math.round(p.writeShare * 100)}% writes (lock), and our Mutex for both (taking turns, ${p.rounds} x ${(p.roundMs / 1000).toFixed(1)} s each)`,
      header: [
        'lock',
        'critical section',
        'reads/s',
        'writes/s',
        'total/s',
        'read wait p50 ms',
        'p99',
        'write wait p50 ms',
        'p99',
        'readers mean / max',
        'spread',
        'exclusion',
        'tokens',
        'keys left',
      ],
      rows: p.results.map((x) => [
        x.impl === 'mutex' ? 'Mutex (reads too)' : 'RWMutex',
        holdLabel(x.holdMs),
        num(x.readsPerSec),
        num(x.writesPerSec),
        num(x.acquisitionsPerSec),
        ms(x.readWait.p50),
        ms(x.readWait.p99),
        ms(x.writeWait.p50),
        ms(x.writeWait.p99),
        x.impl === 'mutex' ? '-' : `${x.meanReaders.toFixed(2)} / ${x.maxReaders}`,
        `${(x.spread * 100).toFixed(1)}%`,
        x.violations === 0 ? `held (${x.reads} + ${x.writes})` : `VIOLATED (${x.violations})`,
        x.tokenViolations === 0 ? 'ok' : `VIOLATED (${x.tokenViolations})`,
        String(x.keysLeft),
      ]),
    });
  }
  if (r.semaphoreScale) {
    const row = (s: ScaleResult): string[] => {
      if (s.incomplete) {
        const i = s.incomplete;
        const note = `${s.keysLeft} (${i.sessionsLost} sessions lost, ${i.failures} waiters failed)`;
        return [num(s.waiters), `${num(i.queued)} queued in ${num(s.enqueueMs)}`, '-', '-', '-', '-', '-', '-', '-', '-', note];
      }
      return [
        num(s.waiters),
        num(s.enqueueMs),
        num(s.bytesPerWaiter),
        s.rpcsPerRelease.toFixed(2),
        Object.entries(s.rpcsPerReleaseByMethod)
          .map(([m, v]) => `${m} ${v.toFixed(2)}`)
          .join(', '),
        s.watchEventsPerRelease.toFixed(2),
        s.watchesPerRelease.toFixed(2),
        ms(s.handover.p50),
        ms(s.handover.p99),
        num(s.abortMs),
        String(s.keysLeft),
      ];
    };
    const first = r.semaphoreScale[0];
    const inc = r.semaphoreScale.find((s) => s.incomplete?.firstFailure);
    out.push({
      title:
        `Semaphore scale: N waiters behind the ${first?.permits ?? '?'} holders of one semaphore in one process ` +
        `(one client, a session each, at most 32 taking a ticket at once; ${first?.releases ?? '?'} releases, one at a time)` +
        (inc ? `\n  first failure at ${num(inc.waiters)}: ${inc.incomplete!.firstFailure}` : ''),
      header: [
        'waiters',
        'enqueue all ms',
        'heap B/waiter',
        'RPCs/release',
        'by method',
        'events/release',
        'watches opened/release',
        'handover p50 ms',
        'p99',
        'abort all ms',
        'keys left',
      ],
      rows: r.semaphoreScale.map(row),
    });
  }
  if (r.sessions) {
    const s = r.sessions;
    out.push({
      title: `Sessions: ${num(s.sessions)} sessions on one client (TTL ${s.ttl} s, renewed every ${(s.ttl / 3).toFixed(0)} s)`,
      header: [
        'keepalive streams (client/server)',
        'leases on hub',
        'renewals/s',
        'CPU ms/s',
        'idle CPU ms/s',
        'CPU µs/renewal',
        'lost',
        'create all ms',
      ],
      rows: [
        [
          `${s.keepAliveStreamsOpened} / ${s.serverKeepAliveStreams ?? '?'}`,
          num(s.hubLeases),
          num(s.renewalsPerSec),
          s.cpuMsPerSec.toFixed(1),
          s.idleCpuMsPerSec.toFixed(1),
          num(s.cpuUsPerRenewal),
          String(s.lost),
          num(s.createMs),
        ],
      ],
    });
  }
  if (r.locks) out.push(locksSection(r.locks));
  if (r.oneClient) out.push(locksSection(r.oneClient));
  if (r.sessionsScale) out.push(sessionsScaleSection(r.sessionsScale));
  if (r.goals.length > 0) {
    out.push({
      title: 'Goals',
      header: ['goal', 'measured', 'result'],
      rows: r.goals.map((g) => [g.goal, g.measured, g.met ? 'MET' : 'MISSED']),
    });
  }
  const failed = r.checks.filter((c) => !c.ok);
  out.push({
    title: `Checks (${r.checks.length - failed.length}/${r.checks.length} passed)`,
    header: ['phase', 'check', 'result'],
    rows: (failed.length > 0 ? failed : r.checks).map((c) => [c.phase, c.what, `${c.ok ? 'ok' : 'FAILED'}: ${c.detail}`]),
  });
  return out;
}

const loadText = (l: number[] | undefined): string => (l ? l.map((v) => v.toFixed(2)).join(' ') : '?');

export function metaLine(r: Results): string {
  const m = r.meta;
  const load = m.load ? `  load average (1/5/15 min) ${loadText(m.load.start)} at start, ${loadText(m.load.end)} at end` : '';
  const go = m.go?.skipped ? `  [no Go rows: ${m.go.skipped.split('. ')[0]}]` : '';
  return (
    `${m.date}  node ${m.node}  etcd ${m.etcd} (${m.members} member${m.members > 1 ? 's' : ''}, fsync on)  ` +
    `${m.nproc} cores: ${m.cpu}${m.quick ? '  [--quick]' : ''}${m.versions && m.versions.length > 1 ? `  [versions taking turns: ${m.versions.join(', ')}]` : ''}${load}${go}`
  );
}

export const MERGED_NOTE =
  "* Go's wait p50/p99 over several rounds: the n-weighted mean of each round's (the Go program prints summaries).";

export function renderText(r: Results): string {
  const merged = r.contended?.some((c) => c.waitMerged) ? `\n${MERGED_NOTE}` : '';
  return [metaLine(r), ...sections(r).map((s) => `\n${s.title}\n${table(s.header, s.rows)}`)].join('\n') + merged;
}

export function renderMarkdown(r: Results): string {
  const merged = r.contended?.some((c) => c.waitMerged) ? `\n${MERGED_NOTE}\n` : '';
  return `${[`_${metaLine(r)}_`, ...sections(r).map((s) => `\n#### ${s.title}\n\n${markdownTable(s.header, s.rows)}`)].join('\n')}\n${merged}`;
}
