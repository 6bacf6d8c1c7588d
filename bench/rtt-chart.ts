// The chart of the round-trip phase (bench/rtt.ts): per RTT, contended acquisitions per second and
// the long-before election hand-over, ours, Go's package and etcd3, one bar per etcd version.
import { color, renderPanels, type Bar, type Panel } from './charts.js';
import type { Results } from './results.js';
import type { RttRun } from './rtt.js';
import { ms, num } from './stats.js';

const LABEL: Record<string, string> = { ours: 'ours', go: "Go's package", etcd3: 'etcd3' };

export function rttSvg(runs: Results[]): string | undefined {
  const rs = runs.filter((r) => r.rtt && r.rtt.length > 0);
  if (rs.length === 0) return undefined;
  const rtts = [...new Set(rs.flatMap((r) => r.rtt!.map((x) => x.rttMs)))];
  const panels: Panel[] = [];
  const each = (rtt: number, bar: (x: RttRun, impl: string) => Omit<Bar, 'label' | 'color'> | undefined): Bar[] => {
    const out: Bar[] = [];
    for (const impl of ['ours', 'go', 'etcd3']) {
      for (const [k, r] of rs.entries()) {
        const x = r.rtt!.find((y) => y.rttMs === rtt);
        const b = x && bar(x, impl);
        if (b) out.push({ label: `${LABEL[impl]}, etcd ${x.etcd}`, color: color(impl, k, rs.length), ...b });
      }
    }
    return out;
  };
  for (const rtt of rtts) {
    panels.push({
      title: `${rtt} ms RTT: contended, 8 contenders, acquisitions per second (higher is better)`,
      bars: each(rtt, (x, impl) => {
        const c = x.contended?.find((y) => y.impl === impl);
        return c && { value: c.acquisitionsPerSec, text: `${num(c.acquisitionsPerSec, 1)}/s (${ms(1000 / c.acquisitionsPerSec)} ms each)` };
      }),
    });
    const floor = rs[0]!.rtt!.find((y) => y.rttMs === rtt)?.net?.notify.p50;
    panels.push({
      title: `${rtt} ms RTT: election hand-over, follower queued long before, ms: bar p50, whisker p99`,
      bars: each(rtt, (x, impl) => {
        const e = x.election?.results.find((y) => y.impl === impl && y.queued === 'long-before');
        return e && { value: e.handover.p50, whisker: e.handover.p99, text: `p50 ${ms(e.handover.p50)}, p99 ${ms(e.handover.p99)}` };
      }),
      ...(floor !== undefined
        ? { bound: { value: floor, text: `floor: 1 RTT + 1 commit (a Delete's notification) = ${ms(floor)} ms` } }
        : {}),
    });
  }
  const m = rs[0]!.meta;
  return renderPanels(
    'Real round-trip times: 3 members, every path through a delaying proxy',
    `etcd ${rs.map((r) => r.meta.etcd).join(' and ')}; node ${m.node}; ${m.nproc} cores (${m.cpu}); ${m.date.slice(0, 10)}`,
    panels,
  );
}
