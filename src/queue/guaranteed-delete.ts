// The guaranteed delete: one of our keys is deleted, guarded on its incarnation, retried until it is
// gone or the session ends (Curator's guaranteed delete), and what waits for it.
import { Backoff, sleep } from '../client/backoff.js';
import { compare, type KeyValue, op } from '../client/kv.js';
import { channels, type DeleteOutcome, type ReleaseDoneMessage, type ReleaseRetryMessage } from '../diagnostics.js';
import { telemetryOf } from '../metrics/telemetry.js';
import { queuePrefix } from '../keys.js';
import { finishBeforeClose, type Session } from '../session.js';
import { InFlightDeletes, sessionQueue } from './state.js';

/** What a key is held for: for the metrics and the diagnostics channels. */
export interface ReleaseWhat {
  /** lock, permit, read, write, campaign, or barrier (a double barrier's member key). */
  kind: string;
  /** The lock, semaphore, election or barrier name. */
  name: string;
}

/** A delete of one incarnation of a key that keeps trying until the key is gone or the session ends. */
export interface GuaranteedDelete {
  /** The first attempt: rejects with its error while the delete goes on in the background. */
  readonly first: Promise<void>;
  /** Settles once the key is gone (deleted, or no longer that incarnation) or the session ended; never rejects. */
  readonly done: Promise<DeleteOutcome>;
}

/**
 * Deletes `key` if it is still incarnation `token` (or, `token` unknown, if it is on our lease), retried
 * with backoff until it lands or the session ends: a key left behind would block everyone queued after
 * it as long as the session lives. Under every release, resign, leave and aborted acquire. Each retry
 * is guarded as the first, so it never deletes a later incarnation.
 */
export function deleteUntilGone(session: Session, key: string, token: bigint | undefined, what: ReleaseWhat): GuaranteedDelete {
  const first = deleteOnce(session, key, token);
  const done = retryUntilGone(session, key, token, what, first);
  // An enqueue of this session on the key, or behind it, waits for this delete (InFlightDeletes).
  (sessionQueue(session).deletes ??= new InFlightDeletes()).add(key, done);
  return { first, done };
}

/** One guarded delete. No signal: even a session lost to its local deadline may still have the key on the server. */
async function deleteOnce(session: Session, key: string, token: bigint | undefined): Promise<void> {
  const guard = token !== undefined ? compare.createRevision(key, '=', token) : compare.lease(key, '=', session.leaseId);
  await session.client.txn(
    { compare: [guard], success: [op.delete(key)], failure: [] },
    { idempotent: true, coalesce: { scope: queuePrefix(key) } },
  );
}

/** The key's lease goes (or went) anyway: stop trying. */
function stopped(session: Session): DeleteOutcome | undefined {
  if (session.client.closed) return 'client_closed';
  if (session.signal.aborted) return 'session_ended';
  return undefined;
}

async function retryUntilGone(
  session: Session,
  key: string,
  token: bigint | undefined,
  what: ReleaseWhat,
  first: Promise<void>,
): Promise<DeleteOutcome> {
  try {
    await first;
    return 'deleted'; // the common case: nothing to report, nothing allocated
  } catch (err) {
    if (stopped(session)) return stopped(session)!;
    return keepTrying(session, key, token, what, err);
  }
}

async function keepTrying(
  session: Session,
  key: string,
  token: bigint | undefined,
  what: ReleaseWhat,
  firstError: unknown,
): Promise<DeleteOutcome> {
  const tel = telemetryOf(session.client);
  const attrs = tel.metricsOn ? tel.kindOnly(what.kind) : undefined;
  const since = performance.now();
  let resolveDone!: (o: DeleteOutcome) => void;
  // close() of the session or client waits for this, within its deadline, before revoking.
  finishBeforeClose(session, new Promise<DeleteOutcome>((r) => (resolveDone = r)));
  if (attrs) tel.releasePending.add(1, attrs);
  const backoff = new Backoff(100, 2000);
  let attempts = 1;
  let err = firstError;
  let outcome: DeleteOutcome | undefined;
  try {
    for (;;) {
      if (attrs) tel.releaseRetries.add(1, attrs);
      if (channels.releaseRetry.hasSubscribers) {
        const code = (err as { code?: unknown } | undefined)?.code;
        channels.releaseRetry.publish({
          kind: what.kind,
          name: what.name,
          key,
          fencingToken: token,
          attempt: attempts,
          code: typeof code === 'string' || typeof code === 'number' ? code : undefined,
          message: err instanceof Error ? err.message : String(err),
          error: err,
        } satisfies ReleaseRetryMessage);
      }
      if ((outcome = stopped(session))) return outcome;
      await sleep(backoff.next(), session.signal).catch(() => {});
      if ((outcome = stopped(session))) return outcome;
      attempts++;
      try {
        await deleteOnce(session, key, token);
        return (outcome = 'deleted');
      } catch (e) {
        err = e;
      }
    }
  } finally {
    outcome ??= stopped(session) ?? 'deleted';
    if (attrs) tel.releasePending.add(-1, attrs);
    if (channels.releaseDone.hasSubscribers) {
      channels.releaseDone.publish({
        kind: what.kind,
        name: what.name,
        key,
        fencingToken: token,
        attempts,
        outcome,
        durationMs: performance.now() - since,
      } satisfies ReleaseDoneMessage);
    }
    resolveDone(outcome);
  }
}

/**
 * An enqueue attempt whose outcome was unknown may be applied long after (a frozen or cut-off member
 * forwards it when it wakes): landing after we released the key, it brings the key back on our live
 * lease, owned by nobody, blocking everyone behind it. So once such a key is released, it is watched
 * for the rest of the session (LateKeys), and a re-creation this process is not using is deleted.
 */
export function sweepWhenGivenUp(
  session: Session,
  key: string,
  inUse: () => boolean,
  remove: (fencingToken: bigint) => Promise<void>,
): void {
  if (sessionQueue(session).late?.givenUp(key)) void sweep(session, key, inUse, remove);
}

async function sweep(session: Session, key: string, inUse: () => boolean, remove: (fencingToken: bigint) => Promise<void>): Promise<void> {
  const client = session.client;
  const check = async (kv: KeyValue | undefined): Promise<void> => {
    if (!kv || kv.lease !== session.leaseId || inUse()) return;
    // Checked and sent in one step; an enqueue starting meanwhile waits for this delete to land.
    await remove(kv.createRevision);
  };
  while (!session.signal.aborted && !client.closed) {
    const w = client.watch(key, { signal: session.signal });
    try {
      await w.created;
      await check(await client.get(key)); // one that landed before the watch started
      for await (const batch of w) for (const e of batch.events) if (e.type === 'put') await check(e.kv);
      return; // the session ended
    } catch {
      // A compacted or broken watch: start again from now (the read covers the gap).
    } finally {
      w.cancel();
    }
  }
}
