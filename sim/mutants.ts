// Proof that the simulator catches what matters (issue 37, item 8): each mutant below breaks one
// guarantee of the library, or reverts one fix, in a copy of the repository; the simulator, run on
// that copy with the default workload and profile, must fail within 2,000 seeds. test/sim-mutants.test.ts
// runs them all; by hand:
//   npm run sim:mutants                          every mutant: the first seed that catches it
//   npm run sim:mutants -- NAME [NAME...]        some of them
//   npm run sim:mutants -- --list                their names and what each breaks
//   common: --seeds N (default 2000)  --from F  --jobs J (default 2: mutants hunted at once)  --keep (leave the copy, to replay a seed there with
//   `npm run sim -- --seed S --verbose` from inside it)
// A mutant whose search text is no longer in its file fails loudly: the code moved, update the mutant.
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { HuntResult } from './hunt.js';

/** One textual change: `search` must occur exactly once in `file` (a path from the repository's root). */
export interface Edit {
  readonly file: string;
  readonly search: string;
  readonly replace: string;
}

export interface Mutant {
  readonly name: string;
  /** What it breaks; for a reverted fix, the commit and issue item. */
  readonly breaks: string;
  readonly edits: readonly Edit[];
  /** The profile it is hunted on (default flags otherwise); 3.7 unless said. */
  readonly profile?: '3.4' | '3.7';
  /** Not caught yet within 2,000 seeds: what the workload or oracle still lacks (the test skips it as a todo). */
  readonly open?: string;
}

const NEVER_WAITS = 'rule: () => ({ blocker: async () => null }),';

