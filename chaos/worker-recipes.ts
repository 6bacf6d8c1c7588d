// The recipe roles of a chaos worker (worker.ts): Barrier, DoubleBarrier and lockAll. Each call that
// resolves is followed by a read of etcd, whose revision the parent judges against the observer's
// record of every key (checker/recipes.ts).
//   barrier    hold the barrier `<name>/gate` (on the session's lease: it opens when its holder dies)
//              and release it a little later; or, finding it held, wait() on it and report the
//              holder's key it waited for; or, finding its own hold (a release whose answer was
//              lost), release that hold again.
//   dbarrier   enter() the DoubleBarrier `<name>` of `count` members (every dbarrier worker), stay a
//              little, leave().
//   multilock  lockAll() two or three of the locks `<name>/m0`..`<name>/m3`, hold, unlock(); after a
//              failed lockAll, report any of its keys still there once its release had time.
import { Barrier, compare, DoubleBarrier, lockAll, op, prefixEnd, type Client, type MultiLockHandle, type Session } from '../src/index.js';
import { now, type Prng, type WorkerConfig, type WorkerEvent } from './common.js';

/** What a recipe cycle needs from its worker. */
export interface RecipeContext {
  cfg: WorkerConfig;
  client: Client;
  rng: Prng;
  stop: AbortSignal;
  emit(e: WorkerEvent): void;
  currentSession(): Promise<Session>;
  pause(ms: number, signal?: AbortSignal): Promise<void>;
}

/** How long one wait may last before the worker gives up on it (reported as an error, not judged). */
const WAIT_LIMIT_MS = 60_000;

const limit = (ctx: RecipeContext, withStop = true): AbortSignal =>
  withStop ? AbortSignal.any([ctx.stop, AbortSignal.timeout(WAIT_LIMIT_MS)]) : AbortSignal.timeout(WAIT_LIMIT_MS);

/** A linearizable read of `prefix`: every key under it and the revision it was read at. */
async function readPrefix(
  client: Client,
  prefix: string,
): Promise<{ rev: bigint; kvs: { key: string; create: bigint; mod: bigint; lease: bigint }[] }> {
  const p = Buffer.from(prefix);
  const r = await client.range({ key: p, rangeEnd: prefixEnd(p) });
  return {
    rev: r.header.revision,
    kvs: r.kvs.map((kv) => ({ key: kv.key.toString(), create: kv.createRevision, mod: kv.modRevision, lease: kv.lease })),
  };
}

