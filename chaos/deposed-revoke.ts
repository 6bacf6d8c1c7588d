// A focused reproduction of the early lease expiries of the full 3.7.3 run (seed 20261203): a Raft
// leader frozen past the TTL revokes live leases one etcd request timeout (7 s) after it wakes, when it
// holds more than 16 leases (see etcd-logs.ts for the mechanism in etcd's revokeExpiredLeases).
//
//   node scripts/etcd.mjs exec 3.7 -- node --import tsx chaos/deposed-revoke.ts [--sessions 24] [--rounds 3]
//        [--ttl 3] [--pause-ms 4100] [--keep]
//
// Each round: a fresh 3-member cluster (startEtcd), N sessions with TTL `ttl` on one client whose
// endpoints are the two followers (so no renewal reaches the leader that will be frozen), SIGSTOP of
// the Raft leader for `pause-ms`, SIGCONT, then 12 s to watch. Reported: every session that etcd said
// was gone while its own deadline (send time + TTL - margin) still lay ahead, when (after the wake),
// and the frozen member's "failed to revoke lease ... timed out" lines.
//
// On the woken member, the revokes race the message that deposes it. Those proposed after it stepped
// down are forwarded to the new leader and land at once ("at wake", etcd 15247 as before); those
// proposed while it still led go into its stale term and time out after 7 s, and each freed slot
// sends the next lease of the list, which lands then ("late", only with more than 16 leases). Or the
// lessor is demoted first, and nothing is revoked. Which one happens is timing: run several rounds.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { readFile } from 'node:fs/promises';
import { Client, Session } from '../src/index.js';
import { startEtcd } from '../src/testing/index.js';
import { now } from './common.js';
import { parseRevokeTimeouts } from './etcd-logs.js';

const { values: args } = parseArgs({
  options: {
    sessions: { type: 'string', default: '24' },
    rounds: { type: 'string', default: '3' },
    ttl: { type: 'string', default: '3' },
    'pause-ms': { type: 'string', default: '4100' },
    keep: { type: 'boolean', default: false },
  },
});
const N = Number(args.sessions);
const rounds = Number(args.rounds);
const ttl = Number(args.ttl);
const pauseMs = Number(args['pause-ms']);

export interface RoundResult {
  sessions: number;
  aliveAtWake: number;
  /** Sessions etcd said were gone while their own deadline still lay ahead: ms after the wake, ms left. */
  early: { lease: string; afterWakeMs: number; leftMs: number }[];
  lostToDeadline: number;
  /** The frozen member's timed-out revokes, ms after the wake. */
  revokeTimeoutsAfterWakeMs: number[];
  /** The frozen member logged that it skipped its revocations (ensureLeadership said no). */
  skippedBatch: boolean;
}

const lossAt = (s: Session): number => (s as unknown as { lossAt(): number }).lossAt();

async function round(k: number): Promise<RoundResult> {
  const dir = await mkdtemp(join(tmpdir(), 'etcd-deposed-'));
  const etcd = await startEtcd({ members: 3, dataDir: join(dir, 'etcd'), logDir: dir });
  let client: Client | undefined;
  try {
    const leader = await etcd.leaderIndex();
    const followers = etcd.endpoints.filter((_, i) => i !== leader);
    client = new Client({ endpoints: followers, callTimeoutMs: 3000 });
    const sessions = await Promise.all(Array.from({ length: N }, () => Session.create(client!, { ttl })));
    const early: RoundResult['early'] = [];
    let lostToDeadline = 0;
    let wake = Infinity;
    for (const s of sessions) {
      void s.done.then((e) => {
        if (e.reason === 'lease_gone') {
          const left = lossAt(s) - performance.now();
          if (left > 0) early.push({ lease: s.leaseId.toString(16), afterWakeMs: Math.round(now() - wake), leftMs: Math.round(left) });
        } else if (e.reason === 'deadline') lostToDeadline++;
      });
    }
    // Let every lease be renewed a few times with the leader's lessor as primary.
    await sleep(1500);
    etcd.pause(leader);
    await sleep(pauseMs);
    etcd.resume(leader);
    wake = now();
    const aliveAtWake = sessions.filter((s) => !s.signal.aborted).length;
    await sleep(12_000);
    const wallOffset = Date.now() - now();
    const text = await readFile(join(dir, `m${leader}.log`), 'utf8');
    const timeouts = parseRevokeTimeouts(`m${leader}`, text, (w) => w - wallOffset);
    const result: RoundResult = {
      sessions: N,
      aliveAtWake,
      early: early.sort((a, b) => a.afterWakeMs - b.afterWakeMs),
      lostToDeadline,
      revokeTimeoutsAfterWakeMs: timeouts.map((e) => Math.round(e.at - wake)),
      skippedBatch: text.includes('Ignore the lease revoking request'),
    };
    console.log(
      `round ${k}: leader m${leader} frozen ${pauseMs} ms; ${N} sessions (TTL ${ttl} s), ${aliveAtWake} alive at the wake, ` +
        `${lostToDeadline} lost to their own deadline; ${timeouts.length} timed-out revokes by m${leader} ` +
        `(at +${result.revokeTimeoutsAfterWakeMs.join(', +') || '-'} ms)${result.skippedBatch ? ', batch skipped (not leader)' : ''}; ` +
        `${early.length} early expiries (${early.filter((e) => e.afterWakeMs < 2000).length} at wake, ${early.filter((e) => e.afterWakeMs >= 2000).length} late)` +
        `${early.length ? `: ${early.map((e) => `${e.lease} at +${e.afterWakeMs} ms, ${e.leftMs} ms early`).join('; ')}` : ''}`,
    );
    if (args.keep) console.log(`  logs: ${dir}`);
    await Promise.all(sessions.map((s) => s.close().catch(() => {})));
    return result;
  } finally {
    await client?.close();
    await etcd.stop();
    if (!args.keep) await rm(dir, { recursive: true, force: true });
  }
}

const results: RoundResult[] = [];
for (let k = 1; k <= rounds; k++) results.push(await round(k));
const early = results.flatMap((r) => r.early);
const late = early.filter((e) => e.afterWakeMs >= 2000).length;
console.log(
  `${rounds} round(s), ${N} sessions each: ${early.length} early expiries (${early.length - late} at wake, ${late} late), ` +
    `in ${results.filter((r) => r.early.length > 0).length} round(s)`,
);