export const MUTANTS: readonly Mutant[] = [
  {
    name: 'mutex-never-waits',
    breaks: 'a Mutex waiter never waits: its turn rule says "go" at once',
    edits: [
      {
        file: 'src/primitives/mutex.ts',
        search: 'return oldestRule(this.session, participantScope(this.name), ticket, lost, { marks: true });',
        replace: 'return { blocker: async () => null };',
      },
    ],
  },
  {
    name: 'election-never-waits',
    breaks: 'an Election candidate never waits: its turn rule says "go" at once',
    edits: [
      {
        file: 'src/primitives/election.ts',
        search: 'rule: (ticket, lost) => oldestRule(session, participantScope(name), ticket, lost),',
        replace: NEVER_WAITS,
      },
    ],
  },
  {
    name: 'semaphore-never-waits',
    breaks: 'a Semaphore waiter never waits: its turn rule says "go" at once',
    edits: [
      {
        file: 'src/primitives/semaphore.ts',
        search: 'rule: (t, lost) => permitRule(session, name, permits, value, t, lost),',
        replace: NEVER_WAITS,
      },
    ],
  },
  {
    name: 'readers-skip-writers',
    breaks: 'an RWMutex reader does not wait for older writers',
    edits: [
      {
        file: 'src/primitives/rwmutex.ts',
        search: '? { prefix: writers, isCandidate: (key) => isParticipantKey(writers, key) }',
        replace: '? { prefix: writers, isCandidate: () => false }',
      },
    ],
  },
  {
    name: 'loss-signal-late',
    breaks: "the session's loss signal (and assertHeld's deadline) 1.5 s later than its safety margin allows",
    edits: [
      {
        file: 'src/session.ts',
        search: 'return this.provenUntil - this.marginMs();',
        replace: 'return this.provenUntil - this.marginMs() + 1500;',
      },
    ],
  },
  {
    name: 'holder-ignores-deletion',
    breaks: "a holder's key watch ignores the key's deletion (the batched re-check is left)",
    edits: [
      {
        file: 'src/queue/ownership.ts',
        search: "if (e.type === 'delete') return this.keyGone();",
        replace: "if (e.type === 'delete') continue;",
      },
    ],
  },
  {
    name: 'turn-without-own-key',
    breaks:
      'a waiter holds without confirming its own key once every older key went: the look-up (and the take-over behind a marked head) without the ourKeyStands compares (the ghost grant fixed in 558c94f)',
    edits: [
      {
        file: 'src/queue/oldest.ts',
        search: '{ compare: ourKeyStands(session, ticket), success: [op.range(before(8n)), ...counted], failure: [] },',
        replace: '{ compare: [], success: [op.range(before(8n)), ...counted], failure: [] },',
      },
      {
        file: 'src/queue/oldest.ts',
        search:
          'const t = await session.client.txn(\n    { compare: ourKeyStands(session, ticket), success: [op.touch(ticket.key)], failure: [] },',
        replace: 'const t = await session.client.txn(\n    { compare: [], success: [op.touch(ticket.key)], failure: [] },',
      },
    ],
  },
  {
    name: 'freed-permit-taken-as-turn',
    breaks:
      "a semaphore's head takes a revision's delete of a holder's key as its turn, without the Txn that confirms its own key (which the same revision may have deleted too: a553c3d)",
    edits: [
      {
        file: 'src/primitives/semaphore.ts',
        search: 'const ahead = freedAhead ? [] : await older(signal);',
        replace: 'if (freedAhead) return (freedAhead = false), null;\n      const ahead = await older(signal);',
      },
    ],
  },
  {
    name: 'head-gone-taken-as-turn',
    breaks:
      "a lock waiter behind a marked head takes the head's delete as its turn without the Txn that confirms its own key (one revision may delete the holder's key and the waiter's: a553c3d, 558c94f)",
    edits: [
      {
        file: 'src/queue/oldest.ts',
        search: 'if (last?.headGone) return ourTurnAfterHead(session, ticket, lost, signal);',
        replace: 'if (last?.headGone) return null;',
      },
    ],
  },
  {
    name: 'barrier-ready-unguarded',
    breaks: "a DoubleBarrier's `ready` put without its guard (the counted members' keys still standing): it may open a member short",
    edits: [
      {
        file: 'src/primitives/double-barrier.ts',
        search: 'const stayed = counted.length <= GUARDED_MEMBERS ?',
        replace: 'const stayed = false ?',
      },
    ],
  },
  {
    name: 'release-unguarded',
    breaks:
      "a release's delete (and its background retries, a dropped ticket's, a ghost's sweep) without its CreateRevision guard: it may take a newer incarnation of the key",
    edits: [
      {
        file: 'src/queue/guaranteed-delete.ts',
        search: '{ compare: [guard], success: [op.delete(key)], failure: [] },',
        replace: '{ compare: [], success: [op.delete(key)], failure: [] },',
      },
    ],
  },
  {
    name: 'barrier-give-up-leaves-ready',
    breaks:
      "issue 35's DoubleBarrier fix (7611c2f): a member that gives up its enter() or leave() (aborted, failed) no longer deletes `ready` when it was the last of its round",
    edits: [
      {
        file: 'src/primitives/double-barrier.ts',
        search:
          'await dropKey(this.session, this.name, entry.key, entry.rev);\n      await this.closeIfLast().catch(() => {});\n      throw',
        replace: 'await dropKey(this.session, this.name, entry.key, entry.rev);\n      throw',
      },
      {
        file: 'src/primitives/double-barrier.ts',
        search:
          'await dropKey(this.session, this.name, mine.key, mine.rev);\n      // `ready` may have been put counting us, unseen: if we were the last of that round, it goes too.\n      await this.closeIfLast().catch(() => {});',
        replace: 'await dropKey(this.session, this.name, mine.key, mine.rev);',
      },
    ],
  },
  {
    name: 'barrier-death-leaves-ready',
    breaks:
      "a DoubleBarrier's last member out leaves `ready` (in its leave()'s Txn and the closeIfLast after it) when another member of its round died (its lease gone now, counted at the revision the barrier opened); Go's recipe leaves it only when the oldest member dies, docs/barriers.md only when the round's last member cannot delete it",
    edits: [
      {
        file: 'src/primitives/double-barrier.ts',
        search: '  private busy = false;\n',
        replace: '  private busy = false;\n  private sawDeath = false;\n',
      },
      {
        file: 'src/primitives/double-barrier.ts',
        search:
          'if (entry.late) await dropKey(this.session, this.name, entry.key, entry.rev);\n      await this.closeIfLast().catch(() => {});',
        replace:
          'if (entry.late) await dropKey(this.session, this.name, entry.key, entry.rev);\n      if (!this.sawDeath) await this.closeIfLast().catch(() => {});',
      },
      {
        file: 'src/primitives/double-barrier.ts',
        search: '    const own = Buffer.from(entry.key);\n',
        replace: '    const own = Buffer.from(entry.key);\n    this.sawDeath = false;\n',
      },
      {
        file: 'src/primitives/double-barrier.ts',
        search: 'const ours = mine ? [op.delete(entry.key)] : [];\n',
        replace: [
          'const ours = mine ? [op.delete(entry.key)] : [];',
          '          const was = await client',
          '            .range({ key: prefix, rangeEnd: prefixEnd(prefix), maxCreateRevision: entry.ready - 1n, revision: entry.ready })',
          '            .catch(() => undefined);',
          '          const leases = (was?.kvs ?? []).filter((kv) => !kv.key.equals(own) && kv.lease !== 0n).map((kv) => kv.lease);',
          '          const ttls = await Promise.all(leases.map((l) => client.leaseTimeToLive(l).catch(() => undefined)));',
          '          this.sawDeath = ttls.some((t) => t !== undefined && t.ttl < 0);',
          '',
        ].join('\n'),
      },
      {
        file: 'src/primitives/double-barrier.ts',
        search: 'success: [op.delete(this.readyKey), ...ours],',
        replace: 'success: [...(this.sawDeath ? [] : [op.delete(this.readyKey)]), ...ours],',
      },
    ],
  },
  {
    name: 'enqueue-adopts-foreign-key',
    breaks: "issue 35, 2 and 3 (c7fec17): the enqueue adopts a key at our name that is not on our lease (an operator's plain put)",
    edits: [
      {
        file: 'src/queue/enqueue.ts',
        search: 'if (!found || (found.lease === session.leaseId && use.retired !== found.createRevision)) return t;',
        replace: 'if (!found || use.retired !== found.createRevision) return t;',
      },
    ],
  },
  {
    name: 'election-guards-create-only',
    breaks: "issue 35, 2 (c7fec17): an election's value update (prepare) and proclaim() guarded on the CreateRevision only, not our lease",
    edits: [
      {
        file: 'src/primitives/election.ts',
        search: '{ compare: ourKeyStands(session, ticket), success: [op.put(ticket.key, bytes, session.leaseId)], failure: [] },',
        replace:
          '{ compare: ourKeyStands(session, ticket).slice(0, 1), success: [op.put(ticket.key, bytes, session.leaseId)], failure: [] },',
      },
      { file: 'src/primitives/election.ts', search: 'compare: this.own.ownerCompares(),', replace: 'compare: [this.own.ownerCompare()],' },
    ],
  },
  {
    name: 'read-joins-behind-writer',
    breaks: "issue 35, 4 (6617f32): an RWMutex read joins this process's read key although a writer queued behind it (no joinCheck)",
    edits: [{ file: 'src/primitives/rwmutex.ts', search: "...(mode === 'read' && {", replace: '...(false && {' }],
  },
  {
    name: 'read-joins-handed-over-key',
    breaks:
      'issue 35, 4 (c0c6f15): the join check skipped on a read key handed over in the process (its last user left while this enqueue was in flight)',
    edits: [
      {
        file: 'src/queue/enqueue.ts',
        search: 'const others = use.users > 0 || use.pending > 1 || use.fencingToken === mine.createRevision;',
        replace: 'const others = use.users > 0 || use.pending > 1;',
      },
    ],
  },
  {
    name: 'holder-takes-stale-events',
    breaks:
      "issue 35, 5 (e820d5e): a holder's key watch takes events at or below the read that confirmed it (a lagging member's delete of our previous incarnation)",
    edits: [{ file: 'src/queue/ownership.ts', search: 'if (e.kv.modRevision <= after) continue;', replace: '' }],
  },
  {
    name: 'stale-enqueue-answer-held',
    breaks:
      'issue 35, 7 (92c1321): an enqueue answer about an incarnation older than the one counted is held on (KeyUsers.join undefined ignored); the newer incarnation, left to it by the calls that used it, stays in etcd counted by nobody',
    edits: [{ file: 'src/queue/enqueue.ts', search: 'if (joined === undefined) return STALE;', replace: '' }],
  },
  {
    name: 'paging-skips-ties',
    breaks:
      "issue 35, 8 (4de614a): paging by CreateRevision from the page's last key minus one, skipping keys created in the same revision",
    edits: [
      {
        file: 'src/client/pages.ts',
        search: 'next = desc ? { ...req, maxCreateRevision: at, limit } : { ...req, minCreateRevision: at, limit };',
        replace: 'next = desc ? { ...req, maxCreateRevision: at - 1n } : { ...req, minCreateRevision: at + 1n };',
      },
    ],
  },
  {
    name: 'revoke-ends-turn',
    breaks:
      "c0c6f15: a term revoked by runAsLeader's shutdown ends its in-process turn at once, while its key is still in etcd and counted",
    edits: [
      {
        file: 'src/queue/ownership.ts',
        search:
          'if (loss !== undefined) {\n      sessionQueue<Ownership>(this.session).users.retire(this.key, this.fencingToken, loss);\n      this.exit?.leave();\n    }',
        replace:
          'if (loss !== undefined) sessionQueue<Ownership>(this.session).users.retire(this.key, this.fencingToken, loss);\n    this.exit?.leave();',
      },
    ],
  },
  {
    name: 'lost-incarnation-not-retired',
    breaks: 'c0c6f15: a lost incarnation is not retired (KeyUsers.retire), so a later call of the process joins it, with its token',
    edits: [
      {
        file: 'src/queue/ownership.ts',
        search: 'sessionQueue<Ownership>(this.session).users.retire(this.key, this.fencingToken, loss);',
        replace: '',
      },
    ],
  },
  {
    name: 'watch-idle-after-late-created',
    breaks:
      "91c60a0: a watch cancelled while its create was in flight leaves the client's watch stream open for good (the hub's idle timer not armed when the late created answer comes)",
    edits: [
      {
        file: 'src/client/watch.ts',
        search: 's.write({ cancelRequest: { watchId: id } });\n        this.maybeIdle();\n        return;',
        replace: 's.write({ cancelRequest: { watchId: id } });\n        return;',
      },
    ],
  },
];

