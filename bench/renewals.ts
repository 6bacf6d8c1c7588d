// Lease renewals: the client CPU per renewal of 1,000 sessions at TTL 60 against etcd's Go package
// with the same sessions, and the CPU per second of 1,000 sessions with no renewal due. Each is a
// process of its own (bench/renew-cpu.ts) on this version's etcd: ours after three minutes of
// warm-up (a slot's code runs every 2 s at TTL 60 and reaches TurboFan late; a service's sessions
// live for hours), Go's after one second (compiled ahead of time).
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchContext } from './context.js';
import type { Measured } from './renew-cpu.js';
import { fixed } from './stats.js';

export interface RenewalsResult {
  sessions: number;
  ttl: number;
  /** Ours, the sessions made over one renewal interval (their renewals spread over the grid's slots). */
  ours: Measured;
  /** etcd's Go package: the same sessions on one clientv3 client (made at once, as its bench makes them). */
  go?: Measured;
  /** Ours, the sessions made at once, a window between two rounds of renewals. */
  idle: Measured;
}

const SCRIPT = fileURLToPath(new URL('./renew-cpu.ts', import.meta.url));

export async function runRenewals(ctx: BenchContext): Promise<RenewalsResult> {
  // --quick (a sanity run): TTL 6, so that renewals come every 2 s; the windows fit between them.
  const [sessions, ttl] = ctx.quick ? [100, 6] : [1000, 60];
  const dir = await mkdtemp(join(tmpdir(), 'bench-renewals-'));
  try {
    const common = ['--endpoints', ctx.endpoints.join(','), '--sessions', String(sessions), '--ttl', String(ttl), '--rounds', '1'];
    ctx.log(`renewals: ${sessions} sessions at TTL ${ttl}, ours${ctx.go ? ' and Go' : ''}`);
    const spreadArgs = ctx.quick ? ['--warmup', '3', '--seconds', '3'] : ['--seconds', '30'];
    const spread = await run(ctx, [...common, ...spreadArgs, ...(ctx.go ? ['--go'] : [])], dir, 'spread');
    ctx.log('renewals: idle sessions');
    const idleArgs = ctx.quick ? ['--warmup', '3', '--seconds', '0.5'] : ['--warmup', '45', '--seconds', '10'];
    const idle = await run(ctx, [...common, '--idle', ...idleArgs], dir, 'idle');
    const [ours, go] = [spread.get('ours')!, spread.get('go')];
    const r: RenewalsResult = { sessions, ttl, ours, ...(go ? { go } : {}), idle: idle.get('ours')! };
    ctx.log(
      `renewals: ours ${fixed(ours.usPerRenewal)} µs${go ? `, Go ${fixed(go.usPerRenewal)} µs` : ''} per renewal; idle ${fixed(idleMsPerSec(r.idle))} ms/s`,
    );
    return r;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** One renew-cpu run: its windows by implementation (`ours`, `go`). */
async function run(ctx: BenchContext, args: string[], dir: string, name: string): Promise<Map<string, Measured>> {
  const out = join(dir, `${name}.json`);
  await new Promise<void>((ok, fail) => {
    const p = spawn(process.execPath, ['--import', 'tsx', SCRIPT, ...args, '--json', out], { stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    p.stdout.on('data', (d: Buffer) => {
      for (const line of d.toString().split('\n')) if (line.startsWith('round ')) ctx.log(`renewals: ${line}`);
      log += d;
    });
    p.stderr.on('data', (d: Buffer) => (log += d));
    p.on('error', fail);
    p.on('exit', (code) => (code === 0 ? ok() : fail(new Error(`renew-cpu exited ${code}: ${log.slice(-2000)}`))));
  });
  const byLib = JSON.parse(await readFile(out, 'utf8')) as Record<string, Measured[]>;
  const m = new Map<string, Measured>();
  for (const [lib, windows] of Object.entries(byLib)) m.set(lib.startsWith('go') ? 'go' : 'ours', windows[0]!);
  return m;
}

/** A window's CPU per wall-clock second, in ms. */
export function idleMsPerSec(m: Measured): number {
  return (m.cpuMs * 1000) / m.wallMs;
}

export function renewalsGoals(r: RenewalsResult): { id: string; goal: string; measured: string; met: boolean }[] {
  const goals = [];
  if (r.go) {
    const x = r.ours.usPerRenewal / r.go.usPerRenewal;
    goals.push({
      id: 'renewal-cpu-vs-go',
      goal: `CPU per renewal, ${r.sessions} sessions at TTL ${r.ttl}: <= 3x Go's package with the same sessions`,
      measured: `${fixed(r.ours.usPerRenewal)} vs ${fixed(r.go.usPerRenewal)} µs (${r.ours.renewals} and ${r.go.renewals} renewals in ${fixed(r.ours.wallMs / 1000)} s, net of each process's idle CPU): ${fixed(x)}x`,
      met: x <= 3,
    });
  }
  const idle = idleMsPerSec(r.idle);
  goals.push({
    id: 'renewal-idle',
    goal: `${r.sessions} idle sessions (TTL ${r.ttl}, a window with no renewal due): <= 1 ms of CPU per second`,
    measured: `${fixed(idle)} ms/s (${r.idle.renewals} renewals in the window; ${fixed(r.idle.idleCpuMsPerSec)} ms/s before any session existed)`,
    met: idle <= 1 && r.idle.renewals === 0,
  });
  return goals;
}

export function renewalsChecks(r: RenewalsResult): { phase: string; what: string; ok: boolean; detail: string }[] {
  const rows = [r.ours, r.idle, ...(r.go ? [r.go] : [])];
  return [
    {
      phase: 'renewals',
      what: 'no session lost',
      ok: rows.every((m) => m.lost === 0),
      detail: rows.map((m) => `${m.lost} lost`).join(', '),
    },
  ];
}
