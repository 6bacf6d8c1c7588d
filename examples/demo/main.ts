// `npm run demo`: the story of the two seed articles, told live on a real local 3-member etcd
// cluster by real worker processes that are killed and frozen on cue.
//
//   1. Five workers contend for /locks/card-8801: FIFO by CreateRevision, fencing tokens, a ledger.
//   2. Leader election: SIGKILL the leader (a successor takes over within the TTL), then a graceful resign.
//   3. The ghost: a holder frozen (SIGSTOP) past its TTL is told on waking that the lock is gone, and
//      its late write is rejected by the ledger's fencing check anyway: by PostgreSQL itself, through
//      etcd-concurrency/fencing, when PostgreSQL is installed (else by an in-memory ledger).
//   4. SIGKILL etcd's Raft leader while the lock is held and waited for: work goes on.
//
// Usage: node --import tsx examples/demo/main.ts [--fast] [--quiet] [--web]
// --web: the web inspector (`etcd-concurrency inspect --web`) runs beside the story on the whole
// keyspace; the demo prints its URL and waits (20 s at most) for a browser to open it.
// Exits 0 when every invariant held, 1 otherwise, 2 on a bad command line, 130 on Ctrl-C.
// DEMO_DEBUG=1 also prints every worker event on stderr.
import { setTimeout as sleep } from 'node:timers/promises';
import { Demo } from './demo.js';
import { databaseCheck, finalChecks, summary } from './verdict.js';
import { sceneElection, sceneGhost, sceneLocks, sceneRaft } from './scenes.js';
import { FAST, NORMAL } from './settings.js';

function parseArgs(argv: string[]): { fast: boolean; quiet: boolean; web: boolean } | undefined {
  const flags = { fast: false, quiet: false, web: false };
  for (const a of argv) {
    if (a === '--fast') flags.fast = true;
    else if (a === '--web') flags.web = true;
    else if (a === '--quiet' || a === '-q') flags.quiet = true;
    else if (a === '--help' || a === '-h') return undefined;
    else {
      process.stderr.write(`demo: unknown option ${a}\n`);
      process.exitCode = 2;
      return undefined;
    }
  }
  return flags;
}

async function main(): Promise<void> {
  const flags = parseArgs(process.argv.slice(2));
  if (!flags) {
    const usage =
      'usage: npm run demo -- [--fast] [--quiet] [--web]\n  --fast   short TTLs (about 25 s, for CI)\n  --quiet  print only the final invariants\n' +
      '  --web    run the web inspector beside it and print its URL (http://127.0.0.1:8379/)\n';
    (process.exitCode === 2 ? process.stderr : process.stdout).write(usage);
    return;
  }
  const demo = new Demo(flags.fast ? FAST : NORMAL, flags.quiet);
  let interrupted = false;
  const onSignal = (sig: NodeJS.Signals): void => {
    if (interrupted) return;
    interrupted = true;
    process.stderr.write(`\ndemo: ${sig}: stopping workers and etcd\n`);
    demo.cond.fail(new Error(`interrupted by ${sig}`));
    demo.emergencyStop();
    process.exitCode = 130;
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  let error: unknown;
  try {
    await demo.setup();
    if (flags.web) await demo.startInspector();
    await sceneLocks(demo);
    await sleep(demo.s.beatMs);
    await sceneElection(demo);
    await sleep(demo.s.beatMs);
    await sceneGhost(demo);
    await sleep(demo.s.beatMs);
    await sceneRaft(demo);
  } catch (err) {
    error = err;
  }
  finalChecks(demo);
  try {
    await databaseCheck(demo);
  } catch (err) {
    error ??= err;
  }
  demo.n.scene('The end', [], false);
  demo.n.step('cleaning up: workers close their sessions (revoking their leases) and exit, the cluster stops');
  try {
    await demo.cleanup();
  } catch (err) {
    error ??= err;
    demo.emergencyStop();
  }
  demo.cond.fail(new Error('the demo is over'));
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  if (interrupted) return;
  const ok = summary(demo, error);
  if (error !== undefined && !flags.quiet) {
    for (const p of demo.procs.values()) if (p.stderr.trim()) process.stderr.write(`--- ${p.name} stderr ---\n${p.stderr}`);
  }
  process.exitCode = ok ? 0 : 1;
  // Everything is closed, so the process ends by itself. If something still holds it open, say so
  // (a bug in the demo or the library) instead of hanging.
  setTimeout(() => {
    process.stderr.write('demo: something kept the process alive after cleanup; exiting\n');
    process.exit(process.exitCode ?? 1);
  }, 5000).unref();
}

await main();
