// The demo's four scenes, in the order main.ts plays them: the fair queue and fencing tokens, leader
// election, the ghost (a frozen holder's late write), and etcd's Raft leader killed mid-story.
import { observeLeader } from '../../src/index.js';
import { ms, money } from './narrate.js';
import type { WorkerProc } from './procs.js';
import type { Demo } from './demo.js';
import { ELECTION, LOCK, job } from './settings.js';

export async function sceneLocks(d: Demo): Promise<void> {
  const { n, s } = d;
  d.begin('Five workers, one card: a fair queue and fencing tokens', [
    `Lock ${LOCK}: each worker puts the key <lock>/<its lease id> on its own lease.`,
    "The key's CreateRevision, assigned by Raft, is its ticket in the queue and, once it holds",
    "the lock, its fencing token. Card 8801's ledger accepts a write only if its token is at",
    'least the highest token it has seen.',
  ]);
  n.step(
    `${['w1', 'w2', 'w3', 'w4', 'w5'].map((x) => d.who(x)).join(', ')} ask for the lock at the same moment (sessions: TTL ${s.workerTtl} s)`,
  );
  await Promise.all(['w1', 'w2', 'w3', 'w4', 'w5'].map((name, i) => d.lockJob(name, job(i + 1), { holdMs: s.holdMs })));
  const { ok, order } = d.fifo(d.scene);
  n.step(`served strictly in ticket order: ${order}`);
  n.detail(`ledger: ${d.ledger.entries.length} charges, ${money(d.ledger.totalCents())} in total, highest token ${d.ledger.highest}`);
  if (!ok) d.trouble('scene 1: the lock was not granted in CreateRevision order');
}

export async function sceneElection(d: Demo): Promise<void> {
  const { n, s } = d;
  const ttl = s.schedulerTtl;
  d.begin('Leader election: SIGKILL the leader, then a graceful resign', [
    `Three scheduler processes run runAsLeader('${ELECTION}') on ${ttl} s leases;`,
    'only the leader dispatches batches. A dashboard in the parent follows the election with',
    'observeLeader().',
  ]);
  const observer = new AbortController();
  d.stopWatching.signal.addEventListener('abort', () => observer.abort(), { once: true });
  d.background.push(
    (async () => {
      try {
        for await (const e of observeLeader(d.client!, ELECTION, { signal: observer.signal })) {
          if (e.type === 'none') {
            if (d.observed.length > 0) n.detail(`dashboard: ${n.dim('no leader')}`);
            continue;
          }
          d.observed.push({ who: e.leader.value, term: e.leader.fencingToken, at: n.now() });
          n.detail(`dashboard: leader is ${d.who(e.leader.value)} (term ${e.leader.fencingToken})`);
          d.cond.notify();
        }
      } catch (err) {
        if (!observer.signal.aborted) d.cond.fail(new Error(`observeLeader failed: ${String(err)}`));
      }
    })(),
  );
  const [s1, s2, s3] = ['s1', 's2', 's3'].map((x) => d.proc(x)) as [WorkerProc, WorkerProc, WorkerProc];
  await d.ready(['s1', 's2', 's3']);
  n.step(`scheduler processes up: ${[s1, s2, s3].map((p) => `${d.who(p.name)} pid ${p.pid}`).join(', ')}`);
  const campaign = (p: WorkerProc): void => p.send({ cmd: 'campaign', election: ELECTION, ttl, tickMs: s.tickMs });

  campaign(s1);
  await d.cond.until('s1 to lead', () => s1.events('leading').length > 0);
  for (const p of [s2, s3]) {
    campaign(p);
    await d.cond.until(`${p.name} to campaign`, () => d.electionQueue.some((q) => q.value === p.name));
    const q = d.electionQueue.find((x) => x.value === p.name)!;
    const before = d.electionQueue.filter((x) => x.rev < q.rev).pop();
    n.step(
      `${d.who(p.name)} campaigns too: its key has CreateRevision ${q.rev}; it waits, watching only ${before ? `${before.value}'s key` : '?'}`,
    );
  }
  await d.cond.until('s1 to dispatch twice', () => s1.events('tick').length >= 2);

  const lease1 = s1.last('leading')!.lease;
  n.step(`${n.red('SIGKILL')} ${d.who('s1')} (pid ${s1.pid}): no resign, no revoke, the process is simply gone`);
  const killedAt = n.now();
  s1.signal('SIGKILL');
  await s1.exited;
  const left = await d.client!.leaseTimeToLive(BigInt(`0x${lease1}`)).catch(() => undefined);
  if (left && left.ttl > 0) {
    n.detail(`etcd still counts down s1's lease (${left.ttl} s left of ${left.grantedTtl}): it cannot tell dead from slow`);
  }
  await d.cond.until('s2 to take over', () => s2.events('leading').length > 0, ttl * 1000 + 15_000);
  const takeover = s2.events('leading')[0]!.at - killedAt;
  n.step(
    `${d.who('s2')} took over ${n.bold(ms(takeover))} after the kill (TTL ${ttl} s): the lease expired, etcd deleted s1's key, ` +
      'and s2 was watching exactly that key',
  );
  const bound = ttl * 1000 + 1000;
  d.check(
    `new leader after SIGKILL in ${Math.round(takeover)} ms (TTL ${ttl} s)`,
    takeover <= bound,
    `bound: TTL + 1 s for etcd's 500 ms expiry sweep`,
  );

  await d.cond.until('s2 to dispatch twice', () => s2.events('tick').length >= 2);
  n.step(`${d.who('s2')} is shut down gracefully: runAsLeader stops its task, then resigns (deletes its key)`);
  const resignAt = n.now();
  s2.send({ cmd: 'resign' });
  await d.cond.until('s3 to take over', () => s3.events('leading').length > 0, 10_000);
  const handover = s3.events('leading')[0]!.at - resignAt;
  n.step(`${d.who('s3')} leads ${n.bold(ms(handover))} after s2 was asked to step down: no TTL to wait out`);
  d.check(`graceful resign handed over in ${Math.round(handover)} ms`, handover < 1000);

  await d.cond.until('s3 to dispatch', () => s3.events('tick').length >= 2);
  s3.send({ cmd: 'resign' });
  await d.cond.until('s3 to resign', () => s3.events('resigned').length > 0 && s2.events('resigned').length > 0);
  await d.cond.until('the dashboard to see s3', () => d.observed.some((o) => o.who === 's3'), 5000);
  observer.abort();

  // One leader at a time, each term larger than the last, seen alike by the leaders and the dashboard.
  const terms = ['s1', 's2', 's3'].map((x) => BigInt(d.proc(x).events('leading')[0]!.term));
  const seen = d.observed.map((o) => `${o.who}:${o.term}`).join(',');
  const expected = ['s1', 's2', 's3'].map((x, i) => `${x}:${terms[i]}`).join(',');
  const ok = terms[0]! < terms[1]! && terms[1]! < terms[2]! && seen === expected;
  d.check('one leader at a time, terms increasing', ok, ok ? undefined : `dashboard saw ${seen}, expected ${expected}`);
  n.detail(`terms: ${terms.join(' < ')}; the dashboard saw exactly s1 → s2 → s3`);
}

