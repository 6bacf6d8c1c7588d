// Real round-trip times (issue 31, item 1): the uncontended, contended and election phases on a
// 3-member cluster whose every path, client to member and member to member, goes through a
// delaying proxy (bench/rtt-net.ts), at each RTT asked for; ours, etcd's Go package and etcd3 side
// by side. Each result is also given in RTTs and against the physical floor of a hand-over: one
// RTT plus one commit, measured here as a Delete's watch notification (the release reaches the
// member, commits, and the event comes back).
import { loadavg } from 'node:os';
import { Client } from '../dist/index.js';
import { runContended, type ContendedResult, type LockImpl } from './contended.js';
import type { BenchContext } from './context.js';
import { runElection, type ElectionImpl, type ElectionPhase } from './election.js';
import { watchNotification } from './floor.js';
import { startDelayedCluster } from './rtt-net.js';
import type { Check, Goal } from './results.js';
import { markdownTable, ms, num, summarize, table, type Summary } from './stats.js';
import { runUncontended, type UncontendedResult } from './uncontended.js';

/** What one RTT's network costs, measured by one client through its proxy. */
export interface RttNet {
  /** Serializable Gets: one client round trip (the member answers from its own store). */
  rtt: Summary;
  /** Sequential Puts: one round trip plus one commit. */
  put: Summary;
  /** Linearizable Gets (etcd's ReadIndex: the member confirms with the leader, and the leader with a quorum). */
  get: Summary;
  /** A Delete until a watch (created before it) delivers it: the floor of a hand-over, one RTT + one commit. */
  notify: Summary;
  /**
   * Whether the member our clients talk to first (ours stay on their first endpoint, their writes
   * and linearizable reads go to the leader; the bench puts a follower first for the uncontended
   * phase and spreads the contenders) was the Raft leader. Go's client spreads its requests over
   * all members, round robin.
   */
  firstIsLeader?: boolean;
}

export interface RttRun {
  /** The RTT set on every path. */
  rttMs: number;
  etcd: string;
  net?: RttNet;
  uncontended?: UncontendedResult;
  contended?: ContendedResult[];
  election?: ElectionPhase;
  load: { start: number[]; end?: number[] };
  errors: { phase: string; message: string }[];
}

/** Runs the phases at each RTT in `rtts` on a fresh delayed cluster of `version`. */
export async function runRtt(base: BenchContext, rtts: number[], version: string | undefined, withGo: boolean): Promise<RttRun[]> {
  const out: RttRun[] = [];
  for (const rttMs of rtts) {
    base.log(`rtt ${rttMs} ms: starting a 3-member etcd${version ? ` ${version}` : ''} behind delaying proxies`);
    const cluster = await startDelayedCluster(rttMs, version);
    const run: RttRun = { rttMs, etcd: cluster.version, load: { start: loadavg() }, errors: [] };
    out.push(run);
    const ctx: BenchContext = {
      ...base,
      // A follower first: the uncontended client (ours and Go's) starts there, as a client often does.
      endpoints: await followerFirst(cluster.endpoints),
      etcd: cluster.version,
      members: 3,
      prefix: `${base.prefix}rtt${rttMs}/`,
    };
    const step = async (name: string, fn: () => Promise<void>): Promise<void> => {
      ctx.log(`rtt ${rttMs} ms (etcd ${cluster.version}): ${name}...`);
      try {
        await fn();
      } catch (err) {
        ctx.log(`rtt ${rttMs} ms: ${name} FAILED: ${(err as Error).stack ?? err}`);
        run.errors.push({ phase: `rtt${rttMs}/${name}`, message: (err as Error).message ?? String(err) });
      }
    };
    try {
      await step('network', async () => void (run.net = await measureNet(ctx)));
      await step('uncontended', async () => void (run.uncontended = await runUncontended(ctx)));
      const impls: (LockImpl & ElectionImpl)[] = withGo ? ['ours', 'go', 'etcd3'] : ['ours', 'etcd3'];
      await step('contended', async () => void (run.contended = (await runContended([ctx], impls))[0]));
      await step('election', async () => void (run.election = (await runElection([ctx], impls))[0]));
    } finally {
      run.load.end = loadavg();
      await cluster.stop();
    }
  }
  return out;
}

