// Hand-rolled SVG bar charts of the contended and election figures (no dependency).
import { implLabel } from './report.js';
import type { Results } from './results.js';
import { ms, num } from './stats.js';

const COLORS: Record<string, string> = { ours: '#2b6cb0', go: '#4a5568', reference: '#a0aec0', etcd3: '#dd6b20' };
/** The lightest shade of each, for the last of several etcd versions. */
const LIGHT: Record<string, string> = { ours: '#90cdf4', go: '#a0aec0', reference: '#e2e8f0', etcd3: '#fbd38d' };

/**
 * The bar colour of `impl` in run `k` of `n` (one run per etcd version): the first run has the
 * implementation's colour, the last its light shade, and any between them shades evenly spaced
 * from one to the other, so that every version's bars differ however many there are.
 */
export function color(impl: string, k: number, n: number): string {
  const from = COLORS[impl] ?? '#718096';
  const to = LIGHT[impl] ?? '#cbd5e0';
  const t = n > 1 ? k / (n - 1) : 0;
  const channel = (i: number): string => {
    const [a, b] = [from, to].map((c) => parseInt(c.slice(1 + 2 * i, 3 + 2 * i), 16)) as [number, number];
    return Math.round(a + (b - a) * t)
      .toString(16)
      .padStart(2, '0');
  };
  return `#${channel(0)}${channel(1)}${channel(2)}`;
}

export interface Bar {
  label: string;
  value: number;
  color: string;
  /** A thin mark further right (p99), drawn as a whisker. */
  whisker?: number;
  text: string;
}

