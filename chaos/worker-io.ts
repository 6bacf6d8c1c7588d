// A chaos worker's side of its reports (JSON lines to the parent on stdout): events, errors with
// their stable code, and a session's end; and the pause every cycle waits with.
import { EtcdError, LeaseNotFoundError, type Session } from '../src/index.js';
import { now, type WorkerEvent } from './common.js';

export function emit(e: WorkerEvent): void {
  process.stdout.write(`${JSON.stringify(e)}\n`);
}

let errors = 0;

/** How many errors this worker reported. */
export function errorCount(): number {
  return errors;
}

export function reportError(opName: string, err: unknown, used?: Session): void {
  errors++;
  const e = err as Error;
  const message = String(e?.message ?? err).slice(0, 300);
  const ev: WorkerEvent = { t: 'error', op: opName, name: e?.name ?? typeof err, message, at: now() };
  const code = codeOf(err);
  if (code !== undefined) ev.code = code;
  // "Lease not found" while the session that made the call still counted its lease as proven alive
  // would mean the server expired it earlier than the client's conservative deadline: the parent
  // fails the run on it (leftMs > 0).
  if (err instanceof LeaseNotFoundError && used) ev.leftMs = leftMs(used);
  emit(ev);
}

/**
 * The error's stable code: the library's `code`, or ABORTED for the DOMException of our own lock-wait
 * limit (AbortSignal.timeout) or shutdown (told apart by DOMException's own numeric codes); else
 * undefined, an error the library should not have thrown.
 */
function codeOf(err: unknown): string | undefined {
  if (err instanceof EtcdError) return err.code;
  if (err instanceof DOMException && (err.code === DOMException.TIMEOUT_ERR || err.code === DOMException.ABORT_ERR)) return 'ABORTED';
  return undefined;
}

/**
 * The session's loss deadline minus now: how long it would still have counted its lease as alive.
 * Read from the session's private deadline (a test harness may look inside): remainingMs() says 0
 * once the session ended, and this is asked exactly then.
 */
function leftMs(s: Session): number {
  return (s as unknown as { lossAt(): number }).lossAt() - performance.now();
}

/** Reports a session's end other than our own close, with its deadline when etcd said the lease was gone. */
export function watchSession(s: Session): void {
  void s.done.then((e) => {
    if (e.reason === 'closed' || e.reason === 'client_closed') return;
    const ev: WorkerEvent = { t: 'session-lost', lease: s.leaseId.toString(16), reason: e.reason, at: now() };
    if (e.reason === 'lease_gone') ev.leftMs = leftMs(s);
    emit(ev);
  });
}

/** Resolves after `ms`, or early (without throwing) when `signal` aborts. */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