/** The repository this file belongs to. */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Applies `edits` to the text of one file, each search found exactly once; throws naming the mutant otherwise. */
export function applyEdits(name: string, file: string, text: string, edits: readonly Edit[]): string {
  let out = text;
  for (const e of edits) {
    const at = out.indexOf(e.search);
    if (at < 0 || out.indexOf(e.search, at + 1) >= 0) {
      throw new Error(
        `mutant ${name}: ${at < 0 ? 'not found' : 'found more than once'} in ${file}: ${JSON.stringify(e.search)} (the code moved: update sim/mutants.ts)`,
      );
    }
    out = out.slice(0, at) + e.replace + out.slice(at + e.search.length);
  }
  return out;
}

/**
 * A copy of the repository's src/ and sim/ (node_modules linked) with the mutant applied, in a new
 * temporary directory: returns its path. The simulator runs from it as it does from the repository.
 */
export function prepare(m: Mutant, root = ROOT): string {
  const dir = mkdtempSync(path.join(tmpdir(), `mutant-${m.name}-`));
  for (const d of ['src', 'sim']) cpSync(path.join(root, d), path.join(dir, d), { recursive: true });
  for (const f of ['package.json', 'tsconfig.json']) cpSync(path.join(root, f), path.join(dir, f));
  symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
  const files = new Map<string, Edit[]>();
  for (const e of m.edits) files.set(e.file, [...(files.get(e.file) ?? []), e]);
  for (const [file, edits] of files) {
    const p = path.join(dir, file);
    writeFileSync(p, applyEdits(m.name, file, readFileSync(p, 'utf8'), edits));
  }
  return dir;
}

