import { channel } from 'node:diagnostics_channel';
import { Backoff, sleep } from '../client/backoff.js';
import { compare, op } from '../client/kv.js';
import { telemetryOf } from '../metrics/telemetry.js';
import { finishBeforeClose, type Session } from '../session.js';
import { sessionQueue } from './state.js';

/**
 * Diagnostics channel (`node:diagnostics_channel`): a delete of one of our keys (a release, a
 * resign, the clean-up of an aborted acquire, a double barrier's leave) failed and will be tried
 * again. Message: {@link ReleaseRetryMessage}.
 */
export const RELEASE_RETRY_CHANNEL = 'etcd-concurrency:release:retry';
/**
 * Diagnostics channel: a delete that needed retries is over: the key is gone, or the session ended
 * (its lease takes the key along). Message: {@link ReleaseDoneMessage}.
 */
export const RELEASE_DONE_CHANNEL = 'etcd-concurrency:release:done';

const retryChannel = channel(RELEASE_RETRY_CHANNEL);
const doneChannel = channel(RELEASE_DONE_CHANNEL);

/** What is released: for the metrics and the diagnostics channels. */
export interface ReleaseWhat {
  /** lock, permit, read, write, campaign, or barrier (a double barrier's member key). */
  kind: string;
  /** The lock, semaphore, election or barrier name. */
  name: string;
}

/** The message of {@link RELEASE_RETRY_CHANNEL}. */
export interface ReleaseRetryMessage {
  kind: string;
  name: string;
  key: string;
  /** The incarnation being deleted (the fencing token), when known. */
  fencingToken: bigint | undefined;
  /** Which attempt failed: 1 for the first. */
  attempt: number;
  /** The error's stable code when it has one (the gRPC status of a call that failed), else undefined. */
  code: string | number | undefined;
  message: string;
  error: unknown;
}

/** How a delete that keeps trying ended: the key is gone, or it stopped because the lease goes anyway. */
export type DeleteOutcome = 'deleted' | 'session_ended' | 'client_closed';

/** The message of {@link RELEASE_DONE_CHANNEL}. */
export interface ReleaseDoneMessage {
  kind: string;
  name: string;
  key: string;
  fencingToken: bigint | undefined;
  /** Attempts made, the successful one included. */
  attempts: number;
  outcome: DeleteOutcome;
  /** Milliseconds from the first failure to the end. */
  durationMs: number;
}

/** A delete of one incarnation of a key that keeps trying until the key is gone or the session ends. */
export interface GuaranteedDelete {
  /** The first attempt: rejects with its error while the delete goes on in the background. */
  readonly first: Promise<void>;
  /** Settles once the key is gone (deleted, or no longer that incarnation) or the session ended; never rejects. */
  readonly done: Promise<DeleteOutcome>;
}

/**
 * Deletes `key` if it is still incarnation `rev` (or, `rev` unknown, if it is on our lease), and
 * keeps trying with backoff until it lands or the session ends: a key left behind would block
 * everyone queued after it for as long as the session lives (Curator's guaranteed delete). The one
 * engine under every release, resign, leave and aborted acquire. Each retry is guarded as the first
 * was, so it can never delete a later incarnation.
 */
export function deleteUntilGone(session: Session, key: string, rev: bigint | undefined, what: ReleaseWhat): GuaranteedDelete {
  const first = deleteOnce(session, key, rev);
  const done = retryUntilGone(session, key, rev, what, first);
  // An enqueue of this session on the key, or behind it, waits for this delete (see deletes.ts).
  sessionQueue(session).deletes.add(key, done);
  return { first, done };
}

/** One guarded delete. No signal: even a session lost to its local deadline may still have the key on the server. */
async function deleteOnce(session: Session, key: string, rev: bigint | undefined): Promise<void> {
  const guard = rev !== undefined ? compare.createRevision(key, '=', rev) : compare.lease(key, '=', session.leaseId);
  await session.client.txn(
    { compare: [guard], success: [op.delete(key)], failure: [] },
    { idempotent: true, coalesce: { scope: key.slice(0, key.lastIndexOf('/') + 1) } },
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
  rev: bigint | undefined,
  what: ReleaseWhat,
  first: Promise<void>,
): Promise<DeleteOutcome> {
  try {
    await first;
    return 'deleted'; // the common case: nothing to report, nothing allocated
  } catch (err) {
    if (stopped(session)) return stopped(session)!;
    return keepTrying(session, key, rev, what, err);
  }
}

async function keepTrying(
  session: Session,
  key: string,
  rev: bigint | undefined,
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
      if (retryChannel.hasSubscribers) {
        const code = (err as { code?: unknown } | undefined)?.code;
        retryChannel.publish({
          kind: what.kind,
          name: what.name,
          key,
          fencingToken: rev,
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
        await deleteOnce(session, key, rev);
        return (outcome = 'deleted');
      } catch (e) {
        err = e;
      }
    }
  } finally {
    outcome ??= stopped(session) ?? 'deleted';
    if (attrs) tel.releasePending.add(-1, attrs);
    if (doneChannel.hasSubscribers) {
      doneChannel.publish({
        kind: what.kind,
        name: what.name,
        key,
        fencingToken: rev,
        attempts,
        outcome,
        durationMs: performance.now() - since,
      } satisfies ReleaseDoneMessage);
    }
    resolveDone(outcome);
  }
}

/**
 * What a release, resign or unlock resolves with. A release never rejects for want of etcd: real code
 * calls it once, in a `finally`, and an error there would hide the block's own outcome while telling
 * the caller to do something it cannot do better than the library. Instead a delete that fails is
 * retried in the background (see deleteUntilGone) and the result says so.
 */
export interface ReleaseResult {
  /**
   * `released`: the key is gone (or, shared with another call of this process, left to it).
   * `pending`: the first delete failed (see `error`); it is retried in the background, with
   * backoff, until the key is gone or the session ends. Nothing is left for the caller to do: the
   * handle's `signal` aborts once the key is gone, and `settled` resolves then.
   */
  readonly state: 'released' | 'pending';
  /** Why the first delete failed, when `state` is `pending`. */
  readonly error?: unknown;
  /** Resolves once the key is gone or the session ended (its lease takes the key along). Never rejects. */
  readonly settled: Promise<void>;
}

/** The result of a release that landed: one frozen object for every one of them. */
export const RELEASED: ReleaseResult = Object.freeze({ state: 'released', settled: Promise.resolve() });

/** Several releases as one (lockAll's unlock): pending while any is, with the first failure (or all of them) as `error`. */
export function combineReleases(results: readonly ReleaseResult[]): ReleaseResult {
  const pending = results.filter((r) => r.state === 'pending');
  if (pending.length === 0) return RELEASED;
  return {
    state: 'pending',
    error:
      pending.length === 1
        ? pending[0]!.error
        : new AggregateError(
            pending.map((r) => r.error),
            `${pending.length} releases are being retried`,
          ),
    settled: Promise.all(pending.map((r) => r.settled)).then(() => {}),
  };
}