export interface Panel {
  title: string;
  bars: Bar[];
  /** A vertical dashed reference line with its caption. */
  bound?: { value: number; text: string };
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export function renderPanels(title: string, subtitle: string, panels: Panel[]): string {
  const longest = Math.max(0, ...panels.flatMap((p) => p.bars.map((b) => b.label.length)));
  const labelW = Math.max(200, Math.ceil(longest * 6.4) + 16);
  const width = labelW + 560;
  const plotW = 400;
  const barH = 22;
  const gap = 8;
  const parts: string[] = [];
  let y = 56;
  for (const p of panels) {
    const max = Math.max(...p.bars.map((b) => Math.max(b.value, b.whisker ?? 0)), p.bound?.value ?? 0) || 1;
    const x = (v: number): number => labelW + (Math.max(0, v) / max) * plotW;
    parts.push(`<text x="10" y="${y}" class="h">${esc(p.title)}</text>`);
    y += 12;
    const top = y;
    for (const b of p.bars) {
      const w = Math.max(1, x(b.value) - labelW);
      parts.push(`<text x="${labelW - 8}" y="${y + barH * 0.7}" class="l" text-anchor="end">${esc(b.label)}</text>`);
      parts.push(`<rect x="${labelW}" y="${y}" width="${w.toFixed(1)}" height="${barH}" fill="${b.color}"/>`);
      let textX = labelW + w + 6;
      if (b.whisker !== undefined && b.whisker > b.value) {
        const wx = x(b.whisker);
        const cy = y + barH / 2;
        parts.push(`<line x1="${(labelW + w).toFixed(1)}" y1="${cy}" x2="${wx.toFixed(1)}" y2="${cy}" stroke="#333" stroke-width="1"/>`);
        parts.push(`<line x1="${wx.toFixed(1)}" y1="${cy - 6}" x2="${wx.toFixed(1)}" y2="${cy + 6}" stroke="#333" stroke-width="1.5"/>`);
        textX = wx + 6;
      }
      parts.push(`<text x="${textX.toFixed(1)}" y="${y + barH * 0.7}" class="v">${esc(b.text)}</text>`);
      y += barH + gap;
    }
    if (p.bound) {
      const bx = x(p.bound.value).toFixed(1);
      parts.push(
        `<line x1="${bx}" y1="${top - 4}" x2="${bx}" y2="${y - gap + 4}" stroke="#c53030" stroke-width="1.5" stroke-dasharray="5,3"/>`,
      );
      parts.push(`<text x="${bx}" y="${y + 10}" class="b" text-anchor="middle">${esc(p.bound.text)}</text>`);
      y += 16;
    }
    y += 22;
  }
  const height = y;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif">`,
    '<style>.t{font-size:16px;font-weight:bold}.s{font-size:11px;fill:#555}.h{font-size:13px;font-weight:bold}.l{font-size:12px}.v{font-size:11px;fill:#222}.b{font-size:11px;fill:#c53030}</style>',
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="10" y="22" class="t">${esc(title)}</text>`,
    `<text x="10" y="38" class="s">${esc(subtitle)}</text>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
}

export function caption(rs: Results[]): string {
  const m = rs[0]!.meta;
  const etcd = rs.map((r) => r.meta.etcd).join(' and ');
  return `etcd ${etcd}, ${m.members} member${m.members > 1 ? 's' : ''}, fsync on; node ${m.node}; ${m.nproc} cores (${m.cpu}); ${m.date.slice(0, 10)}`;
}

/** Bars for each implementation, then (with several runs) each etcd version under it. */
function bars<T extends { impl: string; client?: string }>(
  rs: Results[],
  pick: (r: Results) => T[] | undefined,
  bar: (x: T) => Omit<Bar, 'label' | 'color'>,
): Bar[] {
  const impls = [...new Set(rs.flatMap((r) => (pick(r) ?? []).map((x) => x.impl)))];
  const out: Bar[] = [];
  for (const impl of impls) {
    for (const [k, r] of rs.entries()) {
      const x = pick(r)?.find((y) => y.impl === impl);
      if (!x) continue;
      out.push({
        label: rs.length > 1 ? `${implLabel(x)}, etcd ${r.meta.etcd}` : implLabel(x),
        color: color(impl, k, rs.length),
        ...bar(x),
      });
    }
  }
  return out;
}

export function contendedSvg(runs: Results | Results[]): string | undefined {
  const rs = (Array.isArray(runs) ? runs : [runs]).filter((r) => r.contended && r.contended.length > 0);
  if (rs.length === 0) return undefined;
  return renderPanels(`Contended lock: ${rs[0]!.meta.contenders} contenders, empty critical section`, caption(rs), [
    {
      title: 'Acquisitions per second (higher is better)',
      bars: bars(
        rs,
        (r) => r.contended,
        (x) => ({ value: x.acquisitionsPerSec, text: `${num(x.acquisitionsPerSec)}/s` }),
      ),
    },
    {
      title: 'Wait for the lock, ms: bar p50, whisker p99 (lower is better)',
      bars: bars(
        rs,
        (r) => r.contended,
        (x) => ({ value: x.wait.p50, whisker: x.wait.p99, text: `p50 ${ms(x.wait.p50)}, p99 ${ms(x.wait.p99)}` }),
      ),
    },
  ]);
}

export function electionSvg(runs: Results | Results[]): string | undefined {
  const rs = (Array.isArray(runs) ? runs : [runs]).filter((r) => r.election && r.election.length > 0);
  if (rs.length === 0) return undefined;
  const boundOf = (f: Results['electionFloor']): number | undefined => (f ? f.put.p50 + f.watchNotify.p50 + f.get.p50 : undefined);
  const panel = (queued: 'long-before' | '5ms-before', title: string): Panel => {
    const p: Panel = {
      title,
      bars: bars(
        rs,
        (r) => r.election?.filter((x) => x.queued === queued),
        (x) => ({ value: x.handover.p50, whisker: x.handover.p99, text: `p50 ${ms(x.handover.p50)}, p99 ${ms(x.handover.p99)} ms` }),
      ),
    };
    // The goal's bound, from the first run (with several versions the caption names it).
    const r = rs[0]!;
    // Back to back for both cases, as the speed goal states it.
    const bound = boundOf(r.electionFloor);
    if (bound !== undefined) {
      const on = rs.length > 1 ? ` on etcd ${r.meta.etcd}` : '';
      p.bound = { value: bound, text: `goal: put + notification + read, back to back${on} = ${ms(bound)} ms` };
    }
    return p;
  };
  return renderPanels("Election handover: leader's resign() to the next campaign() resolving", caption(rs), [
    panel('long-before', 'Follower queued long before (250 ms), ms: bar p50, whisker p99'),
    panel('5ms-before', 'Follower queued 5 ms before the resign, ms: bar p50, whisker p99'),
  ]);
}