/** The endpoints rotated so that the first is a follower (the leader's successor), as the cluster reports it. */
async function followerFirst(endpoints: string[]): Promise<string[]> {
  const client = new Client({ endpoints });
  try {
    const ids = await Promise.all(endpoints.map(async (ep) => (await client.status({ endpoint: ep })).header.memberId));
    const leader = ids.indexOf((await client.status()).leader);
    const first = leader < 0 ? 0 : (leader + 1) % endpoints.length;
    return endpoints.map((_, i) => endpoints[(first + i) % endpoints.length]!);
  } finally {
    await client.close();
  }
}

async function measureNet(ctx: BenchContext): Promise<RttNet> {
  const n = ctx.quick ? 5 : 30;
  const client = new Client({ endpoints: ctx.endpoints });
  const key = `${ctx.prefix}net`;
  try {
    await client.put(key, 'v'); // connected, warm
    const time = async (fn: () => Promise<unknown>, count = n): Promise<Summary> => {
      const s: number[] = [];
      for (let i = 0; i < count; i++) {
        const t = performance.now();
        await fn();
        s.push(performance.now() - t);
      }
      return summarize(s);
    };
    const rtt = await time(() => client.range({ key: Buffer.from(key), serializable: true }));
    const put = await time(() => client.put(key, 'v'));
    const get = await time(() => client.get(key));
    const notify: number[] = [];
    for (let i = 0; i < Math.ceil(n / 2); i++) notify.push((await watchNotification(client, key, 'now')).notify);
    const st = await client.status();
    const firstIsLeader = st.leader === st.header.memberId;
    ctx.log(
      `rtt: the first endpoint is ${firstIsLeader ? '' : 'not '}the leader; round trip ${ms(rtt.p50)} ms, put ${ms(put.p50)}, linearizable get ${ms(get.p50)}, delete -> event ${ms(summarize(notify).p50)} (p50)`,
    );
    return { rtt, put, get, notify: summarize(notify), firstIsLeader };
  } finally {
    await client.delete(key).catch(() => {});
    await client.close();
  }
}

const find = <T extends { impl: string }>(xs: T[] | undefined, impl: string): T | undefined => xs?.find((x) => x.impl === impl);

/** The figures the goals are judged on, for one run. */
function figures(r: RttRun) {
  const c = (impl: string) => find(r.contended, impl);
  const e = (impl: string) => r.election?.results.find((x) => x.impl === impl && x.queued === 'long-before');
  return {
    contended: { ours: c('ours')?.acquisitionsPerSec, go: c('go')?.acquisitionsPerSec },
    election: { ours: e('ours')?.handover.p50, go: e('go')?.handover.p50 },
    uncontended: { ours: r.uncontended?.ours.cyclesPerSec, go: r.uncontended?.go?.cyclesPerSec },
  };
}

const x = (a: number, b: number): string => `${(a / b).toFixed(2)}x`;

