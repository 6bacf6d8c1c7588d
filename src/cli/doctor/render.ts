// doctor's report as text: a member table, one line per check (and its fix), a verdict.
import { table } from '../output.js';
import { bytes } from './numbers.js';
import type { DoctorReport, Level, MemberReport } from './report.js';

function memberState(m: MemberReport): string {
  if (m.error !== null) return m.error;
  if (m.statusRefused) return m.hasLeader ? 'has a leader (Status refused: needs the root role)' : 'no leader';
  const role = m.leader === '0' ? 'no leader' : m.isLeader ? 'leader' : m.isLearner ? 'learner' : 'follower';
  return m.alarms.length > 0 ? `${role}, alarm: ${m.alarms.join(', ')}` : role;
}

export function render(r: DoctorReport): string[] {
  const lines: string[] = [];
  const source = r.memberSource === 'endpoints' ? ' (from --endpoints; MemberList unavailable)' : '';
  lines.push(
    `etcd-concurrency doctor: ${r.members.length} member${r.members.length === 1 ? '' : 's'}${source}, scratch keys under ${r.prefix}`,
  );
  lines.push(
    ...table([
      ['MEMBER', 'ID', 'ENDPOINT', 'VERSION', 'TERM', 'DB', 'STATE'],
      ...r.members.map((m) => [
        m.name ?? '-',
        m.id ?? '-',
        m.endpoint,
        m.version ?? '-',
        m.raftTerm?.toString() ?? '-',
        m.dbSize === null ? '-' : bytes(m.dbSize),
        memberState(m),
      ]),
    ]).map((l) => `  ${l}`),
  );
  lines.push('');
  const width = Math.max(...r.checks.map((c) => c.name.length));
  for (const c of r.checks) {
    lines.push(`${c.level.padEnd(4)}  ${c.name.padEnd(width)}  ${c.message}`);
    if (c.fix) lines.push(`${' '.repeat(6 + width)}  fix: ${c.fix}`);
  }
  const count = (level: Level): number => r.checks.filter((c) => c.level === level).length;
  const plural = (n: number, w: string): string => `${n} ${w}${n === 1 ? '' : 's'}`;
  lines.push('');
  lines.push(
    r.status === 'ready'
      ? 'ready (exit 0)'
      : r.status === 'warnings'
        ? `ready, with ${plural(count('warn'), 'warning')} (exit ${r.exitCode})`
        : `not ready: ${plural(count('fail'), 'failed check')}${count('warn') > 0 ? `, ${plural(count('warn'), 'warning')}` : ''} (exit ${r.exitCode})`,
  );
  return lines;
}
