// Several runs (one per etcd version) side by side: one column per version for each figure.
import { locksVersionsSection } from './locks.js';
import { implLabel, metaLine, renderMarkdown, renderText, type Section } from './report.js';
import type { Results } from './results.js';
import { sessionsScaleVersionsSection } from './sessions-scale.js';
import { markdownTable, ms, num, table, type Summary } from './stats.js';

/**
 * The contended and election figures of several runs (one per etcd version) side by side: one
 * column per version for each figure, and each implementation's ratio to the floor and to Go.
 */
export function versionSections(rs: Results[]): Section[] {
  const out: Section[] = [];
  const vs = rs.map((r) => r.meta.etcd);
  const cols = (name: string): string[] => vs.map((v) => `${name} ${v}`);
  const withContended = rs.filter((r) => r.contended);
  if (withContended.length === rs.length) {
    const impls = [...new Set(rs.flatMap((r) => r.contended!.map((c) => c.impl)))];
    const find = (r: Results, impl: string) => r.contended!.find((c) => c.impl === impl);
    const per = (impl: string, f: (c: NonNullable<ReturnType<typeof find>>, r: Results) => string): string[] =>
      rs.map((r) => {
        const c = find(r, impl);
        return c ? f(c, r) : '-';
      });
    const rows = impls.map((impl) => {
      const any = rs.map((r) => find(r, impl)).find((c) => c !== undefined)!;
      return [
        implLabel(any),
        ...per(impl, (c) => num(c.acquisitionsPerSec)),
        ...per(impl, (c) => ms(c.wait.p50)),
        ...per(impl, (c) => ms(c.wait.p99)),
        ...per(impl, (c) => `${(c.spread * 100).toFixed(1)}%`),
      ];
    });
    if (impls.includes('ours') && impls.includes('go')) {
      rows.push([
        'ours ÷ Go',
        ...per('ours', (c, r) => {
          const g = find(r, 'go');
          return g ? `${(c.acquisitionsPerSec / g.acquisitionsPerSec).toFixed(1)}x` : '-';
        }),
        ...per('ours', (c, r) => {
          const g = find(r, 'go');
          return g ? `${(c.wait.p50 / g.wait.p50).toFixed(2)}x` : '-';
        }),
        ...per('ours', (c, r) => {
          const g = find(r, 'go');
          return g ? `${(c.wait.p99 / g.wait.p99).toFixed(2)}x` : '-';
        }),
        ...vs.map(() => ''),
      ]);
    }
    out.push({
      title: `Contended, etcd versions side by side: ${rs[0]!.meta.contenders} contenders, own client + session each, one lock`,
      header: ['implementation', ...cols('acq/s'), ...cols('wait p50 ms'), ...cols('wait p99 ms'), ...cols('spread')],
      rows,
    });
  }
  if (rs.every((r) => r.election)) {
    const keys = [...new Set(rs.flatMap((r) => r.election!.map((e) => `${e.impl}|${e.queued}`)))];
    const find = (r: Results, key: string) => r.election!.find((e) => `${e.impl}|${e.queued}` === key);
    const rows = keys.map((key) => {
      const any = rs.map((r) => find(r, key)).find((e) => e !== undefined)!;
      const per = (f: (e: NonNullable<ReturnType<typeof find>>) => string): string[] =>
        rs.map((r) => {
          const e = find(r, key);
          return e ? f(e) : '-';
        });
      return [
        implLabel(any),
        any.queued === 'long-before' ? 'long before' : '5 ms before',
        ...per((e) => ms(e.handover.p50)),
        ...per((e) => ms(e.handover.p99)),
      ];
    });
    const bound = (f: Results['electionFloor']): string => (f ? ms(f.put.p50 + f.watchNotify.p50 + f.get.p50) : '-');
    rows.push(['floor: put + notification + get, back to back', '', ...rs.map((r) => bound(r.electionFloor)), ...vs.map(() => '')]);
    rows.push(['floor: the same, each after 250 ms idle', '', ...rs.map((r) => bound(r.electionColdFloor)), ...vs.map(() => '')]);
    out.push({
      title: "Election, etcd versions side by side: leader's resign() -> next candidate's campaign() resolves (ms)",
      header: ['implementation', 'follower queued', ...cols('p50'), ...cols('p99')],
      rows,
    });
  }
  if (rs.every((r) => r.floor)) {
    const row = (name: string, f: (x: NonNullable<Results['floor']>) => Summary): string[] => [
      name,
      ...rs.map((r) => ms(f(r.floor!).p50)),
      ...rs.map((r) => ms(f(r.floor!).p99)),
    ];
    out.push({
      title: 'Floor, etcd versions side by side (ms)',
      header: ['operation', ...cols('p50'), ...cols('p99')],
      rows: [
        row('sequential Put', (f) => f.put),
        row('linearizable Get', (f) => f.get),
        row('watch notification (watch from now)', (f) => f.watchNotify),
        row('same, watch from the put revision (the 100 ms trap, random phase)', (f) => f.watchNotifyFromReadRevision),
      ],
    });
  }
  if (rs.every((r) => r.uncontended)) {
    out.push({
      title: 'Uncontended lock + unlock, etcd versions side by side (cycles/s; p50 ms)',
      header: ['implementation', ...cols('cycles/s'), ...cols('p50 ms')],
      rows: (['ours', 'etcd3', 'put', 'go', 'goPut'] as const)
        .filter((k) => rs.every((r) => r.uncontended![k]))
        .map((k) => [
          { put: 'sequential Put (yardstick)', ours: 'ours', etcd3: 'etcd3 1.1.2', go: "Go's package", goPut: 'Go sequential Put' }[k],
          ...rs.map((r) => num(r.uncontended![k]!.cyclesPerSec)),
          ...rs.map((r) => ms(r.uncontended![k]!.latency.p50)),
        ]),
    });
  }
  for (const s of [locksVersionsSection(rs), sessionsScaleVersionsSection(rs)]) if (s) out.push(s);
  if (rs.every((r) => r.goals.length > 0)) {
    const ids = [...new Set(rs.flatMap((r) => r.goals.map((g) => g.id)))];
    out.push({
      title: 'Goals, etcd versions side by side',
      header: ['goal', ...vs],
      rows: ids.map((id) => {
        const g = rs.map((r) => r.goals.find((x) => x.id === id));
        return [g.find((x) => x)!.goal, ...g.map((x) => (x ? `${x.met ? 'MET' : 'MISSED'}: ${x.measured}` : '-'))];
      }),
    });
  }
  return out;
}

/** Several runs: each one's full report, then the side-by-side tables. */
export function renderVersionsText(rs: Results[]): string {
  return [
    ...rs.map((r) => `==== etcd ${r.meta.etcd}\n${renderText(r)}`),
    '==== side by side',
    ...versionSections(rs).map((s) => `\n${s.title}\n${table(s.header, s.rows)}`),
  ].join('\n\n');
}

export function renderVersionsMarkdown(rs: Results[]): string {
  return `${[
    ...rs.map((r) => `_${metaLine(r)}_`),
    ...versionSections(rs).map((s) => `\n#### ${s.title}\n\n${markdownTable(s.header, s.rows)}`),
    ...rs.map((r) => `\n### etcd ${r.meta.etcd}\n\n${renderMarkdown(r)}`),
  ].join('\n')}\n`;
}