/** Issue 31's goals at each RTT, judged against Go's package in the same run. */
export function judgeRtt(runs: RttRun[] | undefined): Goal[] {
  const goals: Goal[] = [];
  for (const r of runs ?? []) {
    const f = figures(r);
    const at = `${r.rttMs} ms RTT`; // the run names the version (side by side, one column each)
    if (f.contended.ours !== undefined && f.contended.go !== undefined) {
      goals.push({
        id: `rtt${r.rttMs}-contended`,
        goal: `${at}: contended >= 1.3x Go's package (acquisitions/s)`,
        measured: `${num(f.contended.ours, 1)} vs ${num(f.contended.go, 1)} /s = ${x(f.contended.ours, f.contended.go)}`,
        met: f.contended.ours >= 1.3 * f.contended.go,
      });
    }
    if (f.election.ours !== undefined && f.election.go !== undefined) {
      goals.push({
        id: `rtt${r.rttMs}-election`,
        goal: `${at}: election hand-over, follower queued long before, no slower than Go's (p50)`,
        measured: `${ms(f.election.ours)} vs ${ms(f.election.go)} ms (${f.election.ours <= f.election.go ? '' : '+'}${ms(f.election.ours - f.election.go)})`,
        met: f.election.ours <= f.election.go,
      });
    }
    if (f.uncontended.ours !== undefined && f.uncontended.go !== undefined) {
      goals.push({
        id: `rtt${r.rttMs}-uncontended`,
        goal: `${at}: uncontended >= 0.95x Go's package (cycles/s)`,
        measured: `${num(f.uncontended.ours, 1)} vs ${num(f.uncontended.go, 1)} /s = ${x(f.uncontended.ours, f.uncontended.go)}`,
        met: f.uncontended.ours >= 0.95 * f.uncontended.go,
      });
    }
  }
  return goals;
}

/** Correctness at each RTT: mutual exclusion, one leader at a time, nothing left, and every step ran. */
export function rttChecks(runs: RttRun[] | undefined): Check[] {
  const checks: Check[] = [];
  for (const r of runs ?? []) {
    const at = `rtt${r.rttMs}`;
    for (const c of r.contended ?? []) {
      checks.push({
        phase: `${at}/contended/${c.impl}`,
        what: 'mutual exclusion',
        ok: c.mutualExclusion && c.acquisitions > 0,
        detail: `${c.violations} violations, ${c.acquisitions} acquisitions`,
      });
      checks.push({ phase: `${at}/contended/${c.impl}`, what: 'no keys left', ok: c.keysLeft === 0, detail: `${c.keysLeft} keys left` });
    }
    for (const e of r.election?.results ?? []) {
      checks.push({
        phase: `${at}/election/${e.impl}/${e.queued}`,
        what: 'one leader at a time',
        ok: e.violations === 0 && e.handover.n > 0,
        detail: `${e.violations} early leaders in ${e.handover.n} rounds`,
      });
      checks.push({
        phase: `${at}/election/${e.impl}/${e.queued}`,
        what: 'no keys left',
        ok: e.keysLeft === 0,
        detail: `${e.keysLeft} keys left`,
      });
    }
    checks.push({
      phase: at,
      what: 'every step ran',
      ok: r.errors.length === 0 && !!r.net && !!r.uncontended && !!r.contended && !!r.election,
      detail: r.errors.map((e) => `${e.phase}: ${e.message}`).join('; ') || 'ok',
    });
  }
  return checks;
}

const LABEL: Record<string, string> = { ours: 'ours', go: "Go's package", etcd3: 'etcd3' };

