// `npm run sim:diff -- --seeds 500 --etcd 3.4`: the differential test by hand, over as many seeds as
// you like. Each seed's sequence runs on a fresh etcd of the version asked for and on the other
// side (the simulator with that version's profile, or another etcd), and the first difference of
// each seed that diverges is printed with the command that replays it. Exits 1 if any seed diverged.
//
//   --etcd V        the real etcd's version (3.4, 3.7, 3.7.3; default ETCD_VERSION, else 3.7)
//   --against X     sim (default: the simulator, profile V) or etcd-W (another real etcd, e.g. etcd-3.7)
//   --seeds N       how many seeds (default 100), from --from (default 1)
//   --seed S        just seed S
//   --steps N       calls per sequence (default 40)
//   --print         print both transcripts of every seed, one entry a line
import { parseArgs } from 'node:util';
import { DEFAULT_STEPS, describeDivergence, diffSeed, replayCommand, type SeedResult } from './diff.js';
import { etcdSide, PROFILES, simSide, type SideFactory } from './sides.js';

const { values } = parseArgs({
  options: {
    etcd: { type: 'string', default: process.env.ETCD_VERSION?.trim() || '3.7' },
    against: { type: 'string', default: 'sim' },
    seeds: { type: 'string', default: '100' },
    from: { type: 'string', default: '1' },
    seed: { type: 'string' },
    steps: { type: 'string', default: String(DEFAULT_STEPS) },
    print: { type: 'boolean', default: false },
  },
});

function whole(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`--${name} takes a whole number, not ${v}`);
  return n;
}

function other(against: string, version: string): SideFactory {
  if (against.startsWith('etcd-')) return etcdSide(against.slice('etcd-'.length));
  if (against !== 'sim') throw new Error(`--against takes sim or etcd-<version>, not ${against}`);
  const line = version.split('.').slice(0, 2).join('.');
  const profile = PROFILES.find((p) => p === line);
  if (!profile) throw new Error(`the simulator has no profile for etcd ${line} (it has ${PROFILES.join(', ')})`);
  return simSide(profile);
}

const steps = whole('steps', values.steps);
const seeds =
  values.seed !== undefined
    ? [whole('seed', values.seed)]
    : Array.from({ length: whole('seeds', values.seeds) }, (_, i) => whole('from', values.from) + i);
const sides = [etcdSide(values.etcd), other(values.against, values.etcd)] as const;
const replay = (seed: number): string => replayCommand(seed, values.etcd, values.against, steps);

const diverged: number[] = [];
const started = performance.now();
for (const seed of seeds) {
  let r: SeedResult;
  try {
    r = await diffSeed(seed, sides, steps);
  } catch (err) {
    diverged.push(seed);
    console.log(
      `seed ${seed}: the run failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n  replay: ${replay(seed)}`,
    );
    continue;
  }
  if (values.print) {
    for (const [i, t] of r.transcripts.entries()) {
      console.log(`--- seed ${seed} on ${r.names[i]}`);
      for (const e of t) console.log(JSON.stringify(e));
    }
  }
  if (r.divergence) {
    diverged.push(seed);
    console.log(describeDivergence(seed, r.divergence, r.names, replay(seed)));
  }
}
const secs = ((performance.now() - started) / 1000).toFixed(1);
console.log(
  diverged.length === 0
    ? `${seeds.length} seed(s), ${steps} calls each: no difference (${secs} s)`
    : `${diverged.length} of ${seeds.length} seed(s) diverged or failed (${secs} s): ${diverged.join(' ')}`,
);
process.exitCode = diverged.length === 0 ? 0 : 1;
