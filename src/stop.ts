// The one way a call stops waiting: its caller's signal aborts, or its session is lost. When both
// have, the caller's reason is the one given. Pure: nothing here knows etcd.
import { rethrown } from './rethrow.js';

/** Whether `signal` (the caller's) or `session` (the session's) has aborted. */
export function isStopped(signal: AbortSignal | undefined, session: AbortSignal | undefined): boolean {
  return signal?.aborted === true || session?.aborted === true;
}

/**
 * What a call that failed with `err` reports: the session's loss if the session was lost meanwhile
 * (the loss ended the call, not the error of a request in flight then, such as etcd unreachable),
 * unless the caller's signal aborted.
 */
export function failureOf(err: unknown, signal: AbortSignal | undefined, session: AbortSignal | undefined): unknown {
  return session?.aborted && !signal?.aborted ? rethrown(session.reason) : err;
}

/** Why the call stops: the caller's reason if its signal aborted, else the session's. */
export function stopReason(signal: AbortSignal | undefined, session: AbortSignal | undefined): unknown {
  return signal?.aborted ? signal.reason : session?.reason;
}

/**
 * Calls `stop` once, with {@link stopReason}, when `signal` or `session` aborts (the caller checks
 * {@link isStopped} first: an abort that already happened is not reported). Returns what removes
 * the listeners.
 */
export function onStop(signal: AbortSignal | undefined, session: AbortSignal | undefined, stop: (reason: unknown) => void): () => void {
  const listener = (): void => {
    off();
    stop(stopReason(signal, session));
  };
  const off = (): void => {
    signal?.removeEventListener('abort', listener);
    session?.removeEventListener('abort', listener);
  };
  signal?.addEventListener('abort', listener, { once: true });
  session?.addEventListener('abort', listener, { once: true });
  return off;
}

/** A session as a call that stops on its loss sees it: its signal, and listeners told when it ends (see Session.addEndListener). */
export interface Ending {
  readonly signal: AbortSignal;
  addEndListener(listener: () => void): void;
  removeEndListener(listener: () => void): void;
}

/**
 * {@link onStop} for an object that keeps `signal` and `session` itself (a wait, one of perhaps
 * 10,000): `listener` is called once when `signal` aborts or `session` ends, and removed from both by
 * {@link offStop}. It listens on the session as an end listener, not on its signal: less memory.
 */
export function listenStop(signal: AbortSignal | undefined, session: Ending | undefined, listener: () => void): void {
  signal?.addEventListener('abort', listener, { once: true });
  session?.addEndListener(listener);
}

/** Removes a {@link listenStop} listener from both. */
export function offStop(signal: AbortSignal | undefined, session: Ending | undefined, listener: () => void): void {
  signal?.removeEventListener('abort', listener);
  session?.removeEndListener(listener);
}

/** Resolves once `p` settles (either way); rejects with the stop reason if the call stops first. */
export function settledOrStopped(p: Promise<unknown>, signal: AbortSignal | undefined, session: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (isStopped(signal, session)) return reject(stopReason(signal, session));
    const unlisten = onStop(signal, session, reject);
    p.then(
      () => (unlisten(), resolve()),
      () => (unlisten(), resolve()),
    );
  });
}

/** One AbortSignal for "stop waiting" (aborted at once if either already has); `dispose` removes the listeners. */
export function stopSignal(signal: AbortSignal | undefined, session: AbortSignal): { signal: AbortSignal; dispose(): void } {
  const c = new AbortController();
  if (isStopped(signal, session)) {
    c.abort(stopReason(signal, session));
    return { signal: c.signal, dispose: () => {} };
  }
  return { signal: c.signal, dispose: onStop(signal, session, (reason) => c.abort(reason)) };
}
