// One seed on two sides: the same sequence run on each (one after the other: a simulator owns the
// process's clock while it runs), the transcripts compared, and where they part.
import { generate } from './generate.js';
import { runSequence, type Entry } from './run.js';
import type { SideFactory } from './sides.js';
import type { Step } from './steps.js';

/** Steps per sequence unless asked otherwise. */
export const DEFAULT_STEPS = 40;

export interface SeedResult {
  seed: number;
  steps: Step[];
  names: [string, string];
  transcripts: [Entry[], Entry[]];
  divergence?: Divergence;
}

/** Runs `seed`'s sequence on a fresh side of each factory and compares the transcripts. */
export async function diffSeed(seed: number, sides: readonly [SideFactory, SideFactory], steps = DEFAULT_STEPS): Promise<SeedResult> {
  const sequence = generate(seed, steps);
  const names: string[] = [];
  const transcripts: Entry[][] = [];
  for (const make of sides) {
    const side = await make(seed);
    try {
      names.push(side.name);
      transcripts.push(await side.run((client) => runSequence(client, sequence)));
    } finally {
      await side.close();
    }
  }
  const result: SeedResult = { seed, steps: sequence, names: [names[0]!, names[1]!], transcripts: [transcripts[0]!, transcripts[1]!] };
  const divergence = firstDivergence(result.transcripts[0], result.transcripts[1]);
  if (divergence) result.divergence = divergence;
  return result;
}

/** Where two transcripts first differ: the index, and each side's entry there (undefined past its end). */
export interface Divergence {
  index: number;
  a?: Entry;
  b?: Entry;
}

/** The first entry at which `a` and `b` differ, if any. */
export function firstDivergence(a: readonly Entry[], b: readonly Entry[]): Divergence | undefined {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if (JSON.stringify(a[i]) !== JSON.stringify(b[i])) return { index: i, a: a[i], b: b[i] };
  }
  return undefined;
}

/** The command that runs `seed` again on the same two sides (`against`: sim, or etcd-<version>). */
export function replayCommand(seed: number, etcd: string, against = 'sim', steps = DEFAULT_STEPS): string {
  return `npm run sim:diff -- --seed ${seed} --etcd ${etcd}${against === 'sim' ? '' : ` --against ${against}`}${steps === DEFAULT_STEPS ? '' : ` --steps ${steps}`}`;
}

/** A divergence as a report: the seed, the step and call, both answers, and the command that replays it. */
export function describeDivergence(seed: number, d: Divergence, names: readonly [string, string], replay: string): string {
  const at = d.a ?? d.b!;
  const lines = [
    `seed ${seed}: ${names[0]} and ${names[1]} differ at step ${at.step}, transcript entry ${d.index}`,
    `  call: ${JSON.stringify(at.call)}`,
  ];
  if (d.a && d.b && JSON.stringify(d.a.call) !== JSON.stringify(d.b.call)) lines.push(`  call on ${names[1]}: ${JSON.stringify(d.b.call)}`);
  lines.push(`  ${names[0]}: ${d.a ? JSON.stringify(d.a.answer) : '(transcript ended)'}`);
  lines.push(`  ${names[1]}: ${d.b ? JSON.stringify(d.b.answer) : '(transcript ended)'}`);
  lines.push(`  replay: ${replay}`);
  return lines.join('\n');
}