export function recipeCycles(ctx: RecipeContext): Record<'barrier' | 'dbarrier' | 'multilock', () => Promise<void>> {
  const { cfg, client, rng } = ctx;

  async function barrierCycle(): Promise<void> {
    const s = await ctx.currentSession();
    const gate = `${cfg.name}/gate`;
    const barrier = new Barrier(client, gate, { session: s });
    const before = (await readPrefix(client, `${cfg.name}/`)).kvs.find((k) => k.key === gate);
    if (before?.lease === s.leaseId) {
      // Our own hold, left by a release whose answer was lost (WriteOutcomeUnknownError): read the
      // state and release again, that hold only, as the error says; waiting on it would wait forever.
      await releaseHold(gate, before.create);
      return;
    }
    if (!before) {
      await barrier.hold();
      const mine = (await readPrefix(client, `${cfg.name}/`)).kvs.find((k) => k.key === gate);
      if (mine?.lease !== s.leaseId) return; // another worker's hold came first: not ours to release
      ctx.emit({ t: 'recipe', kind: 'barrier-held', create: mine.create.toString(), at: now() });
      await ctx.pause(rng.between(50, 400), ctx.stop);
      await barrier.release();
      return;
    }
    const started = now();
    await barrier.wait({ signal: limit(ctx) });
    const after = await readPrefix(client, `${cfg.name}/`);
    ctx.emit({
      t: 'recipe',
      kind: 'barrier-pass',
      held: before.create.toString(),
      rev: after.rev.toString(),
      waitedMs: Math.round(now() - started),
      at: now(),
    });
  }

  /** Deletes the gate only while it is the hold created at `create` (a later hold is someone else's). */
  async function releaseHold(gate: string, create: bigint): Promise<void> {
    await client.txn({ compare: [compare.createRevision(gate, '=', create)], success: [op.delete(gate)], failure: [] });
  }

  async function dbarrierCycle(): Promise<void> {
    const s = await ctx.currentSession();
    const db = new DoubleBarrier(s, cfg.name, cfg.count ?? 1);
    const started = now();
    await db.enter({ signal: limit(ctx) });
    const own = db.key!;
    // The round as the library entered it: `ready` read now may be a later round's put already.
    const ready = db.openedAt!;
    const entered = await readPrefix(client, `${cfg.name}/`);
    const ownKv = entered.kvs.find((k) => k.key === own);
    if (ownKv) {
      ctx.emit({
        t: 'recipe',
        kind: 'dbarrier-enter',
        own: ownKv.create.toString(),
        ready: ready.toString(),
        rev: entered.rev.toString(),
        waitedMs: Math.round(now() - started),
        at: now(),
      });
    }
    await ctx.pause(rng.between(cfg.holdMs[0], cfg.holdMs[1]), ctx.stop);
    // Not stopped by shutdown: every member of the round has entered and is about to leave, and an
    // abandoned round would leave `ready` (no lease, as Go's) behind.
    const leaving = now();
    await db.leave({ signal: limit(ctx, false) });
    const left = await readPrefix(client, `${cfg.name}/`);
    ctx.emit({
      t: 'recipe',
      kind: 'dbarrier-leave',
      ready: ready.toString(),
      rev: left.rev.toString(),
      waitedMs: Math.round(now() - leaving),
      at: now(),
    });
  }

  /** After a failed lockAll: keys of `lease` under `names` still there once the release had time (3 TTLs + 5 s). */
  async function leftover(names: string[], lease: bigint): Promise<string[] | undefined> {
    const until = now() + 3 * cfg.ttl * 1000 + 5000;
    let last: string[] | undefined;
    for (;;) {
      try {
        const r = await readPrefix(client, `${cfg.name}/`);
        last = r.kvs.filter((k) => k.lease === lease && names.some((n) => k.key.startsWith(`${n}/`))).map((k) => `${k.key}@${k.create}`);
        if (last.length === 0) return last;
      } catch {
        last = undefined; // an outage says nothing: judge only what a read showed at the end
      }
      if (now() >= until) return last;
      await ctx.pause(250);
    }
  }

  async function multilockCycle(): Promise<void> {
    const s = await ctx.currentSession();
    const all = [0, 1, 2, 3].map((i) => `${cfg.name}/m${i}`);
    const names = [...all].sort(() => rng.between(0, 1) - 0.5).slice(0, rng.int(2, 3));
    let handle: MultiLockHandle;
    try {
      handle = await lockAll(s, names, { signal: limit(ctx) });
    } catch (err) {
      if (!ctx.stop.aborted) {
        const left = await leftover(names, s.leaseId);
        if (left !== undefined) ctx.emit({ t: 'recipe', kind: 'multi-failed', leftover: left, at: now() });
      }
      throw err;
    }
    try {
      const seen = await readPrefix(client, `${cfg.name}/`);
      ctx.emit({
        t: 'recipe',
        kind: 'multi-acquired',
        names,
        tokens: Object.fromEntries([...handle.fencingTokens].map(([n, t]) => [n, t.toString()])),
        rev: seen.rev.toString(),
        seen: seen.kvs.map((k) => ({ key: k.key, create: k.create.toString(), lease: k.lease.toString(16) })),
        at: now(),
      });
      await ctx.pause(rng.between(cfg.holdMs[0], cfg.holdMs[1]), handle.signal);
    } finally {
      await handle.unlock();
    }
  }

  return { barrier: barrierCycle, dbarrier: dbarrierCycle, multilock: multilockCycle };
}