export async function sceneGhost(d: Demo): Promise<void> {
  const { n, s } = d;
  const ttl = s.ghostTtl;
  d.begin('The ghost: frozen past its TTL, told on waking, fenced anyway', [
    `w6 takes the lock on a ${ttl} s lease and is frozen with SIGSTOP in the middle of its work,`,
    'like a stop-the-world GC pause or a stalled VM. The job queue (at-least-once delivery) also',
    'hands charge #6 to w2.',
  ]);
  const w6 = d.proc('w6');
  d.expectedLoss.add('w6');
  const ghostDone = d.lockJob('w6', job(6), { holdMs: s.ghostHoldMs, ttl, ghost: true });
  await d.cond.until('w6 to start working', () => w6.events('working').length > 0);
  w6.pause();
  const frozenAt = n.now();
  const working = w6.last('working')!;
  n.step(
    `${d.who('w6')} read the ledger (charge #6 ${working.alreadyApplied ? 'already applied' : 'not applied yet'}) and began its slow part: ` +
      `${n.red('SIGSTOP')} ${d.who('w6')} (pid ${w6.pid})`,
  );
  const ghostKey = d.acquisitions.find((a) => a.who === 'w6')!.key;
  const w6Lease = ghostKey.slice(LOCK.length + 1);
  const left = await d.client!.leaseTimeToLive(BigInt(`0x${w6Lease}`)).catch(() => undefined);
  if (left && left.ttl > 0) n.detail(`w6's lease has ${left.ttl} s left, and a frozen process renews nothing`);

  const w2Done = d.lockJob('w2', job(6), { holdMs: s.holdMs });
  await d.cond.until(
    "etcd to expire w6's lease",
    () => d.queue.some((q) => q.key === ghostKey && q.deletedAt !== undefined),
    ttl * 1000 + 15_000,
  );
  const expiredAt = d.queue.find((q) => q.key === ghostKey)!.deletedAt!;
  n.step(`w6's lease expired on the server ${ms(expiredAt - frozenAt)} into the freeze: etcd deleted its key, the lock moves on`);
  await w2Done;
  await d.beat();

  n.step(
    `${n.green('SIGCONT')} ${d.who('w6')} after ${n.bold(ms(n.now() - frozenAt))} frozen (TTL ${ttl} s). It resumes mid-work, as if nothing happened`,
  );
  w6.resume();
  await ghostDone;
  const woke = w6.last('woke');
  const told = woke !== undefined && (woke.signalAborted || woke.lost !== undefined);
  d.check(
    'ghost told by its lock handle before writing',
    told,
    told ? undefined : 'handle.signal had not fired and assertHeld() did not throw',
  );
  const rejected = d.ledger.rejections.find((r) => r.by === 'w6');
  d.check(
    'late write rejected by fencing',
    rejected !== undefined,
    rejected ? `token ${rejected.token} < ${rejected.highest}` : 'the ledger accepted the ghost',
  );
  if (rejected) {
    n.detail(
      `without the fence, ${rejected.job.label} would have been charged twice; the ledger holds it once, written by ${d.ledger.entries.find((e) => e.job.id === rejected.job.id)?.by ?? '?'}`,
    );
  }
  n.detail(
    `belt and braces: the library told w6 its lock was gone, and ${d.pgLedger ? 'PostgreSQL itself (PostgresFence)' : "the ledger's fencing check"} stopped it anyway`,
  );
  const { ok } = d.fifo(d.scene);
  if (!ok) d.trouble('scene 3: the lock was not granted in CreateRevision order');
  d.expectedLoss.delete('w6');
}