const run = promisify(execFile);

/** Runs the simulator on the mutant's copy, seeds `from`.. in order, until the first one fails. */
export async function hunt(
  m: Mutant,
  options: { seeds?: number; from?: number; keep?: boolean; profile?: string; workload?: string } = {},
): Promise<HuntResult & { mutant: Mutant; dir: string }> {
  const dir = prepare(m);
  try {
    const args = [
      '--seeds',
      String(options.seeds ?? 2000),
      '--from',
      String(options.from ?? 1),
      '--profile',
      options.profile ?? m.profile ?? '3.7',
    ];
    if (options.workload) args.push('--workload', options.workload);
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'sim/hunt.ts', ...args], {
      cwd: dir,
      maxBuffer: 64 * 1024 * 1024,
    });
    const last = stdout.trim().split('\n').at(-1) ?? '';
    return { ...(JSON.parse(last) as HuntResult), mutant: m, dir };
  } finally {
    if (!options.keep) rmSync(dir, { recursive: true, force: true });
  }
}

/** Hunts each of `mutants`, `jobs` at a time (each in its own process); calls `each` as each ends. */
export async function huntAll(
  mutants: readonly Mutant[],
  options: Parameters<typeof hunt>[1] & { jobs?: number; each?: (r: Awaited<ReturnType<typeof hunt>>) => void } = {},
): Promise<Awaited<ReturnType<typeof hunt>>[]> {
  const { jobs = 2, each, ...rest } = options;
  const results: Awaited<ReturnType<typeof hunt>>[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < mutants.length) {
      const r = await hunt(mutants[next++]!, rest);
      results.push(r);
      each?.(r);
    }
  };
  await Promise.all(Array.from({ length: Math.min(jobs, mutants.length) }, worker));
  return mutants.map((m) => results.find((r) => r.mutant === m)!);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const flag = (name: string): string | undefined => {
    const i = args.indexOf(`--${name}`);
    return i >= 0 ? args[i + 1] : undefined;
  };
  if (args.includes('--list')) {
    for (const m of MUTANTS) console.log(`${m.name}${m.profile ? ` (profile ${m.profile})` : ''}: ${m.breaks}`);
  } else {
    const valued = new Set(['--seeds', '--from', '--profile', '--workload', '--jobs']);
    const names = args.filter((a, i) => !a.startsWith('--') && !valued.has(args[i - 1] ?? ''));
    const unknown = names.filter((n) => !MUTANTS.some((m) => m.name === n));
    if (unknown.length > 0) throw new Error(`no such mutant: ${unknown.join(', ')} (see --list)`);
    const chosen = names.length > 0 ? MUTANTS.filter((m) => names.includes(m.name)) : MUTANTS;
    const seeds = Number(flag('seeds') ?? 2000);
    const profile = flag('profile');
    const workload = flag('workload');
    const keep = args.includes('--keep');
    const t0 = performance.now();
    const results = await huntAll(chosen, {
      seeds,
      from: Number(flag('from') ?? 1),
      jobs: Number(flag('jobs') ?? 2),
      keep,
      ...(profile ? { profile } : {}),
      ...(workload ? { workload } : {}),
      each: (r) => {
        const what = r.seed === null ? `NOT CAUGHT in ${seeds} seeds` : `caught by seed ${r.seed} (${r.runs} schedules)`;
        console.log(`${r.mutant.name}: ${what}, ${(r.ms / 1000).toFixed(1)} s${keep ? `; copy in ${r.dir}` : ''}`);
        for (const v of r.violations.slice(0, 3)) console.log(`  ${v.rule} at ${v.at} ms: ${v.detail}`);
      },
    });
    const missed = results.filter((r) => r.seed === null).length;
    console.log(`${chosen.length - missed} of ${chosen.length} mutants caught; ${((performance.now() - t0) / 1000).toFixed(0)} s`);
    process.exitCode = missed > 0 ? 1 : 0;
  }
}
