// The chart of the section "Many locks, many sessions" (docs/performance.md): the independent-locks
// phase against its floor and Go's package, and how long sessions took to learn of an outage.
import { caption, color, renderPanels, type Bar, type Panel } from './charts.js';
import type { Results } from './results.js';
import { ms, num } from './stats.js';

export function scaleSvg(runs: Results[]): string | undefined {
  const rs = runs.filter((r) => r.locks || r.sessionsScale);
  if (rs.length === 0) return undefined;
  const several = rs.length > 1;
  const on = (r: Results): string => (several ? `, etcd ${r.meta.etcd}` : '');
  const panels: Panel[] = [];
  const withLocks = rs.filter((r) => r.locks);
  if (withLocks.length > 0) {
    const l0 = withLocks[0]!.locks!;
    const rate: Bar[] = [];
    const cpu: Bar[] = [];
    for (const [k, r] of withLocks.entries()) {
      const l = r.locks!;
      const bound = l.floor.perSec / l.ours.requestsPerCycle;
      rate.push({
        label: `floor's bound${on(r)}`,
        value: bound,
        color: color('reference', k, withLocks.length),
        text: `${num(bound)}/s (goal: 80% = ${num(0.8 * bound)})`,
      });
      rate.push({
        label: `ours${on(r)}`,
        value: l.ours.perSec,
        color: color('ours', k, withLocks.length),
        text: `${num(l.ours.perSec)}/s, ${l.ours.requestsPerCycle.toFixed(2)} requests/cycle`,
      });
      if (l.go)
        rate.push({
          label: `Go${on(r)}`,
          value: l.go.perSec,
          color: color('go', k, withLocks.length),
          text: `${num(l.go.perSec)}/s, ${l.go.requestsPerCycle.toFixed(2)} requests/cycle`,
        });
      cpu.push({
        label: `ours${on(r)}`,
        value: l.ours.clientCpuUsPerCycle,
        color: color('ours', k, withLocks.length),
        text: `${num(l.ours.clientCpuUsPerCycle)} µs client, ${num(l.ours.etcdCpuUsPerCycle)} µs etcd`,
      });
      if (l.go)
        cpu.push({
          label: `Go${on(r)}`,
          value: l.go.clientCpuUsPerCycle,
          color: color('go', k, withLocks.length),
          text: `${num(l.go.clientCpuUsPerCycle)} µs client, ${num(l.go.etcdCpuUsPerCycle)} µs etcd`,
        });
    }
    panels.push({
      title: `Independent locks: cycles/s, ${num(l0.names)} names, ${l0.processes} processes x ${l0.sessionsPerProcess} sessions (higher is better)`,
      bars: rate,
    });
    panels.push({ title: 'Client CPU per lock cycle, µs, all processes (lower is better)', bars: cpu });
  }
  const withSessions = rs.filter((r) => r.sessionsScale);
  if (withSessions.length > 0) {
    const s0 = withSessions[0]!.sessionsScale!;
    const learned: Bar[] = [];
    for (const [k, r] of withSessions.entries()) {
      const s = r.sessionsScale!;
      const c = color('ours', k, withSessions.length);
      learned.push({
        label: `gone, after the kill${on(r)}`,
        value: s.learnedGone.p50,
        whisker: s.learnedGone.max,
        color: c,
        text: `p50 ${ms(s.learnedGone.p50)}, max ${ms(s.learnedGone.max)} ms`,
      });
      learned.push({
        label: `back, after the restart began${on(r)}`,
        value: s.learnedBack.p50,
        whisker: s.learnedBack.max,
        color: c,
        text: `p50 ${ms(s.learnedBack.p50)}, max ${ms(s.learnedBack.max)} ms (restart ${ms(s.restartMs)})`,
      });
    }
    panels.push({
      title: `${num(s0.sessions)} sessions over ${s0.processes} processes (TTL ${s0.ttl} s): when each learned etcd was gone / back, ms: bar p50, whisker max`,
      bars: learned,
    });
  }
  return renderPanels('Many locks, many sessions', caption(rs), panels);
}
