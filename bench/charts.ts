// Hand-rolled SVG bar charts of the contended and election figures (no dependency).
import type { Results } from './results.js';
import { ms, num } from './stats.js';

const COLORS: Record<string, string> = { ours: '#2b6cb0', reference: '#a0aec0', etcd3: '#dd6b20' };
const LABELS: Record<string, string> = { ours: 'ours', reference: 'reference (Go algorithm)', etcd3: 'etcd3 1.1.2' };

interface Bar {
  label: string;
  value: number;
  color: string;
  /** A thin mark further right (p99), drawn as a whisker. */
  whisker?: number;
  text: string;
}

interface Panel {
  title: string;
  bars: Bar[];
  /** A vertical dashed reference line with its caption. */
  bound?: { value: number; text: string };
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function renderPanels(title: string, subtitle: string, panels: Panel[]): string {
  const width = 760;
  const labelW = 200;
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
      parts.push(`<line x1="${bx}" y1="${top - 4}" x2="${bx}" y2="${y - gap + 4}" stroke="#c53030" stroke-width="1.5" stroke-dasharray="5,3"/>`);
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

function caption(r: Results): string {
  const m = r.meta;
  return `etcd ${m.etcd}, ${m.members} member${m.members > 1 ? 's' : ''}, fsync on; node ${m.node}; ${m.nproc} cores (${m.cpu}); ${m.date.slice(0, 10)}`;
}

export function contendedSvg(r: Results): string | undefined {
  const c = r.contended;
  if (!c || c.length === 0) return undefined;
  return renderPanels(`Contended lock: ${r.meta.contenders} contenders, empty critical section`, caption(r), [
    {
      title: 'Acquisitions per second (higher is better)',
      bars: c.map((x) => ({ label: LABELS[x.impl]!, value: x.acquisitionsPerSec, color: COLORS[x.impl]!, text: `${num(x.acquisitionsPerSec)}/s` })),
    },
    {
      title: 'Wait for the lock, ms: bar p50, whisker p99 (lower is better)',
      bars: c.map((x) => ({
        label: LABELS[x.impl]!,
        value: x.wait.p50,
        whisker: x.wait.p99,
        color: COLORS[x.impl]!,
        text: `p50 ${ms(x.wait.p50)}, p99 ${ms(x.wait.p99)}`,
      })),
    },
  ]);
}

export function electionSvg(r: Results): string | undefined {
  const e = r.election;
  if (!e || e.length === 0) return undefined;
  const boundOf = (f: Results['electionFloor']): number | undefined => (f ? f.put.p50 + f.watchNotify.p50 + f.get.p50 : undefined);
  const panel = (queued: 'long-before' | '5ms-before', title: string): Panel => {
    const cold = queued === 'long-before' && r.electionColdFloor !== undefined;
    const bound = boundOf(cold ? r.electionColdFloor : r.electionFloor);
    const p: Panel = {
      title,
      bars: e
        .filter((x) => x.queued === queued)
        .map((x) => ({
          label: LABELS[x.impl]!,
          value: x.handover.p50,
          whisker: x.handover.p99,
          color: COLORS[x.impl]!,
          text: `p50 ${ms(x.handover.p50)}, p99 ${ms(x.handover.p99)} ms`,
        })),
    };
    if (bound !== undefined) {
      p.bound = { value: bound, text: `goal: put + notification + read${cold ? ' (each after 250 ms idle)' : ''} = ${ms(bound)} ms` };
    }
    return p;
  };
  return renderPanels("Election handover: leader's resign() to the next campaign() resolving", caption(r), [
    panel('long-before', 'Follower queued long before (250 ms), ms: bar p50, whisker p99'),
    panel('5ms-before', 'Follower queued 5 ms before the resign, ms: bar p50, whisker p99'),
  ]);
}