export async function sceneRaft(d: Demo): Promise<void> {
  const { n, s } = d;
  const cluster = d.cluster!;
  d.begin("Kill etcd's Raft leader while the lock is held and waited for", [
    'w3 holds the lock while w4 and w5 wait in line. We SIGKILL whichever etcd member is the',
    `Raft leader. The others elect a new one; clients fail over; leases (TTL ${s.workerTtl} s) and`,
    'watches survive.',
  ]);
  const troublesBefore = d.troubles.length;
  const since = d.acquisitions.length;
  const w3 = d.proc('w3');
  const mark = w3.mark();
  const done = [d.lockJob('w3', job(7), { holdMs: s.raftHoldMs })];
  await d.cond.until('w3 to hold the lock', () => w3.events('working', mark).length > 0);
  done.push(d.lockJob('w4', job(8), { holdMs: s.raftHoldMs }));
  await d.cond.until('w4 to queue', () => d.queue.some((q) => q.scene === d.scene && d.leases.get(q.lease) === 'w4'));
  done.push(d.lockJob('w5', job(9), { holdMs: s.raftHoldMs }));
  await d.cond.until('w5 to queue', () => d.queue.some((q) => q.scene === d.scene && d.leases.get(q.lease) === 'w5'));

  const leader = await cluster.leaderIndex();
  const m = cluster.members[leader]!;
  n.step(`${n.red('SIGKILL')} etcd member ${n.bold(m.name)} (${m.endpoint}, pid ${m.pid}), the Raft leader`);
  const killedAt = n.now();
  await cluster.kill(leader, 'SIGKILL');
  const next = await cluster.leaderIndex(30_000);
  n.step(`the two survivors elected ${n.bold(cluster.members[next]!.name)} as Raft leader ${ms(n.now() - killedAt)} after the kill`);
  await Promise.all(done);
  const acq = d.acquisitions.slice(since);
  const { ok: fifo } = d.fifo(d.scene);
  const writes = d.ledger.entries.filter((e) => ['charge-7', 'charge-8', 'charge-9'].includes(e.job.id));
  const kept = fifo && acq.length === 3 && writes.length === 3 && d.troubles.length === troublesBefore;
  n.step(
    `work went on: ${acq.map((a) => `${d.who(a.who)}(${a.token})`).join(' → ')} held the lock in turn, ` +
      `${writes.length} charges written, ${d.troubles.length - troublesBefore} locks or sessions lost`,
  );
  d.check(
    'locks kept across Raft leader kill',
    kept,
    kept ? undefined : `fifo ${fifo}, acquisitions ${acq.length}, writes ${writes.length}, troubles ${d.troubles.length - troublesBefore}`,
  );
  const restartAt = n.now();
  await cluster.restart(leader);
  n.step(`${m.name} restarted from its data dir and rejoined in ${ms(n.now() - restartAt)}: 3 of 3 members healthy`);
}