/** The tables of each RTT: the network, then every result in ms, in RTTs and against the hand-over floor. */
export function renderRtt(runs: RttRun[], markdown: boolean): string {
  const out: string[] = [];
  const render = (title: string, header: string[], rows: string[][]): void => {
    out.push(markdown ? `\n#### ${title}\n\n${markdownTable(header, rows)}` : `\n${title}\n${table(header, rows)}`);
  };
  for (const r of runs) {
    const n = r.net;
    const load = `load average ${r.load.start.map((v) => v.toFixed(2)).join(' ')} at start, ${r.load.end?.map((v) => v.toFixed(2)).join(' ') ?? '?'} at end`;
    const rtt = n?.rtt.p50 ?? NaN;
    const floor = n?.notify.p50 ?? NaN;
    const commit = (n?.put.p50 ?? NaN) - rtt;
    const inRtt = (v: number): string => (Number.isFinite(v / rtt) ? (v / rtt).toFixed(1) : '-');
    const inFloor = (v: number): string => (Number.isFinite(v / floor) ? `${(v / floor).toFixed(2)}x` : '-');
    render(
      `Real round-trip times: ${r.rttMs} ms RTT on every path, 3 members of etcd ${r.etcd} (${load})`,
      ['network (p50 ms)', 'ms', 'RTTs'],
      [
        ['one round trip (serializable Get through the proxy)', ms(rtt), '1.0'],
        ['sequential Put (1 RTT + 1 commit)', ms(n?.put.p50 ?? NaN), inRtt(n?.put.p50 ?? NaN)],
        ['one commit (Put - round trip)', ms(commit), inRtt(commit)],
        ['linearizable Get', ms(n?.get.p50 ?? NaN), inRtt(n?.get.p50 ?? NaN)],
        ['hand-over floor: Delete -> watch event (1 RTT + 1 commit)', ms(floor), inRtt(floor)],
        [
          `(the first endpoint, where the uncontended phase's client of ours is, ${n?.firstIsLeader ? 'was' : 'was not'} the leader)`,
          '',
          '',
        ],
      ],
    );
    const rows: string[][] = [];
    const u = r.uncontended;
    if (u) {
      for (const [impl, c] of [
        ['ours', u.ours],
        ['go', u.go],
        ['etcd3', u.etcd3],
      ] as const) {
        if (!c) continue;
        const cyc = 1000 / c.cyclesPerSec;
        rows.push([
          'uncontended lock + unlock',
          LABEL[impl]!,
          `${num(c.cyclesPerSec, 1)} cycles/s`,
          ms(cyc),
          inRtt(cyc),
          `${inFloor(cyc / 2)} (per half)`,
          impl === 'go' || !u.go ? '' : x(c.cyclesPerSec, u.go.cyclesPerSec),
        ]);
      }
    }
    const go = find(r.contended, 'go');
    for (const c of r.contended ?? []) {
      const per = 1000 / c.acquisitionsPerSec;
      rows.push([
        `contended, ${c.contenders} contenders: time per acquisition`,
        LABEL[c.impl]!,
        `${num(c.acquisitionsPerSec, 1)} acq/s`,
        ms(per),
        inRtt(per),
        inFloor(per),
        c.impl === 'go' || !go ? '' : x(c.acquisitionsPerSec, go.acquisitionsPerSec),
      ]);
    }
    for (const queued of ['long-before', '5ms-before'] as const) {
      const g = r.election?.results.find((e) => e.impl === 'go' && e.queued === queued);
      for (const e of r.election?.results.filter((e) => e.queued === queued) ?? []) {
        const p = e.handover.p50;
        rows.push([
          `election hand-over, follower queued ${queued === 'long-before' ? 'long before' : '5 ms before'} (p50; p99 ${ms(e.handover.p99)})`,
          LABEL[e.impl]!,
          '',
          ms(p),
          inRtt(p),
          inFloor(p),
          e.impl === 'go' || !g ? '' : `${p <= g.handover.p50 ? '' : '+'}${ms(p - g.handover.p50)} ms`,
        ]);
      }
    }
    render(
      `Results at ${r.rttMs} ms RTT (etcd ${r.etcd}): each in ms, in RTTs, and against the hand-over floor (1 RTT + 1 commit)`,
      ['phase', 'implementation', 'rate', 'ms', 'RTTs', '÷ floor', 'vs Go'],
      rows,
    );
    const q = find(r.contended, 'ours')?.requests;
    if (q)
      out.push(
        `${markdown ? '\n' : ''}ours, contended: ${q.perAcquisition.toFixed(2)} requests per acquisition (${Object.entries(q.byMethod)
          .map(([m, v]) => `${m} ${v.toFixed(2)}`)
          .join(', ')}, watch creates ${q.watchCreates.toFixed(2)}).`,
      );
  }
  return out.join('\n');
}
